// pg-boss 12 under the benchmark workloads (contract: ../common.js).
//
// pg-boss waits `pollingIntervalSeconds` (at least 0.5 s) between fetches unless a batch
// comes back full, so it runs with its batch options: each of `--in-flight` local workers
// (`localConcurrency`) fetches batches of 100 (`batchSize`) and fetches again at once
// while batches come back full (`burstWhenBatchFull`); a worker runs its batch's jobs one
// after the other, so `--in-flight` jobs run at once. LISTEN/NOTIFY is on (queue
// `notify: true`) so an idle worker wakes on a new job. Finished jobs stay in the job
// table with state `completed`.
'use strict';

const { PgBoss } = require('pg-boss');
const c = require('../common.js');

const args = c.parseArgs();
const ledger = new c.Ledger(args.jobs);
const QUEUE = 'bench';

async function workUntil(boss, inFlight, until, capSeconds) {
  await boss.work(QUEUE, {
    batchSize: 100,
    localConcurrency: inFlight,
    burstWhenBatchFull: true,
    pollingIntervalSeconds: 0.5,
  }, async (jobs) => {
    for (const job of jobs) ledger.run(job.data.i);
  });
  const deadline = Date.now() + capSeconds * 1000;
  let reached = false;
  while (Date.now() < deadline) {
    if (await until()) {
      reached = true;
      break;
    }
    await c.sleep(2);
  }
  await boss.offWork(QUEUE, { wait: true });
  return reached;
}

async function unfinished(boss) {
  const { rows } = await boss.getDb().executeSql(
    "select (data->>'i')::int as i from pgboss.job where name = $1 and state <> 'completed'", [QUEUE]);
  return rows.map((r) => r.i);
}

async function main() {
  const boss = new PgBoss({
    connectionString: args.db,
    max: Math.max(10, args.callers + 2, Math.min(args.inFlight + 2, 40)),
    useListenNotify: true,
    schedule: false,
    supervise: false,
  });
  boss.on('error', (err) => process.stderr.write(`pg-boss: ${err}\n`));
  await boss.start();
  const db = boss.getDb();
  const { rows: commit } = await db.executeSql('show synchronous_commit');
  if (commit[0].synchronous_commit !== 'on') c.fail(`synchronous_commit is ${commit[0].synchronous_commit}, the benchmarks want on`);
  if (args.childOut) {
    let lastCheck = 0;
    const finished = await workUntil(boss, args.inFlight, async () => {
      if (Date.now() - lastCheck < 250) return false;
      lastCheck = Date.now();
      const { rows } = await db.executeSql("select count(*)::int as n from pgboss.job where name = $1 and state <> 'completed'", [QUEUE]);
      return rows[0].n === 0;
    }, args.capSeconds);
    ledger.writeChild(args.childOut);
    await boss.stop({ graceful: true, wait: true });
    process.exit(finished ? 0 : 3);
  }
  await boss.createQueue(QUEUE, { notify: true });
  const enqueue = async (indices) => {
    if (indices.length === 1) await boss.send(QUEUE, { i: indices[0] });
    else await boss.insert(QUEUE, indices.map((i) => ({ data: { i } })));
  };
  let figures;
  if (args.workload === 'enqueue') {
    figures = await c.enqueueWorkload(args, enqueue);
    const { rows } = await db.executeSql('select count(*)::int as n from pgboss.job where name = $1', [QUEUE]);
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
      finished = await workUntil(boss, args.inFlight, async () => ledger.ran >= args.jobs, args.capSeconds);
      counts = ledger.counts;
      seconds = Math.min((c.nowUs() - start) / 1e6, args.capSeconds);
    } else {
      const merged = await c.drainInProcesses(args);
      counts = merged.counts;
      seconds = merged.window > 0 ? merged.window : (c.nowUs() - start) / 1e6;
      finished = merged.finished;
    }
    const still = await unfinished(boss);
    const { ran, duplicates, lost } = c.check(counts, still);
    figures = {
      inFlight: args.inFlight, processes: args.processes, ran, seconds, perSecond: ran / seconds,
      capped: !finished, duplicates, lost, unfinished: still.length, ok: duplicates === 0 && lost === 0,
    };
  } else if (args.workload === 'latency') {
    const working = workUntil(boss, 64, async () => ledger.ran >= args.jobs, args.jobs / args.rate + 30);
    await c.sleep(500);
    await c.pacedEnqueue(args, ledger, (i) => enqueue([i]));
    const finished = await working;
    const still = await unfinished(boss);
    const { ran, duplicates, lost } = c.check(ledger.counts, still);
    figures = { ...c.percentiles(ledger.waits), rate: args.rate, ran, duplicates, lost, ok: finished && duplicates === 0 && lost === 0 };
  } else {
    c.fail(`--workload: enqueue, drain or latency, not ${args.workload}`);
  }
  await boss.stop({ graceful: true, wait: true });
  c.report('pg-boss', args, figures);
}

main().catch((err) => c.fail(err.stack || String(err)));
