// graphile-worker 0.18 under the benchmark workloads (contract: ../common.js).
//
// Tuned as its own perfTest config: local queue of 500, refetch delay 10 ms,
// completeJobBatchDelay 0 (ten times its defaults' drain rate); `--in-flight` is
// `concurrentJobs`. Finished jobs are deleted by graphile-worker, so the unfinished ones
// are the rows left in `graphile_worker._private_jobs` (the `jobs` view hides the payload).
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { run, runMigrations, makeWorkerUtils, Logger } = require('graphile-worker');
const { Pool } = require('pg');
const c = require('../common.js');

const args = c.parseArgs();
const ledger = new c.Ledger(args.jobs);
const quiet = new Logger(() => (level, message) => {
  if (level === 'error') process.stderr.write(`graphile-worker: ${message}\n`);
});

function preset(concurrentJobs) {
  return {
    worker: {
      connectionString: args.db,
      concurrentJobs,
      maxPoolSize: Math.max(10, args.callers + 2, concurrentJobs + 2),
      localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
      logger: quiet,
    },
  };
}

// What a mixed-workload worker process saw, per job index (times in unix µs).
const mixedTotal = args.rate * args.seconds;
const seen = args.workload === 'mixed-worker'
  ? { counts: new Uint8Array(mixedTotal), starts: new Float64Array(mixedTotal), ends: new Float64Array(mixedTotal) }
  : null;

const taskList = {
  noop: async (payload) => {
    ledger.run(payload.i);
  },
  // The mixed workload's job: note the start, sleep `ms` (0 for a short job), note the end.
  probe: async (payload) => {
    const i = payload.i;
    seen.counts[i] = Math.min(255, seen.counts[i] + 1);
    seen.starts[i] = c.unixUs();
    if (payload.ms > 0) await c.sleep(payload.ms);
    seen.ends[i] = c.unixUs();
  },
};

async function unfinished(pool) {
  const { rows } = await pool.query("select (payload->>'i')::int as i from graphile_worker._private_jobs");
  return rows.map((r) => r.i);
}

async function checkCommit(pool) {
  const { rows } = await pool.query('show synchronous_commit');
  if (rows[0].synchronous_commit !== 'on') c.fail(`synchronous_commit is ${rows[0].synchronous_commit}, the benchmarks want on`);
}

// Runs a worker until `until()` answers true or the cap passes.
async function workUntil(concurrentJobs, until, capSeconds) {
  const runner = await run({ preset: preset(concurrentJobs), taskList, noHandleSignals: true });
  const deadline = Date.now() + capSeconds * 1000;
  let reached = false;
  while (Date.now() < deadline) {
    if (await until()) {
      reached = true;
      break;
    }
    await c.sleep(2);
  }
  await runner.stop();
  await runner.promise.catch(() => {});
  return reached;
}

// A mixed-workload worker process: says `ready` on stdout once its worker runs, works
// until SIGTERM, then writes what it saw to `--child-out` as JSON.
async function mixedWorker() {
  let stopping = false;
  process.on('SIGTERM', () => { stopping = true; });
  const runner = await run({ preset: preset(args.inFlight), taskList, noHandleSignals: true });
  process.stdout.write('ready\n');
  while (!stopping) await c.sleep(20);
  await runner.stop();
  await runner.promise.catch(() => {});
  fs.writeFileSync(args.childOut, JSON.stringify({
    pid: process.pid, counts: Array.from(seen.counts), starts: Array.from(seen.starts), ends: Array.from(seen.ends),
  }));
  process.exit(0);
}

// The mixed workload: `processes` worker processes started and ready, then `rate` jobs/s
// for `seconds` from this process, then wait until the queue is empty (`cap-seconds` at most).
async function mixed(pool, utils) {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-mixed-'));
  const children = [];
  for (let k = 0; k < args.processes; k++) {
    const file = path.join(folder, `child-${k}.json`);
    const child = spawn(process.execPath, [
      process.argv[1], '--db', args.db, '--workload', 'mixed-worker', '--rate', String(args.rate),
      '--seconds', String(args.seconds), '--in-flight', String(args.inFlight), '--child-out', file,
    ], { stdio: ['ignore', 'pipe', 'inherit'] });
    const ready = new Promise((resolve, reject) => {
      child.stdout.on('data', (chunk) => { if (String(chunk).includes('ready')) resolve(); });
      child.on('exit', (code) => reject(new Error(`a worker process exited (${code}) before it was ready`)));
    });
    const exit = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
    children.push({ child, file, ready, exit });
  }
  await Promise.all(children.map((k) => k.ready));
  await c.sleep(500);
  process.stderr.write(`mixed: ${mixedTotal} jobs at ${args.rate}/s for ${args.seconds} s into ${args.processes} × ${args.inFlight}…\n`);
  const arrivals = await c.mixedArrivals(args, (i, ms) => utils.addJob('probe', { i, ms }));
  const deadline = Date.now() + args.capSeconds * 1000;
  for (;;) {
    const { rows } = await pool.query('select count(*)::int as n from graphile_worker._private_jobs');
    if (rows[0].n === 0 || Date.now() > deadline) break;
    await c.sleep(50);
  }
  for (const k of children) k.child.kill('SIGTERM');
  const codes = await Promise.all(children.map((k) => k.exit));
  const reports = children.map((k) => JSON.parse(fs.readFileSync(k.file, 'utf8')));
  fs.rmSync(folder, { recursive: true, force: true });
  const figures = c.mixedFigures(args, arrivals, reports, await unfinished(pool));
  figures.ok = figures.ok && codes.every((code) => code === 0);
  return figures;
}

async function main() {
  if (args.workload === 'mixed-worker') return mixedWorker();
  const pool = new Pool({ connectionString: args.db, max: 4 });
  await checkCommit(pool);
  if (args.childOut) {
    let lastCheck = 0;
    const finished = await workUntil(args.inFlight, async () => {
      if (Date.now() - lastCheck < 250) return false;
      lastCheck = Date.now();
      const { rows } = await pool.query('select count(*)::int as n from graphile_worker._private_jobs');
      return rows[0].n === 0;
    }, args.capSeconds);
    ledger.writeChild(args.childOut);
    await pool.end();
    process.exit(finished ? 0 : 3);
  }
  await runMigrations({ preset: preset(1) });
  const utils = await makeWorkerUtils({ preset: preset(1) });
  const enqueue = async (indices) => {
    if (indices.length === 1) await utils.addJob('noop', { i: indices[0] });
    else await utils.addJobs(indices.map((i) => ({ identifier: 'noop', payload: { i } })));
  };
  let figures;
  if (args.workload === 'enqueue') {
    figures = await c.enqueueWorkload(args, enqueue);
    const { rows } = await pool.query('select count(*)::int as n from graphile_worker._private_jobs');
    figures.ok = rows[0].n === args.jobs;
    figures.check = `${rows[0].n} rows for ${args.jobs} enqueued`;
  } else if (args.workload === 'drain') {
    const all = Array.from({ length: args.jobs }, (_, i) => i);
    for (let k = 0; k < all.length; k += 1000) await enqueue(all.slice(k, k + 1000));
    process.stderr.write(`drain: ${args.jobs} jobs enqueued; draining with ${args.inFlight} in flight × ${args.processes} processes…\n`);
    const start = c.nowUs();
    let counts;
    let seconds;
    let finished;
    if (args.processes === 1) {
      finished = await workUntil(args.inFlight, async () => ledger.ran >= args.jobs, args.capSeconds);
      counts = ledger.counts;
      seconds = Math.min((c.nowUs() - start) / 1e6, args.capSeconds);
    } else {
      const merged = await c.drainInProcesses(args);
      counts = merged.counts;
      seconds = merged.window > 0 ? merged.window : (c.nowUs() - start) / 1e6;
      finished = merged.finished;
    }
    const still = await unfinished(pool);
    const { ran, duplicates, lost } = c.check(counts, still);
    figures = {
      inFlight: args.inFlight, processes: args.processes, ran, seconds, perSecond: ran / seconds,
      capped: !finished, duplicates, lost, unfinished: still.length, ok: duplicates === 0 && lost === 0,
    };
  } else if (args.workload === 'latency') {
    const working = workUntil(64, async () => ledger.ran >= args.jobs, args.jobs / args.rate + 30);
    await c.sleep(500);
    await c.pacedEnqueue(args, ledger, (i) => enqueue([i]));
    const finished = await working;
    const still = await unfinished(pool);
    const { ran, duplicates, lost } = c.check(ledger.counts, still);
    figures = { ...c.percentiles(ledger.waits), rate: args.rate, ran, duplicates, lost, ok: finished && duplicates === 0 && lost === 0 };
  } else if (args.workload === 'mixed') {
    figures = await mixed(pool, utils);
  } else {
    c.fail(`--workload: enqueue, drain, latency or mixed, not ${args.workload}`);
  }
  await utils.release();
  await pool.end();
  c.report('graphile-worker', args, figures);
}

main().catch((err) => c.fail(err.stack || String(err)));
