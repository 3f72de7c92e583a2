// Shared by the peer drivers that pglease-bench runs (bench/src/peers/node.rs).
//
// The harness copies these files next to the node_modules it installed from the npm registry and
// talks to a driver through lines: it writes the configuration as one JSON line on stdin, the
// driver answers {"event":"ready"}; then "produce" (the driver preloads the backlog and answers
// {"event":"produced"}) and "consume" (the driver drains it for at most `seconds` and answers
// {"event":"done"} with the records). Everything else a library prints goes to stderr.

import { readFileSync } from "node:fs";
import readline from "node:readline";

// Keep stdout for the protocol: libraries that log through console.log write to stderr instead.
const toStderr = (...args) => process.stderr.write(args.map(String).join(" ") + "\n");
console.log = toStderr;
console.info = toStderr;
console.debug = toStderr;

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/** The next line from the harness (throws at end of input). */
export async function nextLine() {
  const { value, done } = await lines.next();
  if (done) throw new Error("the harness closed stdin");
  return value.trim();
}

/** Waits for the harness to say `word`. */
export async function expect(word) {
  const got = await nextLine();
  if (got !== word) throw new Error(`expected "${word}" from the harness, got "${got}"`);
}

/** Writes one protocol line; resolves once it was handed to the pipe (await it before exiting:
 * an exit drops what a pipe has not taken yet). */
export function say(obj) {
  return new Promise((resolve) => process.stdout.write(JSON.stringify(obj) + "\n", () => resolve()));
}

/** The configuration line; `keys` are the key strings, message i has key i % keys.length. */
export async function readConfig() {
  const cfg = JSON.parse(await nextLine());
  for (const f of ["conn", "queue", "keys", "backlog", "preload_batch", "consumers", "seconds", "batch"]) {
    if (cfg[f] === undefined) throw new Error(`configuration without "${f}"`);
  }
  return cfg;
}

/** node-postgres settings for the harness's server (a unix socket directory or a TCP host). */
export function pgSettings(conn, max) {
  return {
    host: conn.host,
    port: conn.port,
    user: conn.user,
    database: conn.database,
    password: conn.password ?? undefined,
    max,
    options: `-c synchronous_commit=${conn.synchronous_commit}`,
  };
}

/** The workload: message i carries key index i % K and its sequence number within the key. */
export function message(i, keyCount) {
  const k = i % keyCount;
  const s = Math.floor(i / keyCount);
  return { k, s };
}

/** A payload of about 100 bytes of JSON carrying (k, s). */
export function payload(k, s) {
  const head = `{"k":${k},"s":${s},"pad":"`;
  const pad = Math.max(0, 100 - head.length - 2);
  return { k, s, pad: "x".repeat(pad) };
}

/** Preload batches: consecutive messages, `size` per call. */
export function* batches(backlog, size) {
  for (let start = 0; start < backlog; start += size) {
    yield [start, Math.min(backlog, start + size)];
  }
}

/**
 * What the consumers saw: for each handled message its key, its sequence number, a ticket taken
 * when the handler started on it and a ticket taken when the handler had finished it (before the
 * library settles it). A handler given a batch handles its messages one after the other, in the
 * order given. Tickets come from one counter, so they order every event of the run.
 */
export class Recorder {
  ticket = 0;
  flat = [];
  count = 0;
  lastEnd = 0;

  /** A handler got these messages ({k, s} each) and handled them in order. */
  handle(msgs) {
    for (const m of msgs) {
      const started = ++this.ticket;
      this.flat.push(m.k, m.s, started, ++this.ticket);
    }
    this.count += msgs.length;
    this.lastEnd = performance.now();
  }
}

/** The version of an installed package (read from node_modules next to the drivers). */
export function packageVersion(name) {
  const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  try {
    return JSON.parse(readFileSync(url, "utf8")).version;
  } catch {
    return "?";
  }
}

export function fail(err) {
  process.stderr.write(`driver failed: ${err?.stack ?? err}\n`);
  say({ event: "error", message: String(err?.message ?? err) }).then(() => process.exit(1));
}
