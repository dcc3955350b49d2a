#!/usr/bin/env python3
"""Where Postgres spends its time in a drain: fronta against graphile-worker and
apalis-postgres, each on a fresh database, 64 in flight.

    python3 bench/profile_pg.py [JOBS]          # default 20,000
    python3 bench/profile_pg.py --machine [JOBS]  # machine CPU per job, 2 processes

`--machine` answers what a 2-process drain costs the whole machine per job (every core's
busy time from /proc/stat: the workers, Postgres and everything else), for fronta and
graphile-worker, each less an enqueue-only run of the same jobs (the drain command
enqueues its backlog first, untimed). On 2 cores, 2 × 10^6 / (µs per job) is the most
jobs/s the machine could drain at that cost.

For each: the drain's rate, the CPU seconds of the Postgres backends serving its database
(summed from /proc/PID/stat while it runs), and the database's counters afterwards
(commits, rows returned, sequential scans and rows they read on the biggest table). Needs
the binaries `bench/run.py` builds and a Postgres on this machine at $BENCH_PG.
"""

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")


def psql(db, query):
    return subprocess.run(["psql", f"{PG}/{db}", "-tAc", query], capture_output=True, text=True).stdout.strip()


def backend_cpu(db):
    """CPU seconds so far of each Postgres backend serving `db`."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            if cmd.startswith("postgres:") and f" {db} " in cmd:
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return out


def machine_busy():
    """Busy CPU seconds of the whole machine so far (every core, /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@contextmanager
def fresh_db():
    """The name of a new database, dropped afterwards."""
    db = "profile_" + uuid.uuid4().hex[:10]
    psql("postgres", f"create database {db}")
    try:
        yield db
    finally:
        psql("postgres", f"drop database {db} with (force)")


def run(command):
    """Run a bench command (its figures are its stdout, one JSON document)."""
    return subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, RUST_LOG="warn"))


def machine_cost(command_of):
    """(busy machine CPU seconds, figures) of one command on a fresh database."""
    with fresh_db() as db:
        before = machine_busy()
        done = run(command_of(f"{PG}/{db}?sslmode=disable"))
        busy = machine_busy() - before
    try:
        return busy, json.loads(done.stdout)
    except json.JSONDecodeError:
        return busy, {"error": done.stderr.strip()[-200:]}


def machine(jobs):
    fronta = str(BENCH.parent / "target" / "release" / "fronta")
    graphile = ["node", str(BENCH / "peers" / "graphile-worker" / "bench.js")]
    n = int(jobs)
    systems = [
        ("fronta", lambda url: [fronta, "--database", url, "bench", "--runs", jobs, "--callers", "1", "--batch", "1000", "--in-flight", "64", "--latency-runs", "0", "--processes", "2", "--json"],
         lambda url: [fronta, "--database", url, "bench", "--runs", jobs, "--callers", "1", "--batch", "1000", "--no-drain", "--json"]),
        ("graphile-worker", lambda url: [*graphile, "--db", url, "--workload", "drain", "--jobs", jobs, "--in-flight", "64", "--processes", "2", "--cap-seconds", "120"],
         lambda url: [*graphile, "--db", url, "--workload", "enqueue", "--jobs", jobs, "--callers", "1", "--batch", "1000"]),
    ]
    for label, drain, enqueue in systems:
        drained, figures = machine_cost(drain)
        enqueued, _ = machine_cost(enqueue)
        rate = figures.get("drainedPerSecond") or figures.get("perSecond")
        per_job = (drained - enqueued) * 1e6 / n
        print(f"{label}, 2 processes: drain run {drained:.2f} s busy, enqueue-only run {enqueued:.2f} s; "
              f"{per_job:.1f} µs of machine CPU per job drained; drain rate {rate:,.0f} jobs/s "
              f"(exactly-once check ok: {figures.get('ok')}); bound on 2 cores at this cost: {2e6 / per_job:,.0f} jobs/s")


def profile(label, command_of):
    with fresh_db() as db:
        profile_on(db, label, command_of)


def profile_on(db, label, command_of):
    seen, stop = {}, []

    def sample():
        while not stop:
            for pid, cpu in backend_cpu(db).items():
                seen[pid] = max(seen.get(pid, 0.0), cpu)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    done = run(command_of(f"{PG}/{db}"))
    stop.append(True)
    sampler.join()
    counters = psql(db, "select xact_commit, tup_returned from pg_stat_database where datname = current_database()")
    tables = psql(db, "select relname, seq_scan, seq_tup_read from pg_stat_user_tables order by seq_tup_read desc limit 1")
    try:
        figures = json.loads(done.stdout)
        rate = figures.get("drainedPerSecond") or figures.get("perSecond")
        last = f"{rate:,.0f} jobs/s, exactly-once check ok: {figures.get('ok')}"
    except (json.JSONDecodeError, TypeError):
        last = (done.stdout.strip().splitlines() or [done.stderr.strip()[-200:]])[-1]
    print(f"{label}: Postgres backends {sum(seen.values()):.2f} s CPU; commits|rows returned {counters}; "
          f"top table|seq scans|rows read {tables}\n    {last[:240]}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--machine":
        machine(sys.argv[2] if len(sys.argv) > 2 else "100000")
        return
    jobs = sys.argv[1] if len(sys.argv) > 1 else "20000"
    fronta = str(BENCH.parent / "target" / "release" / "fronta")
    drain = ["--runs", jobs, "--callers", "1", "--batch", "1000", "--in-flight", "64", "--latency-runs", "0", "--json"]
    profile("fronta, 1 process", lambda url: [fronta, "--database", url, "bench", *drain])
    profile("fronta, 2 processes", lambda url: [fronta, "--database", url, "bench", *drain, "--processes", "2"])
    peer = ["--workload", "drain", "--jobs", jobs, "--in-flight", "64", "--cap-seconds", "120"]
    profile("graphile-worker", lambda url: ["node", str(BENCH / "peers" / "graphile-worker" / "bench.js"), "--db", url, *peer])
    profile("apalis-postgres", lambda url: [str(BENCH / "target" / "release" / "bench-apalis-postgres"), "--db", url, *peer])


if __name__ == "__main__":
    main()
