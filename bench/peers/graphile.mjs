// Graphile Worker driver for `pglease-bench peers` (protocol: common.mjs).
//
// Each key is a named queue (`queueName`): Graphile Worker runs the jobs of one named queue one at
// a time. Preload: `addJobs` of `preload_batch` jobs per call (never two jobs of one queue in one
// call: a call gives all its jobs the same run_at, and jobs are taken by priority and run_at).
// Consume: one runner (`run()`) with `concurrency` = consumers, LISTEN for new jobs as always,
// the default poll interval (2 s). Mode "run": otherwise the defaults (each worker takes one job
// per query and completes it before taking the next). Mode "batched": the batching the
// performance guide recommends for high throughput (a local queue of `batch` jobs fetched per
// query, complete and fail batch delays of 0).

import { Logger, makeWorkerUtils, run } from "graphile-worker";
import pg from "pg";
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
const TASK = "peers_task";

async function main() {
  const cfg = await readConfig();
  const version = packageVersion("graphile-worker");
  let errors = 0;
  const logger = new Logger(() => (level, msg) => {
    if (level === "error" || level === "warning") {
      if (level === "error") errors += 1;
      console.error(`graphile-worker ${level}: ${msg}`);
    }
  });
  const pool = new pg.Pool(pgSettings(cfg.conn, cfg.consumers + 4));
  const utils = await makeWorkerUtils({ pgPool: pool, logger });
  await utils.migrate();
  const mode = cfg.mode ?? "run";
  if (mode !== "run" && mode !== "batched") throw new Error(`unknown mode ${mode}`);
  const batching =
    mode === "batched"
      ? { localQueue: { size: cfg.batch }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
      : {};
  await say({
    event: "ready",
    versions: { "graphile-worker": version, node: process.versions.node, pg: packageVersion("pg") },
    settings: `addJobs() batches, queueName = key; run() with concurrency = consumers, ${
      mode === "batched" ? `preset.worker ${JSON.stringify(batching)}` : "no local queue, jobs completed one by one (the defaults)"
    }, pollInterval default (2 s), LISTEN on new jobs`,
  });

  await expect("produce");
  const keyCount = cfg.keys.length;
  const t0 = performance.now();
  for (const [a, b] of batches(cfg.backlog, cfg.preload_batch)) {
    const specs = [];
    for (let i = a; i < b; i++) {
      const { k, s } = message(i, keyCount);
      specs.push({ identifier: TASK, payload: payload(k, s), queueName: cfg.keys[k] });
    }
    await utils.addJobs(specs);
  }
  await say({ event: "produced", produced: cfg.backlog, seconds: (performance.now() - t0) / 1000 });

  await expect("consume");
  const rec = new Recorder();
  let allDone;
  const finished = new Promise((r) => (allDone = r));
  const start = performance.now();
  const runner = await run({
    pgPool: pool,
    logger,
    concurrency: cfg.consumers,
    noHandleSignals: true,
    taskList: {
      [TASK]: async (p) => {
        rec.handle([{ k: p.k, s: p.s }]);
        if (rec.count >= cfg.backlog) allDone();
      },
    },
    preset: { worker: batching },
  });
  await Promise.race([finished, sleep(Math.max(0, start + cfg.seconds * 1000 - performance.now()))]);
  const seconds = rec.count > 0 ? (rec.lastEnd - start) / 1000 : cfg.seconds;
  await runner.stop();
  await say({ event: "done", consumed: rec.count, seconds, empty_reads: 0, errors, records: rec.flat });
  await utils.release();
  await pool.end();
}

main().then(
  () => process.exit(0),
  (e) => fail(e),
);
