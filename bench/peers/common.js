// What the Node peer programs share; the same contract as bench/common (Rust):
// `node bench.js --db URL --workload enqueue|drain|latency|mixed [--key value]...` prints
// one JSON line on stdout. Every job's payload is `{ i: index }`; the ledger counts how often
// each index ran; a figure is valid only with no duplicate and no loss.
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(2);
}

function parseArgs() {
  const map = {};
  const argv = process.argv.slice(2);
  for (let k = 0; k < argv.length; k += 2) {
    if (!argv[k].startsWith('--') || argv[k + 1] === undefined) fail(`bad argument ${argv[k]}`);
    map[argv[k].slice(2)] = argv[k + 1];
  }
  const num = (name, dflt) => {
    if (map[name] === undefined) return dflt;
    const value = Number(map[name]);
    if (!Number.isFinite(value)) fail(`--${name}: cannot read ${map[name]}`);
    return value;
  };
  if (!map.db) fail('--db is required');
  if (!map.workload) fail('--workload is required');
  const args = {
    db: map.db,
    workload: map.workload,
    jobs: num('jobs', 10000),
    callers: num('callers', 1),
    batch: num('batch', 1),
    inFlight: num('in-flight', 64),
    processes: num('processes', 1),
    capSeconds: num('cap-seconds', 60),
    rate: num('rate', 100),
    // The mixed workload: `rate` jobs/s for `seconds`, one in `long-every` sleeping `long-ms`.
    seconds: num('seconds', 20),
    longEvery: num('long-every', 20),
    longMs: num('long-ms', 2000),
    childOut: map['child-out'],
  };
  for (const name of ['jobs', 'callers', 'batch', 'inFlight', 'processes', 'rate', 'seconds', 'longEvery']) {
    if (!(args[name] >= 1)) fail(`--${name} must be at least 1`);
  }
  return args;
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const unixUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

class Ledger {
  constructor(jobs) {
    this.counts = new Uint8Array(jobs);
    this.enqueued = new Float64Array(jobs);
    this.waits = [];
    this.ran = 0;
    this.first = Infinity;
    this.last = 0;
  }
  run(i) {
    const now = unixUs();
    if (i >= 0 && i < this.counts.length) {
      this.counts[i] = Math.min(255, this.counts[i] + 1);
      if (this.enqueued[i] > 0) this.waits.push((now - this.enqueued[i]) / 1000);
    }
    if (now < this.first) this.first = now;
    if (now > this.last) this.last = now;
    this.ran += 1;
  }
  markEnqueued(i) {
    this.enqueued[i] = unixUs();
  }
  async waitFor(target, capSeconds) {
    const deadline = Date.now() + capSeconds * 1000;
    while (this.ran < target) {
      if (Date.now() >= deadline) return false;
      await sleep(2);
    }
    return true;
  }
  writeChild(file) {
    const out = Buffer.alloc(this.counts.length + 16);
    Buffer.from(this.counts.buffer).copy(out, 0);
    const first = this.first === Infinity ? 0 : this.first;
    out.writeBigUInt64LE(BigInt(Math.round(first)), this.counts.length);
    out.writeBigUInt64LE(BigInt(Math.round(this.last)), this.counts.length + 8);
    fs.writeFileSync(file, out);
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function mergeChildren(files, jobs) {
  const counts = new Uint8Array(jobs);
  let first = Infinity;
  let last = 0;
  for (const file of files) {
    const bytes = fs.readFileSync(file);
    if (bytes.length !== jobs + 16) fail(`${file}: ${bytes.length} bytes for ${jobs} jobs`);
    for (let i = 0; i < jobs; i++) counts[i] = Math.min(255, counts[i] + bytes[i]);
    const f = Number(bytes.readBigUInt64LE(jobs));
    const l = Number(bytes.readBigUInt64LE(jobs + 8));
    if (f > 0) {
      first = Math.min(first, f);
      last = Math.max(last, l);
    }
  }
  return { counts, window: first === Infinity || last <= first ? 0 : (last - first) / 1e6 };
}

// Starts `processes` copies of this program as drain children; answers merged counts.
async function drainInProcesses(args) {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-node-'));
  const files = [];
  const exits = [];
  for (let k = 0; k < args.processes; k++) {
    const file = path.join(folder, `child-${k}.bin`);
    files.push(file);
    const child = spawn(process.execPath, [
      process.argv[1], '--db', args.db, '--workload', 'drain', '--jobs', String(args.jobs),
      '--in-flight', String(args.inFlight), '--cap-seconds', String(args.capSeconds),
      '--child-out', file,
    ], { stdio: ['ignore', 'ignore', 'inherit'] });
    exits.push(new Promise((resolve) => child.on('exit', (code) => resolve(code))));
  }
  const codes = await Promise.all(exits);
  const merged = mergeChildren(files, args.jobs);
  fs.rmSync(folder, { recursive: true, force: true });
  return { ...merged, finished: codes.every((c) => c === 0) };
}

function check(counts, unfinished) {
  const still = new Uint8Array(counts.length);
  for (const i of unfinished) if (i >= 0 && i < counts.length) still[i] = 1;
  let ran = 0;
  let duplicates = 0;
  let lost = 0;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] > 0) ran++;
    if (counts[i] > 1) duplicates++;
    if (counts[i] === 0 && !still[i]) lost++;
  }
  return { ran, duplicates, lost };
}

function percentiles(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q) => (sorted.length === 0 ? 0 : sorted[Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length))) - 1]);
  return { p50Ms: at(0.5), p95Ms: at(0.95), p99Ms: at(0.99), maxMs: at(1) };
}

// `callers` concurrent loops share `jobs`; each call enqueues `batch` indices.
async function enqueueWorkload(args, enqueue) {
  const start = nowUs();
  const loops = [];
  for (let caller = 0; caller < args.callers; caller++) {
    loops.push((async () => {
      const mine = [];
      for (let i = caller; i < args.jobs; i += args.callers) mine.push(i);
      for (let k = 0; k < mine.length; k += args.batch) await enqueue(mine.slice(k, k + args.batch));
    })());
  }
  await Promise.all(loops);
  const seconds = (nowUs() - start) / 1e6;
  return { seconds, perSecond: args.jobs / seconds, callers: args.callers, batch: args.batch };
}

async function pacedEnqueue(args, ledger, enqueue) {
  const gapMs = 1000 / args.rate;
  const start = performance.now();
  for (let i = 0; i < args.jobs; i++) {
    const wait = start + i * gapMs - performance.now();
    if (wait > 0) await sleep(wait);
    ledger.markEnqueued(i);
    await enqueue(i);
  }
}

// ---- The mixed workload (the same arrivals and figures as `fronta bench mixed`).

// Job `i` is long when it is the last of its group of `longEvery`.
const isLong = (args, i) => i % args.longEvery === args.longEvery - 1;

// `rate` calls per second for `seconds`, each made at its scheduled time whether or not the
// earlier ones have returned (an open arrival process). `enqueue(i, ms)` adds job `i`.
// Answers when each call was made and returned (unix µs) and the worst lag behind schedule.
async function mixedArrivals(args, enqueue) {
  const total = args.rate * args.seconds;
  const made = new Float64Array(total);
  const returned = new Float64Array(total);
  const calls = [];
  let lagMaxMs = 0;
  const gapMs = 1000 / args.rate;
  const start = performance.now();
  for (let i = 0; i < total; i++) {
    const due = start + i * gapMs;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    lagMaxMs = Math.max(lagMaxMs, performance.now() - due);
    made[i] = unixUs();
    calls.push(enqueue(i, isLong(args, i) ? args.longMs : 0).then(() => { returned[i] = unixUs(); }));
  }
  await Promise.all(calls);
  return { made, returned, lagMaxMs };
}

// Nearest rank over sorted values, as the Rust side computes it.
function quantiles(values) {
  const sorted = Float64Array.from(values).sort();
  const at = (q) => (sorted.length === 0 ? 0 : sorted[Math.round((sorted.length - 1) * q)]);
  return { runs: sorted.length, p50Ms: at(0.5), p95Ms: at(0.95), p99Ms: at(0.99), maxMs: at(1) };
}

// The figures of a mixed run from what the worker processes saw: `children` are their
// reports `{ pid, counts, starts, ends }` (per job index; times in unix µs), `unfinished`
// the jobs still in the queue. A start delay counts from the moment the enqueue call was made.
function mixedFigures(args, arrivals, children, unfinished) {
  const total = args.rate * args.seconds;
  const counts = new Uint8Array(total);
  const starts = new Float64Array(total);
  const byProcess = children.map(() => [0, 0]);
  let lastEnd = 0;
  children.forEach((child, k) => {
    for (let i = 0; i < total; i++) {
      if (child.counts[i] === 0) continue;
      counts[i] = Math.min(255, counts[i] + child.counts[i]);
      starts[i] = child.starts[i];
      lastEnd = Math.max(lastEnd, child.ends[i]);
      byProcess[k][isLong(args, i) ? 1 : 0] += child.counts[i];
    }
  });
  const { ran, duplicates, lost } = check(counts, unfinished);
  const short = [];
  const long = [];
  for (let i = 0; i < total; i++) {
    if (counts[i] === 0) continue;
    (isLong(args, i) ? long : short).push(Math.max(0, starts[i] - arrivals.made[i]) / 1000);
  }
  const enqueueMs = Array.from(arrivals.made, (made, i) => (arrivals.returned[i] - made) / 1000);
  const first = arrivals.made[0];
  const wallSeconds = (lastEnd - first) / 1e6;
  const enqueue = quantiles(enqueueMs);
  return {
    processes: args.processes, inFlight: args.inFlight, rate: args.rate, seconds: args.seconds,
    longEvery: args.longEvery, longMs: args.longMs, runs: total,
    arrivalSeconds: (arrivals.made[total - 1] - first) / 1e6, arrivalLagMaxMs: arrivals.lagMaxMs,
    wallSeconds, runsPerSecond: ran / wallSeconds, startDelayFrom: 'enqueue call made',
    short: quantiles(short), long: quantiles(long),
    enqueueP50Ms: enqueue.p50Ms, enqueueP99Ms: enqueue.p99Ms, startedByProcess: byProcess,
    ran, duplicates, lost, unfinished: unfinished.length,
    ok: duplicates === 0 && lost === 0 && unfinished.length === 0 && ran === total,
  };
}

function report(peer, args, figures) {
  const rss = fs.readFileSync('/proc/self/status', 'utf8').match(/VmHWM:\s+(\d+)/);
  process.stdout.write(`${JSON.stringify({ peer, workload: args.workload, jobs: args.jobs, peakRssKiB: rss ? Number(rss[1]) : 0, ...figures })}\n`);
}

module.exports = {
  fail, parseArgs, Ledger, sleep, check, percentiles, enqueueWorkload, pacedEnqueue, report,
  drainInProcesses, nowUs, unixUs, isLong, mixedArrivals, mixedFigures,
};
