// graphile-worker 0.18 under the benchmark workloads (contract: ../common.js).
//
// Tuned as its own perfTest config: local queue of 500, refetch delay 10 ms,
// completeJobBatchDelay 0 (ten times its defaults' drain rate); `--in-flight` is
// `concurrentJobs`. Finished jobs are deleted by graphile-worker, so the unfinished ones
// are the rows left in `graphile_worker._private_jobs` (the `jobs` view hides the payload).
'use strict';

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

const taskList = {
  noop: async (payload) => {
    ledger.run(payload.i);
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

async function main() {
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
  } else {
    c.fail(`--workload: enqueue, drain or latency, not ${args.workload}`);
  }
  await utils.release();
  await pool.end();
  c.report('graphile-worker', args, figures);
}

main().catch((err) => c.fail(err.stack || String(err)));
