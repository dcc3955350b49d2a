#!/usr/bin/env python3
"""fronta against its peers, side by side: runs every cell, checks exactly-once after
every run, writes a markdown table.

    python3 bench/run.py            # the full run (≤ 25 min on 2 vCPU), 3 runs per cell
    python3 bench/run.py --quick    # a smoke run (< 3 min), 1 run per cell, small sizes
    python3 bench/run.py --sections history   # reads against 1 k … 10 M finished runs (~20 min)
    python3 bench/run.py --sections mixed --only fronta-pg,graphile   # short and long runs together (~3 min)

Systems: fronta (the release `fronta` binary, `fronta bench …`) on SQLite (WAL,
synchronous FULL and NORMAL) and on Postgres; apalis 1.0 + apalis-sqlite 1.0 (FULL and
NORMAL); apalis-postgres 1.0, graphile-worker 0.18 and pg-boss 12 on Postgres
(synchronous_commit on). Every run gets a fresh database (a new SQLite file; a new
Postgres database, dropped afterwards). A run whose exactly-once check fails (a job ran
twice, or a job neither ran nor is still pending) is shown as DISQUALIFIED and never
enters a median. Cells that cannot finish in time stop at a named cap (`drain_cap`) and
report the rate over what they did.

Needs: cargo, node + npm (the Node peers are installed with `npm ci` when
node_modules is missing), psql, a Postgres at $BENCH_PG (default
postgres://postgres@127.0.0.1:5432, trust auth).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")

# Sizes and caps, full and quick. Every named limit of the run is here.
FULL = dict(
    runs=3,
    backlog_runs=1,  # RSS: one run (a 1,000,000-run backlog takes a while to enqueue)
    claim_runs=3,  # claim cost: 3 runs per cell (one run of 500 claims swung 62–118 µs at 1,000 queued)
    enqueue_single_jobs=1_000,  # one job per call (×4 from 32 callers)
    enqueue_batched_jobs=100_000,  # batches of enqueue_batch_1 (1 caller) / _32 (32 callers)
    enqueue_batch_1=1_000,
    enqueue_batch_32=100,
    drain_jobs=100_000,
    drain_in_flight=[1, 8, 64],
    drain_cap=10.0,  # seconds a drain may take; the rate is then over what ran
    drain_cap_one_in_flight=5.0,
    latency_jobs=1_000,
    latency_rate=200,  # jobs/s, paced, one enqueuer, an idle worker
    http_seconds=5.0,
    http_rate=1_000,  # requests/s, 4 kept-alive connections
    claim_queued=[1_000, 10_000, 100_000, 1_000_000],
    claim_samples=500,
    rss_queued=1_000_000,
    rss_tenants=1_000,
    rss_seconds=10,
    cell_timeout=120,  # seconds before a run is killed (then it counts as failed)
    backlog_timeout=400,  # the same for claim and rss (they enqueue the backlog first)
    history_sizes=[1_000, 100_000, 1_000_000, 10_000_000],  # finished runs, a fresh database each
    history_samples=200,  # timed repetitions of each measure per size
    history_timeout=3_600,  # seconds for one store's whole history run (10 M runs are written first)
    # The mixed cell: `mixed_rate` jobs/s for `mixed_seconds` into 2 processes, one job in
    # 20 sleeping 2 s, at 64 in flight each (the cell) and at 16 (slots scarce).
    # 200/s is what both systems carry on 2 vCPU with their enqueues keeping pace
    # (graphile-worker's enqueue calls fell behind at 350/s); the long jobs then hold
    # 0.05 × 200 × 2 s = 20 slots on average: 20 of 128 at 64 in flight, 20 of 32 at 16
    # (BENCHMARKS.md, "Mixed workload").
    mixed_rate=200,
    mixed_seconds=20,
    mixed_long_every=20,
    mixed_long_ms=2_000,
    mixed_in_flight=[64, 16],
    mixed_processes=2,
    mixed_cap=60,  # seconds after the last arrival for every job to finish
)
QUICK = dict(
    runs=1,
    backlog_runs=1,
    claim_runs=1,
    enqueue_single_jobs=200,
    enqueue_batched_jobs=10_000,
    enqueue_batch_1=1_000,
    enqueue_batch_32=100,
    drain_jobs=10_000,
    drain_in_flight=[1, 64],
    drain_cap=2.5,
    drain_cap_one_in_flight=1.5,
    latency_jobs=200,
    latency_rate=200,
    http_seconds=1.0,
    http_rate=1_000,
    claim_queued=[1_000, 100_000],
    claim_samples=500,
    rss_queued=100_000,
    rss_tenants=100,
    rss_seconds=3,
    cell_timeout=60,
    backlog_timeout=120,
    history_sizes=[1_000, 100_000],
    history_samples=50,
    history_timeout=300,
    mixed_rate=200,
    mixed_seconds=5,
    mixed_long_every=20,
    mixed_long_ms=2_000,
    mixed_in_flight=[64],
    mixed_processes=2,
    mixed_cap=30,
)


def log(message):
    print(message, file=sys.stderr, flush=True)


def sh(args, cwd=None, check=True, timeout=None, env=None):
    return subprocess.run(
        args, cwd=cwd, check=check, timeout=timeout, env=env, text=True, capture_output=True
    )


# ---------------------------------------------------------------------------- set-up


def build(skip):
    if skip:
        return
    log("build: fronta (release)…")
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "fronta-cli"], cwd=ROOT, check=True)
    log("build: Rust peers (release, bench/ workspace)…")
    subprocess.run(["cargo", "build", "--release", "--locked"], cwd=BENCH, check=True)
    for peer in ["graphile-worker", "pg-boss"]:
        folder = BENCH / "peers" / peer
        if not (folder / "node_modules").is_dir():
            log(f"npm ci: {peer}…")
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=folder, check=True)


def fsync_rate(folder, seconds=1.0):
    """Single-page write + fsync per commit, as a WAL commit does: commits/s."""
    path = Path(folder) / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.pwrite(fd, b"x" * 4096, (n % 64) * 4096)
            os.fsync(fd)
            n += 1
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def machine(folder):
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1048576:.1f} GiB"
    except OSError:
        pass
    pg = sh(["psql", PG + "/postgres", "-tAc", "select version()"], check=False).stdout.strip()
    commit = sh(["psql", PG + "/postgres", "-tAc", "show synchronous_commit"], check=False).stdout.strip()
    load = os.getloadavg()
    return {
        "cpu": f"{os.cpu_count()} × {cpu}",
        "memory": mem,
        "kernel": platform.release(),
        "postgres": pg.split(" on ")[0] if pg else "?",
        "synchronous_commit": commit or "?",
        "node": sh(["node", "--version"], check=False).stdout.strip(),
        "fsync_per_second": fsync_rate(folder),
        "load_before": f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
    }


# ------------------------------------------------------------------------- databases


class Fresh:
    """A fresh database for one run: a SQLite path in a new folder, or a new Postgres
    database (dropped on exit)."""

    def __init__(self, kind, scratch):
        self.kind = kind
        self.scratch = scratch

    def __enter__(self):
        if self.kind == "sqlite":
            self.folder = tempfile.mkdtemp(dir=self.scratch)
            self.url = str(Path(self.folder) / "bench.db")
        else:
            self.name = "bench_" + uuid.uuid4().hex[:12]
            sh(["psql", PG + "/postgres", "-qc", f"create database {self.name}"])
            # One transport for every system: plain TCP. The Node peers' driver connects
            # without TLS unless told; sqlx (fronta, apalis-postgres) would negotiate TLS
            # with a server that offers it (sslmode=prefer), which cost fronta's drain
            # ~11 % on this machine.
            self.url = f"{PG}/{self.name}?sslmode=disable"
        return self.url

    def __exit__(self, *exc):
        if self.kind == "sqlite":
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            sh(["psql", PG + "/postgres", "-qc", f"drop database if exists {self.name} with (force)"], check=False)


# ---------------------------------------------------------------------------- systems

# $BENCH_FRONTA names another fronta binary (with --no-build: one built elsewhere).
FRONTA = Path(os.environ.get("BENCH_FRONTA", ROOT / "target" / "release" / "fronta"))
APALIS_SQLITE = BENCH / "target" / "release" / "bench-apalis-sqlite"
APALIS_PG = BENCH / "target" / "release" / "bench-apalis-postgres"


def node_peer(name):
    return ["node", str(BENCH / "peers" / name / "bench.js")]


# A system: label, database kind, synchronous (SQLite), and how to run each workload.
# `peer` systems speak bench/common's contract; `fronta` runs `fronta bench …`.
SYSTEMS = {
    "fronta-sqlite-full": dict(label="fronta · SQLite FULL", db="sqlite", sync="full", kind="fronta"),
    "fronta-sqlite-normal": dict(label="fronta · SQLite NORMAL", db="sqlite", sync="normal", kind="fronta"),
    "apalis-sqlite-full": dict(label="apalis-sqlite · FULL", db="sqlite", sync="full", kind="peer", cmd=[str(APALIS_SQLITE)], http=True),
    "apalis-sqlite-normal": dict(label="apalis-sqlite · NORMAL", db="sqlite", sync="normal", kind="peer", cmd=[str(APALIS_SQLITE)], http=True),
    "fronta-pg": dict(label="fronta · Postgres", db="postgres", kind="fronta"),
    # The same without the worker's local queue: the baseline of the queue's gains and of
    # the mixed cell's rule (short runs' p99 start delay no worse than 2× this).
    "fronta-pg-noqueue": dict(label="fronta · Postgres, --prefetch-max 0", db="postgres", kind="fronta", flags=["--prefetch-max", "0"], mixed=True),
    "apalis-pg": dict(label="apalis-postgres", db="postgres", kind="peer", cmd=[str(APALIS_PG)], http=True),
    "graphile": dict(label="graphile-worker (tuned)", db="postgres", kind="peer", cmd=node_peer("graphile-worker"), mixed=True),
    "pg-boss": dict(label="pg-boss (batch 100)", db="postgres", kind="peer", cmd=node_peer("pg-boss")),
}


def fronta_cmd(system, url, extra):
    cmd = [str(FRONTA), "--database", url]
    if system["db"] == "sqlite":
        cmd += ["--synchronous", system["sync"]]
    return cmd + ["bench"] + extra + system.get("flags", [])


def parse_json(stdout):
    text = stdout.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        last = [line for line in text.splitlines() if line.startswith("{")]
        return json.loads(last[-1]) if last else None


def run_once(system, workload, params, cfg, scratch):
    """One run on a fresh database: answers (figures dict, error text)."""
    with Fresh(system["db"], scratch) as url:
        if system["kind"] == "fronta":
            cmd = fronta_workload(system, url, workload, params, cfg)
        else:
            cmd = peer_workload(system, url, workload, params, cfg)
        if cmd is None:
            return None, "n/a"
        env = dict(os.environ, RUST_LOG="warn")
        timeout = cfg["backlog_timeout"] if workload in ("claim", "rss") else cfg["cell_timeout"]
        try:
            done = subprocess.run(cmd, text=True, capture_output=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout} s"
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"exit {done.returncode}: {tail[:200]}"
        figures = parse_json(done.stdout)
        if figures is None:
            return None, "no figures printed"
        return figures, None


def fronta_workload(system, url, workload, p, cfg):
    if system.get("flags") and workload not in ("drain", "latency", "mixed"):
        return None  # a worker setting: only the cells with a worker
    if workload == "enqueue":
        return fronta_cmd(system, url, ["--runs", str(p["jobs"]), "--callers", str(p["callers"]), "--batch", str(p["batch"]), "--no-drain", "--latency-runs", "0", "--json"])
    if workload == "drain":
        if system["db"] == "sqlite" and p.get("processes", 1) > 1:
            return None  # several processes: Postgres only, as for the peers
        extra = ["--runs", str(p["jobs"]), "--callers", "1", "--batch", "1000", "--in-flight", str(p["in_flight"]), "--latency-runs", "0", "--drain-cap", f"{p['cap']}s", "--json"]
        if p.get("processes", 1) > 1:
            extra += ["--processes", str(p["processes"])]
        return fronta_cmd(system, url, extra)
    if workload == "latency":
        return fronta_cmd(system, url, ["--runs", "1", "--callers", "1", "--in-flight", "64", "--latency-runs", str(p["jobs"]), "--latency-rate", str(p["rate"]), "--json"])
    if workload == "http":
        webhook = ["webhook", "--seconds", str(max(1, round(p["seconds"]))), "--rate", str(p["rate"]), "--paced-connections", "4", "--requests", "2000", "--json"]
        if system["db"] == "sqlite":
            # The webhook bench makes its own fresh SQLite file.
            return [str(FRONTA), "--synchronous", system["sync"], "bench"] + webhook
        return fronta_cmd(system, url, webhook)
    if workload == "claim":
        return fronta_cmd(system, url, ["claim", "--queued", str(p["queued"]), "--tenants", str(p["tenants"]), "--samples", str(p["samples"]), "--json"])
    if workload == "mixed":
        if system["db"] != "postgres":
            return None  # worker processes side by side with the Postgres peers
        return fronta_cmd(system, url, ["mixed"] + mixed_flags(p) + ["--drain-cap", f"{p['cap']}s", "--json"])
    if workload == "rss":
        return fronta_cmd(system, url, ["rss", "--queued", str(p["queued"]), "--tenants", str(p["tenants"]), "--seconds", f"{p['seconds']}s", "--json"])
    raise ValueError(workload)


def peer_workload(system, url, workload, p, cfg):
    base = system["cmd"] + ["--db", url, "--workload", workload]
    if system["db"] == "sqlite":
        base += ["--synchronous", system["sync"]]
    if workload == "enqueue":
        return base + ["--jobs", str(p["jobs"]), "--callers", str(p["callers"]), "--batch", str(p["batch"])]
    if workload == "drain":
        if system["db"] == "sqlite" and p.get("processes", 1) > 1:
            return None
        return base + ["--jobs", str(p["jobs"]), "--in-flight", str(p["in_flight"]), "--processes", str(p.get("processes", 1)), "--cap-seconds", str(p["cap"])]
    if workload == "latency":
        return base + ["--jobs", str(p["jobs"]), "--rate", str(p["rate"])]
    if workload == "http":
        if not system.get("http"):
            return None
        return base + ["--seconds", str(p["seconds"]), "--rate", str(p["rate"]), "--connections", "4"]
    if workload == "mixed":
        if not system.get("mixed"):
            return None
        return base + ["--jobs", str(p["rate"] * p["seconds"])] + mixed_flags(p) + ["--cap-seconds", str(p["cap"])]
    return None


def mixed_flags(p):
    """The mixed workload's flags, the same for `fronta bench mixed` and the peer programs."""
    return [
        "--rate", str(p["rate"]), "--seconds", str(p["seconds"]), "--long-every", str(p["long_every"]),
        "--long-ms", str(p["long_ms"]), "--processes", str(p["processes"]), "--in-flight", str(p["in_flight"]),
    ]


def mixed_value(f):
    """A mixed run: the short runs' p99 start delay, the exactly-once verdict, the rest."""
    extra = {
        "throughput": f["runsPerSecond"], "p50": f["short"]["p50Ms"], "p95": f["short"]["p95Ms"],
        "max": f["short"]["maxMs"], "long_p99": f["long"]["p99Ms"], "lag": f["arrivalLagMaxMs"],
        "enqueue_p50": f["enqueueP50Ms"],
    }
    return f["short"]["p99Ms"], f.get("ok", False), extra


# ------------------------------------------------------------------ reading figures


def value_of(system, workload, f):
    """The figure of a run and whether its exactly-once check passed."""
    if system["kind"] == "fronta":
        if workload == "enqueue":
            return f["enqueuePerSecond"], f.get("ok", False), {}
        if workload == "drain":
            parts = {
                "claim_rounds": f.get("drainClaimRounds") or None,
                "claim_ms": f.get("drainClaimMeanMs") or None,
                "batches": f.get("drainCompleteBatches") or None,
                "batch_ms": f.get("drainCompleteMeanMs") or None,
            }
            return f["drainedPerSecond"], f.get("ok", False), {"capped": f.get("drainCapped"), "cpu_us": f.get("drainCpuMicrosPerRun"), **parts}
        if workload == "latency":
            return f["latencyP50Ms"], f.get("ok", False), {"p95": f["latencyP95Ms"], "p99": f["latencyP99Ms"]}
        if workload == "http":
            lat = f["paced"]["latency"]
            return lat["p50Ms"], f["check"]["ok"], {"p95": lat["p95Ms"], "p99": lat["p99Ms"]}
        if workload == "claim":
            return f["claimP50Micros"], f.get("ok", False), {"p99": f["claimP99Micros"], "mean": f["claimMeanMicros"]}
        if workload == "rss":
            return f["peakRssMiB"], f.get("ok", False), {"completed": f["completedMeanwhile"]}
        if workload == "mixed":
            return mixed_value(f)
    else:
        if workload == "mixed":
            return mixed_value(f)
        if workload == "enqueue":
            return f["perSecond"], f.get("ok", False), {}
        if workload == "drain":
            return f["perSecond"], f.get("ok", False), {"capped": f.get("capped"), "ran": f.get("ran")}
        if workload in ("latency", "http"):
            return f["p50Ms"], f.get("ok", False), {"p95": f["p95Ms"], "p99": f["p99Ms"]}
    raise ValueError(workload)


class Cell:
    def __init__(self, values, extras, errors, disqualified):
        self.values = values
        self.extras = extras
        self.errors = errors
        self.disqualified = disqualified

    @property
    def median(self):
        return statistics.median(self.values) if self.values else None

    def extra_median(self, key):
        xs = [e[key] for e in self.extras if e.get(key) is not None]
        return statistics.median(xs) if xs else None

    def extra_range(self, key):
        xs = [e[key] for e in self.extras if e.get(key) is not None]
        return (min(xs), max(xs)) if xs else None

    def capped(self):
        return any(e.get("capped") for e in self.extras)


def measure(name, workload, params, cfg, scratch, results):
    system = SYSTEMS[name]
    values, extras, errors, disq = [], [], [], 0
    runs = {"claim": cfg["claim_runs"], "rss": cfg["backlog_runs"]}.get(workload, cfg["runs"])
    for k in range(runs):
        started = time.perf_counter()
        figures, error = run_once(system, workload, params, cfg, scratch)
        took = time.perf_counter() - started
        if error == "n/a":
            return None
        if error:
            errors.append(error)
            log(f"  {name} {workload} {params}: run {k + 1} FAILED ({error})")
            continue
        value, ok, extra = value_of(system, workload, figures)
        if not ok:
            disq += 1
            log(f"  {name} {workload} {params}: run {k + 1} DISQUALIFIED by the exactly-once check: {json.dumps(figures)[:300]}")
            continue
        values.append(value)
        extras.append(extra)
        log(f"  {name} {workload} {params}: run {k + 1} → {value:,.3f}{' (capped)' if extra.get('capped') else ''} [{took:.1f} s]")
    cell = Cell(values, extras, errors, disq)
    results[(name, workload, json.dumps(params, sort_keys=True))] = cell
    return cell


# ------------------------------------------------------------------------ formatting


def fmt_rate(cell):
    if cell is None:
        return "—"
    if not cell.values:
        return "DISQUALIFIED" if cell.disqualified else "failed"
    med = cell.median
    text = f"{med:,.0f}"
    if len(cell.values) > 1:
        text += f" ({min(cell.values):,.0f}–{max(cell.values):,.0f})"
    if cell.capped():
        text += " ᶜ"
    if cell.disqualified:
        text += f" [{cell.disqualified} DQ]"
    return text


def fmt_ms(cell, key=None):
    if cell is None:
        return "—"
    if not cell.values:
        return "DISQUALIFIED" if cell.disqualified else "failed"
    p50 = cell.median
    p95 = cell.extra_median("p95")
    p99 = cell.extra_median("p99")
    spread = f" (p50 {min(cell.values):.2f}–{max(cell.values):.2f})" if len(cell.values) > 1 else ""
    return f"{p50:.2f} / {p95:.2f} / {p99:.2f}{spread}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 run per cell, small sizes (< 3 min)")
    parser.add_argument("--no-build", action="store_true", help="use the binaries already built")
    parser.add_argument("--only", default="", help="comma-separated systems (default: all): " + ",".join(SYSTEMS))
    parser.add_argument("--sections", default="enqueue,drain,latency,http,backlog", help="comma-separated sections to run (also, not run by default: history, which writes up to 10 M runs per store; mixed, fronta and graphile-worker on Postgres)")
    parser.add_argument("--out", default=None, help="markdown file to write (default bench/results/{quick,full}.md)")
    parser.add_argument("--label", default="", help="a line printed above the tables (e.g. 'smoke run on a busy machine')")
    args = parser.parse_args()
    cfg = QUICK if args.quick else FULL
    only = [s for s in args.only.split(",") if s] or list(SYSTEMS)
    for s in only:
        if s not in SYSTEMS:
            sys.exit(f"--only: unknown system {s!r}; known: {', '.join(SYSTEMS)}")
    sections = set(args.sections.split(","))
    build(args.no_build)
    scratch = tempfile.mkdtemp(prefix="fronta-bench-", dir=os.environ.get("BENCH_SCRATCH"))
    started = time.time()
    info = machine(scratch)
    log(f"machine: {info}")
    results = {}
    out = []
    mode = "quick (smoke)" if args.quick else "full"
    out.append(f"### Benchmark tables — {mode} run, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    if args.label:
        out.append(f"**{args.label}**\n")
    out.append(
        f"Machine: {info['cpu']}, {info['memory']}, Linux {info['kernel']}; {info['postgres']} "
        f"(synchronous_commit={info['synchronous_commit']}); Node {info['node']}; "
        f"single-page write+fsync on the scratch disk: **{info['fsync_per_second']:,.0f}/s**; "
        f"load average before: {info['load_before']}. Runs per cell: {cfg['runs']} (median, (min–max)), "
        f"{cfg['claim_runs']} for the claim-cost table, {cfg['backlog_runs']} for the RSS table; "
        f"ᶜ = stopped at the drain cap, rate over what ran; every figure passed the exactly-once check "
        f"unless marked.\n"
    )

    if "enqueue" in sections:
        log("== enqueue")
        combos = [
            ("1 caller, single", dict(jobs=cfg["enqueue_single_jobs"], callers=1, batch=1)),
            ("32 callers, single", dict(jobs=cfg["enqueue_single_jobs"] * 4, callers=32, batch=1)),
            (f"1 caller, batches of {cfg['enqueue_batch_1']}", dict(jobs=cfg["enqueue_batched_jobs"], callers=1, batch=cfg["enqueue_batch_1"])),
            (f"32 callers, batches of {cfg['enqueue_batch_32']}", dict(jobs=cfg["enqueue_batched_jobs"], callers=32, batch=cfg["enqueue_batch_32"])),
        ]
        rows = []
        for name in only:
            row = [SYSTEMS[name]["label"]]
            for _, params in combos:
                row.append(fmt_rate(measure(name, "enqueue", params, cfg, scratch, results)))
            rows.append(row)
        out.append(f"#### Enqueue (jobs/s; {cfg['enqueue_single_jobs']:,} single jobs from 1 caller, ×4 from 32; {cfg['enqueue_batched_jobs']:,} batched)\n")
        out.append(table(["system"] + [c for c, _ in combos], rows) + "\n")

    if "drain" in sections:
        log("== drain")
        combos = []
        for w in cfg["drain_in_flight"]:
            cap = cfg["drain_cap_one_in_flight"] if w == 1 else cfg["drain_cap"]
            combos.append((f"{w} in flight", dict(jobs=cfg["drain_jobs"], in_flight=w, cap=cap)))
        top = max(cfg["drain_in_flight"])
        combos.append((f"{top} in flight × 2 processes", dict(jobs=cfg["drain_jobs"], in_flight=top, cap=cfg["drain_cap"], processes=2)))
        rows = []
        for name in only:
            row = [SYSTEMS[name]["label"]]
            for _, params in combos:
                cell = measure(name, "drain", params, cfg, scratch, results)
                row.append(fmt_rate(cell))
            rows.append(row)
        out.append(
            f"#### Drain of {cfg['drain_jobs']:,} pre-enqueued no-op jobs (jobs/s; cap {cfg['drain_cap']:.0f} s, "
            f"{cfg['drain_cap_one_in_flight']:.0f} s at 1 in flight; 2 processes on Postgres only)\n"
        )
        out.append(table(["system"] + [c for c, _ in combos], rows) + "\n")
        cpu_rows = []
        for (name, workload, key), cell in results.items():
            if workload == "drain" and SYSTEMS[name]["kind"] == "fronta" and cell.extra_median("cpu_us"):
                p = json.loads(key)
                rounds, claim_ms = cell.extra_median("claim_rounds"), cell.extra_median("claim_ms")
                batches, batch_ms = cell.extra_median("batches"), cell.extra_median("batch_ms")
                cpu_rows.append([
                    SYSTEMS[name]["label"],
                    f"{p['in_flight']} × {p.get('processes', 1)}",
                    f"{cell.extra_median('cpu_us'):.1f}",
                    f"{rounds:,.0f} × {claim_ms:.2f} ms" if rounds else "—",
                    f"{batches:,.0f} × {batch_ms:.2f} ms" if batches else "—",
                ])
        if cpu_rows:
            out.append(
                "fronta's CPU time per run in the drain (user + system, the bench process and its worker processes), "
                "and, for a drain in the bench process, its claim rounds and completion batches (how many × mean time at the store):\n"
            )
            out.append(table(["system", "in flight × processes", "µs CPU per run", "claim rounds", "completion batches"], cpu_rows) + "\n")

    if "latency" in sections:
        log("== latency")
        params = dict(jobs=cfg["latency_jobs"], rate=cfg["latency_rate"])
        rows = []
        for name in only:
            cell = measure(name, "latency", params, cfg, scratch, results)
            if cell is not None:
                rows.append([SYSTEMS[name]["label"], fmt_ms(cell)])
        out.append(f"#### Paced latency, enqueue→start (ms p50 / p95 / p99; {cfg['latency_jobs']:,} jobs at {cfg['latency_rate']}/s into an idle worker in the same process)\n")
        out.append(table(["system", "p50 / p95 / p99"], rows) + "\n")

    if "http" in sections:
        log("== http")
        params = dict(seconds=cfg["http_seconds"], rate=cfg["http_rate"])
        rows = []
        for name in only:
            cell = measure(name, "http", params, cfg, scratch, results)
            if cell is not None:
                front = "fronta's webhook (`fronta bench webhook`)" if SYSTEMS[name]["kind"] == "fronta" else "tiny axum front: POST → push → 202"
                rows.append([SYSTEMS[name]["label"], front, fmt_ms(cell)])
        out.append(f"#### HTTP 202 ingestion (ms p50 / p95 / p99 of each 202; {cfg['http_rate']:,} req/s for {cfg['http_seconds']:.0f} s over 4 kept-alive connections)\n")
        out.append(table(["system", "front", "p50 / p95 / p99"], rows) + "\n")

    if "backlog" in sections:
        log("== backlog (fronta only)")
        rows = []
        for name in [n for n in only if SYSTEMS[n]["kind"] == "fronta"]:
            system = SYSTEMS[name]
            if system["db"] == "sqlite" and system["sync"] != "normal":
                continue  # claim cost without fsync waits: NORMAL shows the CPU and the index work
            for queued in cfg["claim_queued"]:
                params = dict(queued=queued, tenants=1, samples=min(cfg["claim_samples"], queued))
                cell = measure(name, "claim", params, cfg, scratch, results)
                if cell and cell.values:
                    rows.append([system["label"], f"{queued:,}", f"{cell.median:.0f}", f"{cell.extra_median('p99'):.0f}", f"{cell.extra_median('mean'):.0f}"])
                else:
                    rows.append([system["label"], f"{queued:,}", fmt_rate(cell), "", ""])
        out.append(f"#### fronta claim cost against the backlog (µs per claim call of 1 run; {cfg['claim_samples']:,} timed claims; SQLite NORMAL and Postgres)\n")
        out.append(table(["system", "queued", "p50 µs", "p99 µs", "mean µs"], rows) + "\n")
        rows = []
        for name in [n for n in only if n in ("fronta-sqlite-full", "fronta-pg")]:
            params = dict(queued=cfg["rss_queued"], tenants=cfg["rss_tenants"], seconds=cfg["rss_seconds"])
            cell = measure(name, "rss", params, cfg, scratch, results)
            if cell and cell.values:
                rows.append([SYSTEMS[name]["label"], f"{cfg['rss_queued']:,} over {cfg['rss_tenants']:,}", f"{cell.median:.1f}", f"{cell.extra_median('completed'):,.0f}"])
            else:
                rows.append([SYSTEMS[name]["label"], f"{cfg['rss_queued']:,} over {cfg['rss_tenants']:,}", fmt_rate(cell), ""])
        out.append(f"#### fronta worker process RSS (peak VmHWM from /proc, 64 in flight, {cfg['rss_seconds']} s over the backlog)\n")
        out.append(table(["system", "queued runs over tenants", "peak RSS MiB", "runs completed meanwhile"], rows) + "\n")

    if "history" in sections:
        log("== history (fronta only)")
        # SQLite NORMAL, as for the claim-cost table: with FULL every write's figure is
        # one fsync of a shared disk, whose latency moved 0.3 → 4 ms from one minute to the
        # next here (other I/O on the machine), not the store's work against the history.
        for name in [n for n in only if n in ("fronta-sqlite-normal", "fronta-pg")]:
            out.append(history_section(name, cfg))

    if "mixed" in sections:
        log("== mixed")
        out.append(mixed_section(only, cfg, scratch, results))

    out.append(targets(results, cfg, info))
    took = time.time() - started
    out.append(f"\nWall time of this run: {took / 60:.1f} min. Command: `python3 bench/run.py{' --quick' if args.quick else ''}`.\n")
    text = "\n".join(out)
    path = Path(args.out) if args.out else BENCH / "results" / ("quick.md" if args.quick else "full.md")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
    log(f"written: {path}")
    shutil.rmtree(scratch, ignore_errors=True)


def mixed_section(only, cfg, scratch, results):
    """Short and long runs arriving together (Postgres; fronta and graphile-worker): per
    system the throughput and the short runs' start delays, medians of the runs with the
    spread of the throughput and of the p99."""
    rows = []
    for in_flight in cfg["mixed_in_flight"]:
        params = dict(
            rate=cfg["mixed_rate"], seconds=cfg["mixed_seconds"], long_every=cfg["mixed_long_every"],
            long_ms=cfg["mixed_long_ms"], in_flight=in_flight, processes=cfg["mixed_processes"],
            cap=cfg["mixed_cap"],
        )
        for name in [n for n in only if n == "fronta-pg" or SYSTEMS[n].get("mixed")]:
            cell = measure(name, "mixed", params, cfg, scratch, results)
            label = SYSTEMS[name]["label"]
            setting = f"{cfg['mixed_processes']} × {in_flight}"
            if cell is None:
                continue
            if not cell.values:
                rows.append([label, setting, fmt_rate(cell), "", "", "", ""])
                continue
            low, high = cell.extra_range("throughput")
            spread = lambda lo, hi, f: f" ({lo:{f}}–{hi:{f}})" if len(cell.values) > 1 else ""
            rows.append([
                label,
                setting,
                f"{cell.extra_median('throughput'):,.0f}{spread(low, high, ',.0f')}",
                f"{cell.extra_median('p50'):.1f} / {cell.extra_median('p95'):.1f} / {cell.median:.1f}{spread(min(cell.values), max(cell.values), '.1f')}",
                f"{cell.extra_median('max'):.0f}",
                f"{cell.extra_median('long_p99'):.1f}",
                f"{cell.extra_median('enqueue_p50'):.1f}",
            ])
    total = cfg["mixed_rate"] * cfg["mixed_seconds"]
    return (
        f"#### Mixed workload on Postgres ({total:,} jobs at {cfg['mixed_rate']}/s for {cfg['mixed_seconds']} s, one in "
        f"{cfg['mixed_long_every']} sleeping {cfg['mixed_long_ms']:,} ms, into worker processes already running; "
        f"start delay = handler start − enqueue call made; throughput = jobs over first arrival → last end)\n\n"
        + table(["system", "processes × in flight", "throughput (jobs/s)", "short jobs' start delay ms p50 / p95 / p99",
                 "short max ms", "long p99 ms", "enqueue call p50 ms"], rows)
        + "\n"
    )


# `fronta bench history`'s measures, in its order: (JSON key, row label).
HISTORY_MEASURES = [
    ("claim", "claim of one run (store call)"),
    ("webhook", "webhook 202"),
    ("metrics", "`GET /metrics`"),
    ("runsBusy", "`GET /api/runs?limit=50`, busy tenant"),
    ("runsEmpty", "`GET /api/runs?limit=50`, empty tenant"),
    ("tickets", "`GET /api/tickets?limit=50`"),
    ("healthz", "`GET /healthz` (reference: no database)"),
]


def history_section(name, cfg):
    """`fronta bench history` on one store (it makes a fresh database per size itself):
    one run, the table of median / p95 ms and each median's ratio to the smallest size."""
    system = SYSTEMS[name]
    sizes = ",".join(str(n) for n in cfg["history_sizes"])
    args = ["history", "--sizes", sizes, "--samples", str(cfg["history_samples"]), "--json"]
    if system["db"] == "sqlite":
        cmd = [str(FRONTA), "--synchronous", system["sync"], "bench"] + args
    else:
        # Any database of the server: the bench creates and drops its own per size.
        cmd = [str(FRONTA), "--database", f"{PG}/postgres?sslmode=disable", "bench"] + args
    log(f"  {name} history: {' '.join(cmd[1:])}")
    started = time.time()
    try:
        done = subprocess.run(
            cmd, text=True, stdout=subprocess.PIPE, stderr=None, timeout=cfg["history_timeout"],
            env=dict(os.environ, RUST_LOG="warn"),
        )
    except subprocess.TimeoutExpired:
        return f"#### Reads against history — {system['label']}\n\ntimed out after {cfg['history_timeout']} s\n"
    figures = parse_json(done.stdout) if done.returncode == 0 else None
    if figures is None:
        return f"#### Reads against history — {system['label']}\n\nfailed (exit {done.returncode})\n"
    log(f"  {name} history: done in {(time.time() - started) / 60:.1f} min")
    return history_table(system["label"], figures)


def history_table(label, figures):
    """The markdown of one `fronta bench history --json` report."""
    sizes_seen = figures["sizes"]
    header = ["measure"] + [f"{s['runs']:,} runs" for s in sizes_seen]
    rows = []
    for key, row_label in HISTORY_MEASURES:
        row = [row_label]
        for s in sizes_seen:
            f = s["figures"][key]
            mark = " ⚑" if f["flags"] else ""
            row.append(f"{f['medianMs']:.2f} / {f['p95Ms']:.2f} ({f['ratio']:.2f}×){mark}")
        rows.append(row)
    written = ", ".join(
        f"{s['runs']:,} in {s['insertSeconds']:.1f} s ({s['insertedPerSecond']:,.0f}/s)" for s in sizes_seen
    )
    text = [
        f"#### Reads against history — {label} (ms median / p95 of {figures['samples']} samples; "
        f"(×) the median over the {figures['baseRuns']:,}-run median; ⚑ over {figures['ratioTarget']}× "
        f"or `/metrics` over {figures['metricsTargetMs']:.0f} ms)\n",
        table(header, rows) + "\n",
        f"History written (finished runs, batches of 10,000): {written}.\n",
    ]
    if figures["flagged"]:
        text.append("Flagged: " + "; ".join(figures["flagged"]) + ".\n")
    else:
        text.append("Nothing flagged.\n")
    return "\n".join(text)


def find(results, name, workload, **params):
    for (n, w, key), cell in results.items():
        if n == name and w == workload and all(json.loads(key).get(k) == v for k, v in params.items()):
            return cell
    return None


def best(results, name, processes=1):
    """The best median drain rate of a system over its in-flight settings."""
    cells = [
        c for (n, w, key), c in results.items()
        if n == name and w == "drain" and json.loads(key).get("processes", 1) == processes and c.values
    ]
    return max((c.median for c in cells), default=None)


def targets(results, cfg, info):
    lines = ["#### Targets (ratios from this run)\n", "| target | measured | verdict |", "|---|---|---|"]

    def verdict(ok):
        return "—" if ok is None else ("met" if ok else "**missed**")

    f, a = best(results, "fronta-sqlite-full"), best(results, "apalis-sqlite-full")
    ratio = f / a if f and a else None
    lines.append(f"| SQLite FULL drain ≥ 10× apalis-sqlite | {f'{ratio:.1f}× ({f:,.0f} vs {a:,.0f} jobs/s, best in-flight each)' if ratio else '—'} | {verdict(None if ratio is None else ratio >= 10)} |")
    lines.append(f"| SQLite FULL drain ≥ 30,000 runs/s | {f'{f:,.0f}/s' if f else '—'} | {verdict(None if f is None else f >= 30_000)} |")
    fp, gp, bp = best(results, "fronta-pg", 2), best(results, "graphile", 2), best(results, "pg-boss", 2)
    r1 = fp / gp if fp and gp else None
    r2 = fp / bp if fp and bp else None
    lines.append(f"| Postgres drain, 2 processes ≥ 2× graphile-worker | {f'{r1:.2f}× ({fp:,.0f} vs {gp:,.0f})' if r1 else '—'} | {verdict(None if r1 is None else r1 >= 2)} |")
    lines.append(f"| Postgres drain, 2 processes ≥ 5× pg-boss | {f'{r2:.2f}× ({fp:,.0f} vs {bp:,.0f})' if r2 else '—'} | {verdict(None if r2 is None else r2 >= 5)} |")
    for name in ("fronta-sqlite-full", "fronta-pg"):
        cell = find(results, name, "latency")
        p50 = cell.median if cell and cell.values else None
        lines.append(f"| p50 enqueue→start ≤ 1 ms idle ({SYSTEMS[name]['label']}) | {f'{p50:.2f} ms' if p50 is not None else '—'} | {verdict(None if p50 is None else p50 <= 1)} |")
    for name in ("fronta-sqlite-full", "fronta-pg"):
        cell = find(results, name, "http")
        p99 = cell.extra_median("p99") if cell and cell.values else None
        lines.append(f"| webhook p99 ≤ 3 ms at 1,000 req/s ({SYSTEMS[name]['label']}) | {f'{p99:.2f} ms' if p99 is not None else '—'} | {verdict(None if p99 is None else p99 <= 3)} |")
    for name in ("fronta-sqlite-normal", "fronta-pg"):
        low = find(results, name, "claim", queued=min(cfg["claim_queued"]))
        high = find(results, name, "claim", queued=max(cfg["claim_queued"]))
        if low and high and low.values and high.values:
            r = high.median / low.median
            lines.append(f"| claim cost flat, {min(cfg['claim_queued']):,} → {max(cfg['claim_queued']):,} queued ({SYSTEMS[name]['label']}; flat = p50 within 1.5×) | {r:.2f}× ({low.median:.0f} → {high.median:.0f} µs) | {verdict(r <= 1.5)} |")
    for name in ("fronta-sqlite-full", "fronta-pg"):
        cell = find(results, name, "rss")
        mib = cell.median if cell and cell.values else None
        lines.append(f"| ≤ 100 MiB RSS, {cfg['rss_queued']:,} queued over {cfg['rss_tenants']:,} tenants ({SYSTEMS[name]['label']}) | {f'{mib:.1f} MiB' if mib is not None else '—'} | {verdict(None if mib is None else mib <= 100)} |")
    lines.append(f"\nPhysical frame: {info['fsync_per_second']:,.0f} single-page fsyncs/s on the scratch disk at the start of this run.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
