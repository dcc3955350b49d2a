#!/usr/bin/env python3
"""A real SMTP server for fronta's `mail/send` tests: aiosmtpd (Debian's python3-aiosmtpd),
started by the Rust tests (connectors/tests/smtp/mod.rs) on 127.0.0.1 and a free port.

    server.py --dir DIR [--security none|starttls|tls --cert PEM --key PEM]
              [--user USER --password PASSWORD] [--rules JSON]

It prints "READY <port>" on stdout once it listens, and exits when its stdin closes (so it
never outlives the test that started it).

Each accepted message is written to DIR/<n>.json as {"mailFrom", "rcptTos", "data",
"login"} ("data" is the message as received, "login" the user that logged in or null),
under a temporary name renamed into place *before* the final 250 is answered: when the
client holds the 250, the file is there.

--rules is a JSON object keyed by recipient address (lower case):
  {"reply": "451 4.3.0 try later", "times": 1}  answer this to RCPT TO the first `times`
                                                 times (every time without `times`),
                                                 then accept the recipient
  {"hang": "rcpt"}                               never answer its RCPT TO
  {"hang": "data"}                               take the message data, never answer the
                                                 final reply (and store nothing)
  {"close": "data"}                              take the message data, then drop the
                                                 connection without a final reply
With --user, AUTH (PLAIN, LOGIN) is required; with starttls, only after STARTTLS.
"""

import argparse
import asyncio
import json
import os
import ssl
import sys
import threading

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


class Handler:
    def __init__(self, directory, rules):
        self.directory = directory
        self.rules = rules
        self.count = 0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        rule = self.rules.get(address.lower())
        if rule is not None:
            if rule.get("hang") == "rcpt":
                await asyncio.sleep(3600)
            reply = rule.get("reply")
            if reply is not None:
                times = rule.get("times")
                if times is None or times > 0:
                    if times is not None:
                        rule["times"] = times - 1
                    return reply
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server, session, envelope):
        for address in envelope.rcpt_tos:
            rule = self.rules.get(address.lower())
            if rule is not None and rule.get("hang") == "data":
                await asyncio.sleep(3600)
            if rule is not None and rule.get("close") == "data":
                server.transport.abort()
                return "421 4.3.0 gone"  # never reaches the client
        self.count += 1
        data = envelope.content
        if isinstance(data, bytes):
            data = data.decode("utf-8", errors="replace")
        login = session.auth_data.login.decode() if session.auth_data else None
        record = {
            "mailFrom": envelope.mail_from,
            "rcptTos": envelope.rcpt_tos,
            "data": data,
            "login": login,
        }
        final = os.path.join(self.directory, f"{self.count}.json")
        partial = final + ".partial"
        with open(partial, "w", encoding="utf-8") as out:
            json.dump(record, out)
        os.rename(partial, final)
        return f"250 2.0.0 Ok: queued as {self.count}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--security", choices=["none", "starttls", "tls"], default="none")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--rules", default="{}")
    args = parser.parse_args()
    rules = {address.lower(): rule for address, rule in json.loads(args.rules).items()}
    handler = Handler(args.dir, rules)

    context = None
    if args.security != "none":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)

    def authenticator(server, session, envelope, mechanism, auth_data):
        good = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == args.user
            and auth_data.password.decode() == args.password
        )
        if good:
            return AuthResult(success=True, auth_data=auth_data)
        # Not "handled": aiosmtpd then answers 535 itself.
        return AuthResult(success=False, handled=False)

    def factory():
        options = {"hostname": "mail.test", "enable_SMTPUTF8": True}
        if args.security == "starttls":
            options.update(tls_context=context, require_starttls=True)
        if args.user is not None:
            options.update(
                authenticator=authenticator,
                auth_required=True,
                # Implicit TLS protects the whole connection; aiosmtpd only counts STARTTLS.
                auth_require_tls=args.security == "starttls",
            )
        return SMTP(handler, **options)

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    implicit = context if args.security == "tls" else None
    server = loop.run_until_complete(
        loop.create_server(factory, host="127.0.0.1", port=0, ssl=implicit)
    )
    port = server.sockets[0].getsockname()[1]

    def stop_when_stdin_closes():
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=stop_when_stdin_closes, daemon=True).start()
    print(f"READY {port}", flush=True)
    loop.run_forever()


if __name__ == "__main__":
    main()
