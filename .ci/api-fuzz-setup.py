"""The objects .ci/api-fuzz's routes with ids reach, made through the API itself, and the
schemathesis.toml that hands their ids to the operations that take them.

Usage: api-fuzz-setup.py BASE_URL ADMIN_TOKEN WORK_DIR. Writes WORK_DIR/tenant.token and
WORK_DIR/schemathesis.toml; fails loudly when an object cannot be made (the fuzzer
would then only meet 404s and prove nothing)."""

import json
import sys
import time
import urllib.error
import urllib.request

base, admin, work = sys.argv[1], sys.argv[2], sys.argv[3]


def call(method, path, token, body=None, expect=(200, 201, 202, 204)):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, text = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    if status not in expect:
        sys.exit(f"api-fuzz setup: {method} {path} answered {status}: {text[:500]!r}")
    return json.loads(text) if text else None


def poll(what, check, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    sys.exit(f"api-fuzz setup: {what} did not happen within {seconds}s")


tenant = call("POST", "/api/admin/tenants", admin, {"name": "Fuzz"})
token = tenant["token"]
# A second tenant for the admin's routes that change a tenant.
call("POST", "/api/admin/tenants", admin, {"name": "Fuzz admin"})

group = call("POST", "/api/groups", token, {"name": "Support"})
member = call("POST", f"/api/groups/{group['id']}/members", token, {"name": "Ada", "capacity": 5})
spare_group = call("POST", "/api/groups", token, {"name": "Spare"})
ticket_type = call("POST", "/api/ticket-types", token,
                   {"name": "order", "statuses": ["new", "done"], "fields": []})
spare_type = call("POST", "/api/ticket-types", token, {"name": "spare", "statuses": ["open"]})

manual = call("POST", "/api/automations", token, {
    "name": "Make a ticket", "trigger": {"type": "manual"},
    "steps": [{"name": "upsert", "op": "ticket/upsert",
               "input": {"externalId": "fuzz-1", "title": "Fuzz order", "type": "order",
                         "status": "new"}}]})
webhook = call("POST", "/api/automations", token, {
    "name": "Orders", "trigger": {"type": "webhook", "params": [
        {"name": "orderId", "path": "order.id", "type": "string", "required": False}]},
    "steps": []})
failing = call("POST", "/api/automations", token, {
    "name": "Fails", "trigger": {"type": "manual"},
    "steps": [{"name": "close", "op": "ticket/close", "input": {"ticket": "TK-999999"}}]})
# A second version of the manual automation, for the versions, diff and rollback routes.
manual_def = {k: v for k, v in call("GET", f"/api/automations/{manual['id']}", token).items()}
manual_def["name"] = "Make a ticket (v2)"
call("PUT", f"/api/automations/{manual['id']}", token, manual_def)

run = call("POST", f"/api/automations/{manual['id']}/runs", token, {})
poll("the manual run", lambda: call("GET", f"/api/runs/{run['runId']}", token)["status"]
     in ("completed", "failed"))
tickets = poll("a ticket", lambda: call("GET", "/api/tickets", token)["items"])
failed_run = call("POST", f"/api/automations/{failing['id']}/runs", token, {})
poll("the failing run", lambda: call("GET", f"/api/runs/{failed_run['runId']}", token)["status"]
     in ("failed", "completed"))
incidents = poll("an incident", lambda: call("GET", "/api/incidents", token)["items"], 30)
bulk = call("POST", "/api/runs/bulk", token,
            {"action": "retry", "filter": {"status": "failed", "automation": webhook["id"]}})
call("PUT", "/api/secrets/fuzz", token, {"value": "s3cret"})
call("POST", "/api/mcp-servers", token, {
    "name": "tools", "transport": {"type": "http", "url": "https://mcp.example.com/mcp"}})
call("POST", "/api/mail-servers", token, {
    "name": "relay", "host": "mail.example.com", "from": "desk@example.com"})
widget = call("POST", "/api/widgets", token, {
    "name": "Count", "op": "http/request", "input": {"url": "https://api.example.com/count"},
    "ttlSec": 3600})
webhook_token = webhook["webhookUrl"].rsplit("/", 1)[-1]
# What the DELETEs remove: objects of their own, so the other methods keep theirs.
doomed_group = call("POST", "/api/groups", token, {"name": "Doomed"})
doomed_member = call("POST", f"/api/groups/{group['id']}/members", token, {"name": "Bo"})
doomed_type = call("POST", "/api/ticket-types", token, {"name": "doomed", "statuses": ["x"]})
doomed_automation = call("POST", "/api/automations", token, {
    "name": "Doomed", "trigger": {"type": "manual"}, "steps": []})
call("PUT", "/api/secrets/doomed", token, {"value": "gone"})
call("PUT", "/api/mcp-servers/doomed", token, {
    "transport": {"type": "http", "url": "https://mcp.example.com/mcp"}})
call("PUT", "/api/mail-servers/doomed", token, {
    "host": "mail.example.com", "from": "desk@example.com"})
doomed_widget = call("POST", "/api/widgets", token, {
    "name": "Doomed", "op": "http/request", "input": {"url": "https://api.example.com/x"},
    "ttlSec": 60})
doomed_token = call("POST", "/api/tokens", token, {"name": "doomed", "role": "viewer"})
doomed = {
    "/api/tokens/{id}": {"id": doomed_token["id"]},
    "/api/groups/{id}": {"id": doomed_group["id"]},
    "/api/groups/{id}/members/{member_id}": {"id": group["id"], "member_id": doomed_member["id"]},
    "/api/ticket-types/{id}": {"id": doomed_type["id"]},
    "/api/automations/{id}": {"id": doomed_automation["id"]},
    "/api/secrets/{name}": {"name": "doomed"},
    "/api/mcp-servers/{name}": {"name": "doomed"},
    "/api/mail-servers/{name}": {"name": "doomed"},
    "/api/widgets/{id}": {"id": doomed_widget["id"]},
}
document = call("GET", "/api/openapi.json", token)
admin_tenants = call("GET", "/api/admin/tenants", admin)["items"]
spare_tenant = next(t for t in admin_tenants if t["name"] == "Fuzz admin")

ids = {
    "/webhook/{token}": {"token": webhook_token},
    "/api/tokens/{id}": {"id": doomed_token["id"]},
    "/api/admin/tenants/{id}/retention": {"id": spare_tenant["id"]},
    "/api/admin/incidents/{id}": {"id": incidents[0]["id"]},
    "/api/groups/{id}": {"id": spare_group["id"]},
    "/api/groups/{id}/members": {"id": group["id"]},
    "/api/groups/{id}/members/{member_id}": {"id": group["id"], "member_id": member["id"]},
    "/api/ticket-types/{id}": {"id": spare_type["id"]},
    "/api/automations/{id}": {"id": webhook["id"]},
    "/api/automations/{id}/test": {"id": manual["id"]},
    "/api/automations/{id}/pause": {"id": webhook["id"]},
    "/api/automations/{id}/resume": {"id": webhook["id"]},
    "/api/automations/{id}/versions": {"id": manual["id"]},
    "/api/automations/{id}/versions/{version}": {"id": manual["id"], "version": "1"},
    "/api/automations/{id}/versions/{version}/diff": {"id": manual["id"], "version": "2"},
    "/api/automations/{id}/rollback": {"id": manual["id"]},
    "/api/automations/{id}/runs": {"id": manual["id"]},
    "/api/tickets/{id}": {"id": tickets[0]["id"]},
    "/api/runs/bulk/{id}": {"id": bulk["id"]},
    "/api/runs/bulk/{id}/cancel": {"id": bulk["id"]},
    "/api/runs/{id}": {"id": run["runId"]},
    "/api/runs/{id}/cancel": {"id": run["runId"]},
    "/api/runs/{id}/retry": {"id": failed_run["runId"]},
    "/api/incidents/{id}": {"id": incidents[0]["id"]},
    "/api/incidents/{id}/resolve": {"id": incidents[0]["id"]},
    "/api/secrets/{name}": {"name": "fuzz"},
    "/api/mcp-servers/{name}": {"name": "tools"},
    "/api/mail-servers/{name}": {"name": "relay"},
    "/api/widgets/{id}": {"id": widget["id"]},
    "/api/widgets/{id}/refresh": {"id": widget["id"]},
}

# The calls of a connector now, which a breaker may refuse (503 service_waiting).
WAITING = {"post_api_widgets_id_refresh"}

with open(f"{work}/tenant.token", "w") as out:
    out.write(token)
lines = [
    "# Written by .ci/api-fuzz-setup.py: the ids of real objects, per operation.",
    # A request the schema allows may still be refused for what it means (an unknown
    # status of the type, a name taken, a run that cannot be retried): 400, 404, 409
    # and 422 are the API's answers to meaning, never to shape.
    "[checks.positive_data_acceptance]",
    'expected-statuses = ["2xx", "400", "404", "409", "422", "503"]',
    "",
]
for path, parameters in ids.items():
    for method, operation in document["paths"][path].items():
        given = doomed.get(path, parameters) if method == "delete" else parameters
        lines.append("[[operations]]")
        lines.append(f"include-operation-id = {json.dumps(operation['operationId'])}")
        lines.append("parameters = { " + ", ".join(
            f"{json.dumps(name)} = {json.dumps(value)}" for name, value in given.items()) + " }")
        if operation["operationId"] in WAITING:
            # 503 `service_waiting` with Retry-After is the designed answer while the
            # service's breaker is open (the widget's URL is unreachable here).
            lines.append("[operations.checks.not_a_server_error]")
            lines.append('expected-statuses = ["2xx", "3xx", "4xx", "503"]')
        lines.append("")
with open(f"{work}/schemathesis.toml", "w") as out:
    out.write("\n".join(lines))
print(f"api-fuzz setup: {len(ids)} routes with ids reach real objects "
      f"({len(doomed)} DELETEs objects of their own)")
