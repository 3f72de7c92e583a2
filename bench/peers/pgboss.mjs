// pg-boss driver for `pglease-bench peers` (protocol: common.mjs).
//
// One queue with the `key_strict_fifo` policy, the key as `singletonKey`. Preload: `insert` of
// `preload_batch` jobs per call (never two jobs of one key in one call: pg-boss orders a key's jobs
// by created_on, which is the inserting transaction's start time, then by a random uuid).
// Consume, mode "work" (how pg-boss is meant to be run): `work()` with `localConcurrency` =
// consumers, `batchSize` = batch, the shortest polling interval it allows (0.5 s) and
// `burstWhenBatchFull` (both polling intervals at that minimum: with LISTEN on, pg-boss would
// otherwise wait 30 s after a short fetch, and a notification comes only for a new job, not for a
// key that became free); mode "fetch": `consumers` loops of `fetch({batchSize})` → `complete(ids)`,
// retrying after 1 ms when a fetch comes back empty.

import { PgBoss } from "pg-boss";
import {
  batches,
  expect,
  fail,
  message,
  payload,
  packageVersion,
  pgSettings,
  readConfig,
  Recorder,
  say,
} from "./common.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const cfg = await readConfig();
  const mode = cfg.mode ?? "work";
  if (mode !== "work" && mode !== "fetch") throw new Error(`unknown mode ${mode}`);
  const version = packageVersion("pg-boss");
  let errors = 0;
  const boss = new PgBoss({
    ...pgSettings(cfg.conn, cfg.consumers + 3),
    schema: "pgboss",
    schedule: false,
    useListenNotify: true,
  });
  boss.on("error", (e) => {
    errors += 1;
    console.error(`pg-boss error: ${e?.message ?? e}`);
  });
  await boss.start();
  await boss.createQueue(cfg.queue, { policy: "key_strict_fifo", notify: true });
  const workOptions = {
    batchSize: cfg.batch,
    localConcurrency: cfg.consumers,
    pollingIntervalSeconds: 0.5,
    notifyPollingIntervalSeconds: 0.5,
    burstWhenBatchFull: true,
  };
  const shown = { ...workOptions, localConcurrency: "consumers" };
  await say({
    event: "ready",
    versions: { "pg-boss": version, node: process.versions.node },
    settings:
      mode === "work"
        ? `insert() batches; queue policy key_strict_fifo (notify on, useListenNotify: true); work(${JSON.stringify(shown)})`
        : `insert() batches; queue policy key_strict_fifo; one loop per consumer of fetch({batchSize: ${cfg.batch}}) -> complete(ids), 1 ms pause after an empty fetch`,
  });

  await expect("produce");
  const keyCount = cfg.keys.length;
  const t0 = performance.now();
  for (const [a, b] of batches(cfg.backlog, cfg.preload_batch)) {
    const jobs = [];
    for (let i = a; i < b; i++) {
      const { k, s } = message(i, keyCount);
      jobs.push({ data: payload(k, s), singletonKey: cfg.keys[k] });
    }
    await boss.insert(cfg.queue, jobs);
  }
  await say({ event: "produced", produced: cfg.backlog, seconds: (performance.now() - t0) / 1000 });

  await expect("consume");
  const rec = new Recorder();
  let empty = 0;
  const start = performance.now();
  const deadline = start + cfg.seconds * 1000;
  const handle = (jobs) => {
    rec.handle(jobs.map((j) => ({ k: j.data.k, s: j.data.s })));
  };
  if (mode === "work") {
    let allDone;
    const finished = new Promise((r) => (allDone = r));
    await boss.work(cfg.queue, workOptions, async (jobs) => {
      handle(jobs);
      if (rec.count >= cfg.backlog) allDone();
    });
    await Promise.race([finished, sleep(Math.max(0, deadline - performance.now()))]);
    await boss.offWork(cfg.queue, { wait: true });
  } else {
    const loop = async () => {
      while (performance.now() < deadline && rec.count < cfg.backlog) {
        const jobs = await boss.fetch(cfg.queue, { batchSize: cfg.batch });
        if (!jobs || jobs.length === 0) {
          empty += 1;
          await sleep(1);
          continue;
        }
        handle(jobs);
        await boss.complete(
          cfg.queue,
          jobs.map((j) => j.id),
        );
        rec.lastEnd = performance.now();
      }
    };
    await Promise.all(Array.from({ length: cfg.consumers }, loop));
  }
  const seconds = rec.count > 0 ? (rec.lastEnd - start) / 1000 : cfg.seconds;
  await say({
    event: "done",
    consumed: rec.count,
    seconds,
    empty_reads: empty,
    errors,
    records: rec.flat,
  });
  await boss.deleteQueue(cfg.queue);
  await boss.stop({ graceful: false, wait: true });
}

main().then(
  () => process.exit(0),
  (e) => fail(e),
);
