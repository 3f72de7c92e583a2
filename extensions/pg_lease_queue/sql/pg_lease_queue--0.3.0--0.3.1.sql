-- pg_lease_queue 0.3.0 -> 0.3.1: a delivery writes no key row (issue 26, consuming one message at a
-- time). No change to the API or to any behaviour a caller can see (docs/QUEUE.md).
--
-- Changed:
--   * receive (and ack_and_receive) leaves the row of each key it delivers as it is: the key's
--     ready_at keeps the due time of its head, now in the open batch, instead of becoming NULL (an
--     update of an indexed column: a key row and two index entries per key delivered). receive
--     reads ready_at only when no batch is open, and the close of the batch sets it again;
--     next_due leaves the open batch's keys out, and redrive finds a key in the open batch from
--     the partition's batch_keys. Keys visited but not taken are brought up to date as before.
--   * The internal functions that find rows by `= ANY (array)` use generic plans
--     (plan_cache_mode = force_generic_plan): they were planned again at every call (the commit
--     trigger's main statement took 107 us to plan and 30 us to run for a send).
--   * The commit trigger reads the transaction's messages once, and finds a key's lowest position
--     of the transaction through a jsonb object,
--     not a correlated scan of its list of keys: a send_batch of 10 000 messages over 10 000 keys
--     with messages pending took 7 s to commit (O(keys^2)), now O(keys log keys).
--   * Plans that outlive the tables' size: a session keeps its plans, and those made while the
--     tables were (nearly) empty -- a new installation, or a drained queue once vacuumed -- read
--     the whole messages table or one of its indexes at every commit and nack once the queue had
--     grown (0.3.0 too). The commit trigger and nack now find messages one id at a time through
--     the primary key, and the hot path's functions plan without sequential scans
--     (enable_seqscan = off: the commit trigger, receive's and ack's internals, nack, release,
--     redrive, next_due).
--   * ack_and_receive writes the partition's row once (the ack's close and the next batch in one
--     update; it wrote it twice).
-- Replaced (internal): lease_queue._refresh_keys(bigint, integer, text[], bigint[]) by
--          _refresh_keys(bigint, integer, text[]); _close_batch and _open_batch gain a last
--          boolean argument (the deferred write of the partition's row).
-- Upgrade: re-creates _stamp_commit_order, receive, ack, ack_and_receive, nack, release, redrive,
-- next_due, version and the internal functions named above; no table changes. A key of a batch open at the
-- update keeps ready_at NULL until that batch closes, which was and stays correct.

\echo Use "ALTER EXTENSION pg_lease_queue UPDATE TO '0.3.1'" to load this file. \quit

DROP FUNCTION lease_queue._refresh_keys(bigint, integer, text[], bigint[]);
DROP FUNCTION lease_queue._close_batch(text, text, lease_queue.partitions, bigint, bigint);
DROP FUNCTION lease_queue._open_batch(lease_queue.partitions, integer, text, bigint, integer);

-- Bring the key rows of `keys` (of one partition) up to date with their messages: lock them in key
-- order first (so that a producer committing a message of one of them has committed, and is seen by
-- the next statement, or has not started its commit), then set ready_at to each key's head's due
-- time, or delete the row if the key has no committed message left; a row already right is not
-- written. The calling transaction's own uncommitted messages (its commit mark) are not the key's
-- yet: they are left out. Generic plans (a custom plan per call for `key = ANY (...)` cost more
-- than the statement), without sequential scans (see lease_queue._stamp_commit_order).
CREATE FUNCTION lease_queue._refresh_keys(qid bigint, partition integer, keys text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_key text COLLATE "C";
    v_id bigint;
    v_deliver_at timestamptz;
    v_own pg_catalog.int8multirange;
BEGIN
    IF keys IS NULL OR pg_catalog.cardinality(keys) = 0 THEN
        RETURN;
    END IF;
    PERFORM FROM lease_queue.keys AS k
      WHERE k.qid = _refresh_keys.qid
        AND k.key = ANY (_refresh_keys.keys::text[] COLLATE "C")
      ORDER BY k.key
        FOR NO KEY UPDATE;
    SELECT c.ids INTO v_own
      FROM lease_queue.commit_marks AS c WHERE c.xid = pg_catalog.txid_current_if_assigned();
    -- One key at a time, through the primary key and the key's index: the cost is the number of
    -- keys, never the size of the tables.
    FOREACH v_key IN ARRAY keys LOOP
        SELECT m.id, m.deliver_at INTO v_id, v_deliver_at
          FROM lease_queue.messages AS m
         WHERE m.qid = _refresh_keys.qid AND m.partition = _refresh_keys.partition
           AND m.key = v_key
           AND (v_own IS NULL OR NOT m.id OPERATOR(pg_catalog.<@) v_own)
         ORDER BY m.seq
         LIMIT 1;
        IF NOT FOUND THEN
            DELETE FROM lease_queue.keys AS k WHERE k.qid = _refresh_keys.qid AND k.key = v_key;
        ELSE
            UPDATE lease_queue.keys AS k
               SET ready_at = v_deliver_at
             WHERE k.qid = _refresh_keys.qid AND k.key = v_key
               AND k.ready_at IS DISTINCT FROM v_deliver_at;
        END IF;
    END LOOP;
END
$$;

-- Close the open batch `batch_id` of partition p (locked, the caller fenced at `epoch`): delete its
-- messages, count them, record the batch as the last closed, bring its keys up to date. Returns the
-- partition's row as it now is. With `deferred` the partition's row is not written: the caller
-- writes the row returned (ack_and_receive, through _open_batch: one update of the row per call).
-- A repeated close of the batch this epoch closed last changes nothing. LQ002 (fn's) if batch_id is
-- not the open batch at this epoch.
CREATE FUNCTION lease_queue._close_batch(fn text, queue text, p lease_queue.partitions, epoch bigint,
                                         batch_id bigint, deferred boolean)
RETURNS lease_queue.partitions
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_acked bigint;
BEGIN
    IF p.batch_id IS DISTINCT FROM _close_batch.batch_id OR p.batch_epoch IS DISTINCT FROM _close_batch.epoch THEN
        IF p.last_batch_id = _close_batch.batch_id AND p.last_batch_epoch = _close_batch.epoch THEN
            RETURN p;
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'LQ002',
            MESSAGE = fn || ': batch ' || _close_batch.batch_id || ' is not the open batch of partition '
                      || p.partition || ' of ' || pg_catalog.quote_literal(queue) || ' at epoch ' || _close_batch.epoch,
            DETAIL  = CASE WHEN p.batch_id IS NULL THEN 'The partition has no open batch.'
                           ELSE 'The open batch is ' || p.batch_id || ', issued at epoch ' || p.batch_epoch || '.' END,
            HINT    = 'Call lease_queue.receive to get the open batch at your epoch.';
    END IF;

    DELETE FROM lease_queue.messages AS b WHERE b.id = ANY (p.batch_ids);
    GET DIAGNOSTICS v_acked = ROW_COUNT;
    IF NOT _close_batch.deferred THEN
        UPDATE lease_queue.partitions AS t
           SET batch_id = NULL, batch_epoch = NULL, batch_owner = NULL, batch_opened_at = NULL,
               batch_keys = NULL, batch_ids = NULL, last_batch_id = p.batch_id,
               last_batch_epoch = _close_batch.epoch, acked = t.acked + v_acked
         WHERE t.qid = p.qid AND t.partition = p.partition;
    END IF;
    -- Every key the batch held, also those its nacks sent back: one pass, in key order.
    PERFORM lease_queue._refresh_keys(p.qid, p.partition, p.batch_keys);
    p.batch_id := NULL;
    p.batch_epoch := NULL;
    p.batch_owner := NULL;
    p.batch_opened_at := NULL;
    p.batch_keys := NULL;
    p.batch_ids := NULL;
    p.last_batch_id := _close_batch.batch_id;
    p.last_batch_epoch := _close_batch.epoch;
    p.acked := p.acked + v_acked;
    RETURN p;
END
$$;

-- The batch receive returns, for partition p (locked, the caller fenced and renewed at `epoch`):
-- the open batch (re-issued to this epoch if it was issued at an earlier one), or a new batch of up
-- to `max` deliverable messages, or nothing. See lease_queue.receive. `closed`: p is the row as
-- _close_batch left it without writing it (deferred); it is written here, with the new batch if
-- one opens.
CREATE FUNCTION lease_queue._open_batch(p lease_queue.partitions, max_attempts integer, owner text,
                                        epoch bigint, max integer, closed boolean)
RETURNS SETOF lease_queue.delivery
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
ROWS 100
AS $$
DECLARE
    v_now timestamptz;
    v_batch bigint;
    v_left integer;
    v_ids bigint[] := '{}';
    v_dead bigint[] := '{}';
    v_keys text[] COLLATE "C" := '{}';       -- the keys visited (locked), to bring up to date
    v_taken text[] COLLATE "C" := '{}';      -- the keys of the batch's messages
    v_own pg_catalog.int8multirange;
    v_took boolean;
    c record;
    m record;
BEGIN
    -- An open batch: the same messages again.
    IF p.batch_id IS NOT NULL THEN
        IF p.batch_epoch <> _open_batch.epoch THEN
            -- Its delivery to the former holder ends unacked: counted and recorded as their last.
            -- Those delivered max_attempts times are dead-lettered; the rest are re-issued.
            UPDATE lease_queue.messages AS b
               SET attempts = b.attempts + 1, epoch = p.batch_epoch, last_batch_id = p.batch_id
             WHERE b.id = ANY (p.batch_ids);
            SELECT pg_catalog.array_agg(b.id), pg_catalog.array_agg(DISTINCT b.key) FILTER (WHERE b.key IS NOT NULL)
              INTO v_dead, v_keys
              FROM lease_queue.messages AS b
             WHERE b.id = ANY (p.batch_ids) AND b.attempts >= _open_batch.max_attempts;
            IF v_dead IS NOT NULL THEN
                PERFORM lease_queue._bury(v_dead, NULL);
                SELECT pg_catalog.array_agg(u.id ORDER BY u.n) INTO v_ids
                  FROM pg_catalog.unnest(p.batch_ids) WITH ORDINALITY AS u(id, n)
                 WHERE u.id <> ALL (v_dead);
            ELSE
                v_ids := p.batch_ids;
            END IF;
            IF pg_catalog.cardinality(v_ids) > 0 THEN
                UPDATE lease_queue.partitions AS t
                   SET batch_epoch = _open_batch.epoch, batch_owner = _open_batch.owner, batch_ids = v_ids
                 WHERE t.qid = p.qid AND t.partition = p.partition;
                p.batch_ids := v_ids;
                PERFORM lease_queue._refresh_keys(p.qid, p.partition, v_keys);
            ELSE
                -- Every message of the batch was dead-lettered (or sent back by nacks): it is over.
                UPDATE lease_queue.partitions AS t
                   SET batch_id = NULL, batch_epoch = NULL, batch_owner = NULL, batch_opened_at = NULL,
                       batch_keys = NULL, batch_ids = NULL
                 WHERE t.qid = p.qid AND t.partition = p.partition;
                PERFORM lease_queue._refresh_keys(p.qid, p.partition, p.batch_keys);
                p.batch_id := NULL;
            END IF;
        END IF;
        IF p.batch_id IS NOT NULL THEN
            RETURN QUERY
                SELECT p.batch_id, b.id, b.key::text, b.payload, b.attempts + 1, b.enqueued_at
                  FROM pg_catalog.unnest(p.batch_ids) WITH ORDINALITY AS u(id, n)
                  JOIN lease_queue.messages AS b ON b.id = u.id
                 WHERE b.id = ANY (p.batch_ids)
                 ORDER BY u.n;
            RETURN;
        END IF;
    END IF;

    -- A new batch. The due keys and unkeyed messages, oldest first. A key's row is locked when the
    -- batch comes to it, before its messages are read; a key whose row a producer holds at this
    -- moment (committing) is skipped, not waited for: receive never waits for a producer, and
    -- delivering a key later is always safe. Only the keys visited are locked, and only those not
    -- taken brought up to date: the cost follows the batch, not the number of due keys. The calling
    -- transaction's own uncommitted messages are not delivered.
    v_now := pg_catalog.clock_timestamp();
    v_left := _open_batch.max;
    v_ids := '{}';
    SELECT k.ids INTO v_own
      FROM lease_queue.commit_marks AS k WHERE k.xid = pg_catalog.txid_current_if_assigned();
    FOR c IN
        SELECT u.t, u.key, u.id, u.attempts FROM (
            (SELECT k.ready_at AS t, k.key, NULL::bigint AS id, NULL::integer AS attempts
               FROM lease_queue.keys AS k
              WHERE k.qid = p.qid AND k.partition = p.partition AND k.ready_at <= v_now
              ORDER BY k.ready_at, k.key
              LIMIT _open_batch.max)
            UNION ALL
            (SELECT x.deliver_at, NULL, x.id, x.attempts
               FROM lease_queue.messages AS x
              WHERE x.qid = p.qid AND x.partition = p.partition AND x.key IS NULL
                AND x.deliver_at <= v_now
              ORDER BY x.deliver_at, x.id
              LIMIT _open_batch.max)) AS u
         ORDER BY u.t, u.key, u.id
    LOOP
        EXIT WHEN v_left = 0;
        IF c.id IS NOT NULL THEN
            -- An unkeyed message.
            IF c.attempts >= _open_batch.max_attempts THEN
                v_dead := v_dead || c.id;
            ELSE
                v_ids := v_ids || c.id;
                v_left := v_left - 1;
            END IF;
            CONTINUE;
        END IF;
        PERFORM FROM lease_queue.keys AS k
          WHERE k.qid = p.qid AND k.key = c.key AND k.ready_at <= v_now
            FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        v_keys := v_keys || c.key;
        v_took := false;
        -- The key's messages from the head, while they are due; a retried message ends the key's
        -- part of the batch; a message delivered max_attempts times is dead-lettered and skipped.
        FOR m IN
            SELECT b.id, b.deliver_at, b.attempts, b.retry
              FROM lease_queue.messages AS b
             WHERE b.qid = p.qid AND b.partition = p.partition AND b.key = c.key
               AND (v_own IS NULL OR NOT b.id OPERATOR(pg_catalog.<@) v_own)
             ORDER BY b.seq
        LOOP
            EXIT WHEN v_left = 0;
            IF m.attempts >= _open_batch.max_attempts THEN
                v_dead := v_dead || m.id;
                CONTINUE;
            END IF;
            EXIT WHEN m.deliver_at > v_now;
            v_ids := v_ids || m.id;
            v_left := v_left - 1;
            v_took := true;
            EXIT WHEN m.retry;
        END LOOP;
        IF v_took THEN
            v_taken := v_taken || c.key;
        END IF;
    END LOOP;

    IF pg_catalog.cardinality(v_dead) > 0 THEN
        PERFORM lease_queue._bury(v_dead, NULL);
    END IF;
    IF pg_catalog.cardinality(v_ids) > 0 THEN
        -- The batch is the partition's row: no message row is written.
        v_batch := pg_catalog.nextval('lease_queue.batch_ids');
        UPDATE lease_queue.partitions AS t
           SET batch_id = v_batch, batch_epoch = _open_batch.epoch, batch_owner = _open_batch.owner,
               batch_opened_at = v_now,
               batch_keys = CASE WHEN pg_catalog.cardinality(v_taken) > 0
                                 THEN (SELECT pg_catalog.array_agg(x ORDER BY x)
                                         FROM pg_catalog.unnest(v_taken) AS x) END,
               batch_ids = v_ids,
               last_batch_id = p.last_batch_id, last_batch_epoch = p.last_batch_epoch, acked = p.acked
         WHERE t.qid = p.qid AND t.partition = p.partition;
    ELSIF _open_batch.closed THEN
        UPDATE lease_queue.partitions AS t
           SET batch_id = NULL, batch_epoch = NULL, batch_owner = NULL, batch_opened_at = NULL,
               batch_keys = NULL, batch_ids = NULL,
               last_batch_id = p.last_batch_id, last_batch_epoch = p.last_batch_epoch, acked = p.acked
         WHERE t.qid = p.qid AND t.partition = p.partition;
    END IF;
    -- The keys visited and not taken (their head was not due, dead-lettered, or gone) are brought
    -- up to date; a key taken keeps its row as it is (its ready_at, the due time of the head now in
    -- the batch, is set again when the batch closes): a delivery writes no key row.
    IF pg_catalog.cardinality(v_keys) > pg_catalog.cardinality(v_taken) THEN
        PERFORM lease_queue._refresh_keys(p.qid, p.partition,
            ARRAY(SELECT x FROM pg_catalog.unnest(v_keys) AS x WHERE x <> ALL (v_taken)));
    END IF;

    IF v_batch IS NOT NULL THEN
        RETURN QUERY
            SELECT v_batch, b.id, b.key::text, b.payload, b.attempts + 1, b.enqueued_at
              FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(id, n)
              JOIN lease_queue.messages AS b ON b.id = u.id
             WHERE b.id = ANY (v_ids)
             ORDER BY u.n;
    END IF;
END
$$;

-- The commit order: a deferred constraint trigger on lease_queue.commit_marks, whose row for the
-- transaction the first keyed send inserts (later sends add their ids to it). It runs in the
-- committing transaction's pre-commit phase (under SET CONSTRAINTS ... IMMEDIATE: at the end of that
-- send's statement; the next send then marks the transaction again). It deletes the mark and, in
-- one statement for every key of the transaction, in key order, takes each key's row lock (creating
-- the row for a new key). The lock is held until the commit, so a second transaction committing
-- messages of the same key waits here until the first has committed. Under the lock:
--   * if every message of the key in this transaction has a position (its id, from send) above the
--     key's last_seq, the positions stand and last_seq becomes their highest: one update of the
--     key's row and no write of a message (the usual case: transactions commit in the order they
--     sent);
--   * otherwise (a transaction that sent later committed first) the key's messages of this
--     transaction get new positions from lease_queue.message_ids, in their order, above every
--     position taken so far, and last_seq the highest of them.
-- Either way, for one key, position order is commit order. Without JIT compilation (compiling a
-- plan whose size the planner misjudged took ~25 ms per commit) and with generic plans (the
-- statements find rows through arrays, whatever their length: planning them again at each commit
-- cost more than running them), made without sequential scans: a generic plan is kept for the
-- session, and one made while the tables were small would scan them whole at every commit once
-- they have grown (every statement here has an index to find its rows).
CREATE OR REPLACE FUNCTION lease_queue._stamp_commit_order()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_ranges pg_catalog.int8multirange;
    v_ids bigint[];
    -- Per key of this transaction, in (qid, key) order: its queue, key, partition, the due time of
    -- its first message (the ready_at of a new key row) and its highest position; and its lowest
    -- position by "qid key" (a jsonb object: looked up per key row below in O(log keys)).
    v_qid bigint[];
    v_key text[] COLLATE "C";
    v_part integer[];
    v_due timestamptz[];
    v_last bigint[];
    v_first jsonb;
    v_moved jsonb;               -- the keys ("qid key") whose positions are taken again
    v_renumber bigint[];
    v_qids bigint[];
    v_keys text[] COLLATE "C";
BEGIN
    DELETE FROM lease_queue.commit_marks AS c WHERE c.xid = pg_catalog.txid_current()
    RETURNING c.ids INTO v_ranges;
    IF v_ranges IS NULL THEN
        RETURN NULL;
    END IF;
    v_ids := ARRAY(SELECT pg_catalog.generate_series(pg_catalog.lower(r.ids), pg_catalog.upper(r.ids) - 1)
                     FROM pg_catalog.unnest(v_ranges) AS r(ids));
    -- This transaction's keyed messages (those of a rolled-back subtransaction are not visible),
    -- read once, one id at a time through the primary key (a lateral subquery the planner cannot
    -- turn into a join): whatever the statistics said when the session made its plans, a commit
    -- reads its own messages only. (With `id = ANY (...)` and the statistics of a drained, vacuumed
    -- queue, the plan read a whole index of messages at every commit.)
    SELECT pg_catalog.array_agg(g.qid ORDER BY g.qid, g.key), pg_catalog.array_agg(g.key ORDER BY g.qid, g.key),
           pg_catalog.array_agg(g.partition ORDER BY g.qid, g.key),
           pg_catalog.array_agg(g.first_due ORDER BY g.qid, g.key),
           pg_catalog.array_agg(g.last_seq ORDER BY g.qid, g.key),
           pg_catalog.jsonb_object_agg(g.qid::text || ' ' || g.key, g.first_seq)
      INTO v_qid, v_key, v_part, v_due, v_last, v_first
      FROM (SELECT m.qid, m.key, pg_catalog.min(m.partition) AS partition,
                   pg_catalog.min(m.seq) AS first_seq, pg_catalog.max(m.seq) AS last_seq,
                   (pg_catalog.array_agg(m.deliver_at ORDER BY m.seq))[1] AS first_due
              FROM pg_catalog.unnest(v_ids) AS u(id)
             CROSS JOIN LATERAL (SELECT x.qid, x.key, x.partition, x.seq, x.deliver_at
                                   FROM lease_queue.messages AS x WHERE x.id = u.id OFFSET 0) AS m
             WHERE m.key IS NOT NULL
             GROUP BY m.qid, m.key) AS g;
    IF v_qid IS NULL THEN
        RETURN NULL;
    END IF;
    -- The key rows, created or locked in key order; a row's last_seq becomes this transaction's
    -- highest position of the key when all its positions lie above it. The keys whose last_seq did
    -- not become that are to be renumbered.
    WITH locked AS (
        INSERT INTO lease_queue.keys AS k (qid, key, partition, ready_at, last_seq)
        SELECT u.qid, u.key, u.part, u.due, u.last
          FROM ROWS FROM (pg_catalog.unnest(v_qid), pg_catalog.unnest(v_key), pg_catalog.unnest(v_part),
                          pg_catalog.unnest(v_due), pg_catalog.unnest(v_last)) AS u(qid, key, part, due, last)
         ORDER BY u.qid, u.key
        ON CONFLICT ON CONSTRAINT keys_pkey DO UPDATE
           SET last_seq = CASE WHEN k.last_seq < (v_first OPERATOR(pg_catalog.->>) (k.qid::text || ' ' || k.key))::bigint
                               THEN EXCLUDED.last_seq ELSE k.last_seq END
        RETURNING k.qid, k.key, k.last_seq
    )
    SELECT pg_catalog.jsonb_object_agg(l.qid::text || ' ' || l.key, true),
           pg_catalog.array_agg(DISTINCT l.qid), pg_catalog.array_agg(DISTINCT l.key)
      INTO v_moved, v_qids, v_keys
      FROM locked AS l
      JOIN ROWS FROM (pg_catalog.unnest(v_qid), pg_catalog.unnest(v_key), pg_catalog.unnest(v_last))
           AS u(qid, key, last)
        ON u.qid = l.qid AND u.key = l.key
     WHERE l.last_seq <> u.last;
    IF v_moved IS NULL THEN
        RETURN NULL;
    END IF;
    -- Their messages, key by key in position order, take new positions after every one taken so
    -- far (the transaction holds their key rows' locks).
    SELECT pg_catalog.array_agg(m.id ORDER BY m.qid, m.key, m.seq) INTO v_renumber
      FROM pg_catalog.unnest(v_ids) AS u(id)
     CROSS JOIN LATERAL (SELECT x.id, x.qid, x.key, x.seq FROM lease_queue.messages AS x
                          WHERE x.id = u.id OFFSET 0) AS m
     WHERE m.key IS NOT NULL AND v_moved OPERATOR(pg_catalog.?) (m.qid::text || ' ' || m.key);
    WITH numbered AS MATERIALIZED (
        SELECT u.id, pg_catalog.nextval('lease_queue.message_ids') AS seq
          FROM pg_catalog.unnest(v_renumber) WITH ORDINALITY AS u(id, n)
         ORDER BY u.n
    ), moved AS (
        UPDATE lease_queue.messages AS m SET seq = n.seq
          FROM numbered AS n WHERE m.id = ANY (v_renumber) AND m.id = n.id
        RETURNING m.qid, m.key, m.seq
    )
    UPDATE lease_queue.keys AS k SET last_seq = t.seq
      FROM (SELECT mv.qid, mv.key, pg_catalog.max(mv.seq) AS seq FROM moved AS mv
             GROUP BY mv.qid, mv.key) AS t
     WHERE k.qid = ANY (v_qids) AND k.key = ANY (v_keys)
       AND k.qid = t.qid AND k.key = t.key;
    RETURN NULL;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.receive(queue, partition, owner, epoch, max) -> SETOF delivery
--   delivery = (batch_id, id, key, payload, attempts, enqueued_at)
--
-- Fenced and a heartbeat: renews the partition's lease with the claim's ttl (LE001 not the holder,
-- LE002 lapsed, LE003 stale epoch; LQ004 if this epoch was not claimed through claim/claim_any;
-- nothing changes on a refusal). Then:
--   * an open batch issued at this epoch: returns it again (idempotent; safe to retry);
--   * an open batch issued at an earlier epoch (its holder crashed or was paused): re-issues the same
--     messages under the same batch_id to this epoch, counting a delivery (attempts + 1), so the
--     former holder can no longer ack it; messages already delivered max_attempts times are
--     dead-lettered instead (a batch left empty is closed and a new one opened);
--   * otherwise opens a batch of up to `max` (1..10000) deliverable messages: for each key that is
--     due (oldest first), its messages from the head in order while they are due, a retried message
--     without anything after it; unkeyed messages by due time. Each counts a delivery.
-- Returns the batch's messages in delivery order (within a key, in the key's order); no rows when
-- nothing is deliverable (no batch is opened). 22023 on invalid input; LQ001 no such queue.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.receive(queue text, partition integer, owner text, epoch bigint, max integer)
RETURNS SETOF lease_queue.delivery
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
ROWS 100
AS $$
DECLARE
    p lease_queue.partitions;
    q record;
BEGIN
    IF (lease_queue._valid_name(receive.queue)
        AND receive.partition BETWEEN 0 AND 1023
        AND pg_catalog.octet_length(receive.owner) BETWEEN 1 AND 1024
        AND receive.epoch IS NOT NULL
        AND receive.max BETWEEN 1 AND 10000) IS NOT TRUE
    THEN
        PERFORM lease_queue._check_partition_args('lease_queue.receive', receive.queue, receive.partition,
            receive.owner, receive.epoch, lease_queue._int_violations('max', receive.max, 1, 10000));
    END IF;
    p := lease_queue._lock_partition('lease_queue.receive', receive.queue, receive.partition, 'consume');
    q := lease_queue._queue('lease_queue.receive', receive.queue);
    PERFORM lease_queue._heartbeat('lease_queue.receive', p,
        lease_queue.lease_key(receive.queue, receive.partition), receive.owner, receive.epoch);
    RETURN QUERY
        SELECT * FROM lease_queue._open_batch(p, q.max_attempts, receive.owner, receive.epoch, receive.max,
                                              false);
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.ack(queue, partition, owner, epoch, batch_id)
--
-- Fenced (LE001/LE002/LE003, as lease.fence; the lease row stays locked FOR SHARE until the caller's
-- transaction ends, so the holder cannot change before it commits): closes the open batch, which
-- must have been issued to this epoch, deleting its messages, and adds their number to the
-- partition's acked counter. A repeated ack of the batch this epoch closed last succeeds again and
-- changes nothing (the counter included). LQ002 if batch_id is not the partition's open batch
-- at this epoch; LQ001 no such queue; 22023 on invalid input.
-- Database writes made earlier in the same transaction commit only if the ack does: the way to
-- apply a message's effects exactly once.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.ack(queue text, partition integer, owner text, epoch bigint, batch_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p lease_queue.partitions;
BEGIN
    IF (lease_queue._valid_name(ack.queue)
        AND ack.partition BETWEEN 0 AND 1023
        AND pg_catalog.octet_length(ack.owner) BETWEEN 1 AND 1024
        AND ack.epoch IS NOT NULL AND ack.batch_id IS NOT NULL) IS NOT TRUE
    THEN
        PERFORM lease_queue._check_partition_args('lease_queue.ack', ack.queue, ack.partition,
            ack.owner, ack.epoch,
            CASE WHEN ack.batch_id IS NULL THEN ARRAY['batch_id must not be NULL'] ELSE '{}' END);
    END IF;
    p := lease_queue._lock_partition('lease_queue.ack', ack.queue, ack.partition, 'consume');
    PERFORM lease.fence(lease_queue.lease_key(ack.queue, ack.partition), ack.owner, ack.epoch);
    PERFORM lease_queue._close_batch('lease_queue.ack', ack.queue, p, ack.epoch, ack.batch_id, false);
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.ack_and_receive(queue, partition, owner, epoch, batch_id, max) -> SETOF delivery
--
-- ack of batch_id (when not NULL) and then receive of up to `max`, in one statement: a consumer's
-- loop makes one round trip per batch. Fenced and a heartbeat as receive (LE001/LE002/LE003,
-- LQ004), checked before anything changes; the ack's LQ002 as ack (batch_id not the open batch at
-- this epoch, nor the one this epoch closed last). Returns what receive would return right after
-- the ack: the next batch (or the open one, when the ack was a repeat, so a retry after a lost
-- answer gets the same batch again), or no rows. Errors change nothing: a failed call neither acks
-- nor opens. LQ001 no such queue; 22023 on invalid input (as receive; batch_id may be NULL).
-- Database writes made earlier in the same transaction commit only if the call does.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.ack_and_receive(
    queue text, partition integer, owner text, epoch bigint, batch_id bigint, max integer)
RETURNS SETOF lease_queue.delivery
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
ROWS 100
AS $$
DECLARE
    p lease_queue.partitions;
    q record;
    v_open bigint;               -- the open batch before the ack
BEGIN
    IF (lease_queue._valid_name(ack_and_receive.queue)
        AND ack_and_receive.partition BETWEEN 0 AND 1023
        AND pg_catalog.octet_length(ack_and_receive.owner) BETWEEN 1 AND 1024
        AND ack_and_receive.epoch IS NOT NULL
        AND ack_and_receive.max BETWEEN 1 AND 10000) IS NOT TRUE
    THEN
        PERFORM lease_queue._check_partition_args('lease_queue.ack_and_receive', ack_and_receive.queue,
            ack_and_receive.partition, ack_and_receive.owner, ack_and_receive.epoch,
            lease_queue._int_violations('max', ack_and_receive.max, 1, 10000));
    END IF;
    p := lease_queue._lock_partition('lease_queue.ack_and_receive', ack_and_receive.queue,
                                     ack_and_receive.partition, 'consume');
    q := lease_queue._queue('lease_queue.ack_and_receive', ack_and_receive.queue);
    PERFORM lease_queue._heartbeat('lease_queue.ack_and_receive', p,
        lease_queue.lease_key(ack_and_receive.queue, ack_and_receive.partition),
        ack_and_receive.owner, ack_and_receive.epoch);
    -- The close and the open write the partition's row once (in _open_batch).
    IF ack_and_receive.batch_id IS NOT NULL THEN
        v_open := p.batch_id;
        p := lease_queue._close_batch('lease_queue.ack_and_receive', ack_and_receive.queue, p,
                                      ack_and_receive.epoch, ack_and_receive.batch_id, true);
    END IF;
    RETURN QUERY
        SELECT * FROM lease_queue._open_batch(p, q.max_attempts, ack_and_receive.owner,
                                              ack_and_receive.epoch, ack_and_receive.max,
                                              v_open IS NOT NULL AND p.batch_id IS NULL);
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.nack(queue, partition, owner, epoch, batch_id, id, retry_after DEFAULT 0, reason
-- DEFAULT NULL) -> text ('retrying' or 'dead_lettered')
--
-- Fenced like ack. Marks message `id` of the open batch as failed: it leaves the batch and is
-- delivered again no earlier than retry_after from now, without any later message of its key in
-- that batch and before any of them; the later messages of its key in the batch leave it too,
-- undelivered (their attempt is not counted). If it was delivered max_attempts times it is
-- dead-lettered instead (with `reason`) and its key continues. The rest of the batch stays open for
-- the ack. A repeated nack of a message that this batch already sent back (also one of those later
-- messages) changes nothing and reports the message's state. LQ002 if batch_id is not the open batch
-- at this epoch; LQ003 if the message is not in it; LQ001 no such queue; 22023 on invalid input
-- (retry_after in [0, 365 days], reason at most 8192 bytes).
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.nack(
    queue text, partition integer, owner text, epoch bigint, batch_id bigint, id bigint,
    retry_after interval DEFAULT interval '0', reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    p lease_queue.partitions;
    q record;
    m lease_queue.messages;
    v_back bigint[];
    v_dead boolean;
BEGIN
    IF (lease_queue._valid_name(nack.queue)
        AND nack.partition BETWEEN 0 AND 1023
        AND pg_catalog.octet_length(nack.owner) BETWEEN 1 AND 1024
        AND nack.epoch IS NOT NULL AND nack.batch_id IS NOT NULL AND nack.id IS NOT NULL
        AND EXTRACT(epoch FROM nack.retry_after) <@ '[0,31536000]'::pg_catalog.numrange
        AND (nack.reason IS NULL OR pg_catalog.octet_length(nack.reason) <= 8192)) IS NOT TRUE
    THEN
        PERFORM lease_queue._check_partition_args('lease_queue.nack', nack.queue, nack.partition,
            nack.owner, nack.epoch,
            CASE WHEN nack.batch_id IS NULL THEN ARRAY['batch_id must not be NULL'] ELSE '{}' END
            || CASE WHEN nack.id IS NULL THEN ARRAY['id must not be NULL'] ELSE '{}' END
            || lease_queue._interval_violations('retry_after', nack.retry_after, false)
            || CASE WHEN pg_catalog.octet_length(nack.reason) > 8192
                    THEN ARRAY['reason must be at most 8192 bytes (got '
                               || pg_catalog.octet_length(nack.reason) || ')'] ELSE '{}' END);
    END IF;
    p := lease_queue._lock_partition('lease_queue.nack', nack.queue, nack.partition, 'consume');
    q := lease_queue._queue('lease_queue.nack', nack.queue);
    PERFORM lease.fence(lease_queue.lease_key(nack.queue, nack.partition), nack.owner, nack.epoch);

    IF p.batch_id IS DISTINCT FROM nack.batch_id OR p.batch_epoch IS DISTINCT FROM nack.epoch THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LQ002',
            MESSAGE = 'lease_queue.nack: batch ' || nack.batch_id || ' is not the open batch of partition '
                      || nack.partition || ' of ' || pg_catalog.quote_literal(nack.queue) || ' at epoch ' || nack.epoch,
            DETAIL  = CASE WHEN p.batch_id IS NULL THEN 'The partition has no open batch.'
                           ELSE 'The open batch is ' || p.batch_id || ', issued at epoch ' || p.batch_epoch || '.' END,
            HINT    = 'Call lease_queue.receive to get the open batch at your epoch.';
    END IF;

    -- By the primary key alone (a condition on qid could lead a plan along an index of the queue's
    -- messages); a message of another queue is not this batch's.
    SELECT * INTO m FROM lease_queue.messages AS b WHERE b.id = nack.id;
    IF m.qid IS DISTINCT FROM p.qid THEN
        m := NULL;
    END IF;
    IF m.id IS NOT NULL AND m.id <> ALL (p.batch_ids) AND m.last_batch_id = nack.batch_id AND m.epoch = nack.epoch THEN
        RETURN 'retrying';                               -- sent back by this batch already
    ELSIF m.id IS NULL AND EXISTS (SELECT FROM lease_queue.dead_letters AS d
                                    WHERE d.id = nack.id AND d.qid = p.qid AND d.batch_id = nack.batch_id
                                      AND d.epoch = nack.epoch) THEN
        RETURN 'dead_lettered';
    ELSIF m.id IS NULL OR m.id <> ALL (p.batch_ids) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LQ003',
            MESSAGE = 'lease_queue.nack: message ' || nack.id || ' is not in batch ' || nack.batch_id,
            HINT    = 'Nack only messages that receive returned in the open batch.';
    END IF;

    -- No key row is touched here: the batch's keys are brought up to date when it closes (ack) or
    -- is abandoned, in key order. (Locking the key now would take key rows out of order in a
    -- transaction that nacks one key and then acks, and deadlock with a committing producer.)
    IF m.key IS NOT NULL THEN
        -- The later messages of the key in this batch go back undelivered (their delivery is not
        -- counted); they record this batch, so that a repeated nack of one of them is recognised.
        -- The batch's messages are read one id at a time through the primary key (a lateral
        -- subquery), then updated by id: whatever the statistics were when the session planned
        -- this, it reads the batch, not the key's backlog nor the table.
        SELECT pg_catalog.array_agg(u.id) INTO v_back
          FROM pg_catalog.unnest(p.batch_ids) AS u(id)
         CROSS JOIN LATERAL (SELECT x.key, x.seq FROM lease_queue.messages AS x
                              WHERE x.id = u.id OFFSET 0) AS b
         WHERE b.key = m.key AND b.seq > m.seq;
        IF v_back IS NOT NULL THEN
            UPDATE lease_queue.messages AS b
               SET epoch = nack.epoch, last_batch_id = nack.batch_id
             WHERE b.id = ANY (v_back);
        END IF;
    END IF;
    -- The message's delivery ends: counted and recorded as its last.
    v_dead := m.attempts + 1 >= q.max_attempts;
    IF v_dead THEN
        UPDATE lease_queue.messages AS b
           SET attempts = b.attempts + 1, epoch = nack.epoch, last_batch_id = nack.batch_id
         WHERE b.id = m.id;
        PERFORM lease_queue._bury(ARRAY[m.id], nack.reason);
    ELSE
        UPDATE lease_queue.messages AS b
           SET attempts = b.attempts + 1, epoch = nack.epoch, last_batch_id = nack.batch_id,
               retry = true, reason = nack.reason,
               deliver_at = pg_catalog.clock_timestamp()
                            + pg_catalog.date_part('epoch', nack.retry_after) * interval '1 second'
         WHERE b.id = m.id;
    END IF;
    -- They leave the batch (its row); the rest stays open for the ack.
    UPDATE lease_queue.partitions AS t
       SET batch_ids = COALESCE((SELECT pg_catalog.array_agg(u.id ORDER BY u.n)
                                   FROM pg_catalog.unnest(p.batch_ids) WITH ORDINALITY AS u(id, n)
                                  WHERE u.id <> m.id AND u.id <> ALL (COALESCE(v_back, '{}'))), '{}')
     WHERE t.qid = p.qid AND t.partition = p.partition;
    RETURN CASE WHEN v_dead THEN 'dead_lettered' ELSE 'retrying' END;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.release(queue, partition, owner, epoch, force DEFAULT false) -> integer
--
-- Fenced like ack. Releases the partition's lease so that another consumer can claim it at once.
-- With an open batch and force = false: 55006 (object_in_use), and nothing changes (the lease, the
-- batch, every column). With force = true the open batch is abandoned (its messages are delivered
-- again to the next holder, counting a delivery) and the lease released, in one statement. Returns
-- the number of messages abandoned. LQ001 no such queue; 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.release(
    queue text, partition integer, owner text, epoch bigint, force boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    p lease_queue.partitions;
    v_key text;
    v_status text;
    v_abandoned integer := 0;
BEGIN
    IF (lease_queue._valid_name(release.queue)
        AND release.partition BETWEEN 0 AND 1023
        AND pg_catalog.octet_length(release.owner) BETWEEN 1 AND 1024
        AND release.epoch IS NOT NULL AND release.force IS NOT NULL) IS NOT TRUE
    THEN
        PERFORM lease_queue._check_partition_args('lease_queue.release', release.queue, release.partition,
            release.owner, release.epoch,
            CASE WHEN release.force IS NULL THEN ARRAY['force must not be NULL'] ELSE '{}' END);
    END IF;
    p := lease_queue._lock_partition('lease_queue.release', release.queue, release.partition, 'consume');
    v_key := lease_queue.lease_key(release.queue, release.partition);
    PERFORM lease.fence(v_key, release.owner, release.epoch);

    IF p.batch_id IS NOT NULL THEN
        IF NOT release.force THEN
            RAISE EXCEPTION USING
                ERRCODE = '55006',
                MESSAGE = 'lease_queue.release: partition ' || release.partition || ' of '
                          || pg_catalog.quote_literal(release.queue) || ' has an open batch',
                DETAIL  = 'Batch ' || p.batch_id || ' was issued at epoch ' || p.batch_epoch || '.',
                HINT    = 'Ack the batch first, or release with force => true to abandon it.';
        END IF;
        -- Their delivery ends unacked: counted and recorded as their last.
        UPDATE lease_queue.messages AS b
           SET attempts = b.attempts + 1, epoch = p.batch_epoch, last_batch_id = p.batch_id
         WHERE b.id = ANY (p.batch_ids);
        GET DIAGNOSTICS v_abandoned = ROW_COUNT;
        PERFORM lease_queue._refresh_keys(p.qid, p.partition, p.batch_keys);
    END IF;

    SELECT lease.release(v_key, release.owner, release.epoch) INTO v_status;
    IF v_status <> 'ok' THEN
        PERFORM lease_queue._raise_fenced('lease_queue.release', v_key, v_status);
    END IF;
    UPDATE lease_queue.partitions AS t
       SET claim_epoch = NULL, ttl = NULL,
           batch_id = NULL, batch_epoch = NULL, batch_owner = NULL, batch_opened_at = NULL,
           batch_keys = NULL, batch_ids = NULL
     WHERE t.qid = p.qid AND t.partition = p.partition;
    RETURN v_abandoned;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.redrive(queue, key) -> bigint
--
-- Puts the dead letters of `key` (NULL: the queue's unkeyed dead letters) back into the queue, at
-- the head of their key, in their original order, ahead of what is pending for the key, with
-- attempts reset to 0 and due at once. Returns how many. 55006 while the key is part of its
-- partition's open batch (a message of it was delivered in the batch; redrive after the ack); LQ001 no such queue; 22023 on invalid input.
-- The installing role's (grantable).
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.redrive(queue text, key text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    q record;
    v_partition integer;
    v_head bigint;
    v_part lease_queue.partitions;
    v_now timestamptz;
    v_count bigint;
    v_key text COLLATE "C" := redrive.key;
BEGIN
    IF (lease_queue._valid_name(redrive.queue)
        AND (redrive.key IS NULL OR pg_catalog.octet_length(redrive.key) BETWEEN 1 AND 1024)) IS NOT TRUE
    THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.redrive',
            lease_queue._name_violations('queue', redrive.queue)
            || lease_queue._text_violations('key', redrive.key, true, 1024));
    END IF;
    q := lease_queue._queue('lease_queue.redrive', redrive.queue);
    v_now := pg_catalog.clock_timestamp();

    IF redrive.key IS NULL THEN
        WITH back AS (
            DELETE FROM lease_queue.dead_letters AS d
             WHERE d.qid = q.qid AND d.key IS NULL
            RETURNING d.*
        )
        INSERT INTO lease_queue.messages (id, qid, partition, key, seq, payload, enqueued_at, deliver_at)
        SELECT back.id, back.qid, back.partition, NULL, NULL, back.payload, back.enqueued_at, v_now
          FROM back;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF q.notify THEN
            PERFORM pg_catalog.pg_notify('lease_queue', redrive.queue || ':' || p)
               FROM pg_catalog.generate_series(0, q.partitions - 1) AS p;
        END IF;
        RETURN v_count;
    END IF;

    v_partition := lease_queue.partition_of(redrive.key, q.partitions);
    v_part := lease_queue._lock_partition('lease_queue.redrive', redrive.queue, v_partition, NULL);
    IF v_key = ANY (v_part.batch_keys) THEN
        RAISE EXCEPTION USING
            ERRCODE = '55006',
            MESSAGE = 'lease_queue.redrive: key ' || pg_catalog.quote_literal(redrive.key)
                      || ' has messages in an open batch',
            HINT    = 'Redrive after the batch is acked.';
    END IF;
    INSERT INTO lease_queue.keys AS k (qid, key, partition, ready_at)
    VALUES (q.qid, v_key, v_partition, v_now)
    ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING;
    PERFORM FROM lease_queue.keys AS k WHERE k.qid = q.qid AND k.key = v_key FOR NO KEY UPDATE;
    SELECT pg_catalog.min(m.seq) INTO v_head
      FROM lease_queue.messages AS m
     WHERE m.qid = q.qid AND m.partition = v_partition AND m.key = v_key;
    v_head := COALESCE(v_head, pg_catalog.nextval('lease_queue.message_ids'));

    WITH back AS (
        DELETE FROM lease_queue.dead_letters AS d
         WHERE d.qid = q.qid AND d.key = v_key
        RETURNING d.*
    ), ordered AS (
        SELECT back.*, pg_catalog.row_number() OVER (ORDER BY back.seq DESC) AS n FROM back
    )
    INSERT INTO lease_queue.messages (id, qid, partition, key, seq, payload, enqueued_at, deliver_at)
    SELECT o.id, o.qid, v_partition, o.key, v_head - o.n, o.payload, o.enqueued_at, v_now
      FROM ordered AS o;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    -- Its positions lie below the key's head (or below every position yet to be taken): last_seq
    -- still bounds the key's positions from above.
    UPDATE lease_queue.keys AS k SET last_seq = GREATEST(k.last_seq, v_head - 1)
     WHERE k.qid = q.qid AND k.key = v_key AND k.last_seq < v_head - 1;
    PERFORM lease_queue._refresh_keys(q.qid, v_partition, ARRAY[v_key]);
    IF q.notify AND v_count > 0 THEN
        PERFORM pg_catalog.pg_notify('lease_queue', redrive.queue || ':' || v_partition);
    END IF;
    RETURN v_count;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.next_due(queue, partition) -> timestamptz
--
-- When the partition's next message outside the open batch becomes deliverable (in the past if one
-- is due now; a nacked message's retry time; a delayed message's due time), or NULL if none is
-- pending. The keys of the open batch (also those its nacks sent back) count again once it is acked
-- or abandoned. For a consumer that found nothing to receive: sleep until then or until a notification.
-- Advisory (no locks, not fenced), through the indexes of receive. LQ001 no such queue; 22023.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.next_due(queue text, partition integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    q record;
BEGIN
    IF (lease_queue._valid_name(next_due.queue) AND next_due.partition BETWEEN 0 AND 1023) IS NOT TRUE THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.next_due',
            lease_queue._name_violations('queue', next_due.queue)
            || lease_queue._int_violations('partition', next_due.partition, 0, 1023));
    END IF;
    q := lease_queue._queue_for('lease_queue.next_due', next_due.queue, 'consume');
    IF next_due.partition >= q.partitions THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.next_due', ARRAY['partition must be in [0, '
            || q.partitions || ') for queue ' || pg_catalog.quote_literal(next_due.queue)
            || ' (got ' || next_due.partition || ')']);
    END IF;
    RETURN LEAST(
        (SELECT k.ready_at FROM lease_queue.keys AS k
          WHERE k.qid = q.qid AND k.partition = next_due.partition AND k.ready_at IS NOT NULL
            AND k.key <> ALL (COALESCE((SELECT t.batch_keys FROM lease_queue.partitions AS t
                                         WHERE t.qid = q.qid AND t.partition = next_due.partition), '{}'))
          ORDER BY k.ready_at LIMIT 1),
        (SELECT m.deliver_at FROM lease_queue.messages AS m
          WHERE m.qid = q.qid AND m.partition = next_due.partition AND m.key IS NULL
            AND m.id <> ALL (COALESCE((SELECT t.batch_ids FROM lease_queue.partitions AS t
                                        WHERE t.qid = q.qid AND t.partition = next_due.partition), '{}'))
          ORDER BY m.deliver_at, m.id LIMIT 1));
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.version() -> text: the version of the pg_lease_queue SQL API installed here.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease_queue.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.3.1'::text $$;

REVOKE ALL ON FUNCTION lease_queue._refresh_keys(bigint, integer, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._close_batch(text, text, lease_queue.partitions, bigint, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._open_batch(lease_queue.partitions, integer, text, bigint, integer, boolean) FROM PUBLIC;
