-- The smoke suite of `make installcheck`: pg_lease_queue installs (with pg_lease) and a message
-- goes from send through a fenced claim, receive and ack. The full suites are in Rust
-- (tests/, crates/pglease-queue/tests/). Output holds no timestamps or ids: it is the same on every
-- run and every version.
CREATE EXTENSION pg_lease_queue CASCADE;
SELECT lease_queue.version() = extversion AS version_is_installed
  FROM pg_extension WHERE extname = 'pg_lease_queue';
SELECT lease_queue.create_queue('smoke', 1);
SELECT lease_queue.send('smoke', 'customer-42', '{"order": 1001}') > 0 AS sent;
SELECT lease_queue.send('smoke', 'customer-42', '{"order": 1002}') > 0 AS sent;
SELECT claimed, epoch FROM lease_queue.claim('smoke', 0, 'worker-a', interval '30 seconds');
-- Delivered in commit order within the key.
SELECT key, payload, attempts FROM lease_queue.receive('smoke', 0, 'worker-a', 1, 10) ORDER BY id;
SELECT batch_id AS batch FROM lease_queue.status('smoke') \gset
-- Another epoch is refused (LE003: the partition is held at epoch 1); the holder's ack settles it.
\set VERBOSITY sqlstate
SELECT lease_queue.ack('smoke', 0, 'worker-a', 2, :batch);
\set VERBOSITY default
SELECT lease_queue.ack('smoke', 0, 'worker-a', 1, :batch);
SELECT partition, owner, epoch, batch_id IS NULL AS no_open_batch, backlog, dead_letters, acked
  FROM lease_queue.status('smoke');
SELECT lease_queue.release('smoke', 0, 'worker-a', 1);
SELECT lease_queue.drop_queue('smoke');
DROP EXTENSION pg_lease_queue;
DROP EXTENSION pg_lease;
