-- pg_lease_queue 0.1.1 -> 0.2.0: a status an operator's console can call every second on a large
-- backlog, and a counter of acked messages (docs/QUEUE.md §2).
--
-- Added: lease_queue.partitions.acked, the messages acked in the partition (counted from this
--        update on): ack adds the messages it deleted, in the update of the partition's row it makes
--        anyway; lease_queue.status() returns it as a last column, `acked`, to every role that may
--        call it (like the other counts). Index messages_held_back: the keyed messages waiting for
--        their retry after a nack (written by nack, never by send or delivery).
-- Changed: status() counts through indexes only (one index-only pass over the queue's keyed and
--          unkeyed messages, per partition an index-only search that stops at its first keyed
--          message in commit order, probes for the rest), never reading every message row; it runs
--          with enable_seqscan, enable_bitmapscan and jit off. oldest_enqueued_at is now the
--          enqueued_at of the partition's first pending message in the queue's order (keyed: the
--          lowest position, i.e. commit order; unkeyed: the lowest id), no longer the earliest
--          enqueued_at of all (which needs every row): they differ when a producer that sent
--          earlier committed later than another, and after a redrive (docs/QUEUE.md §2). ack also
--          counts what it deleted (acked). Every other column keeps its name and meaning. status() is dropped and created again (a new result
--          column): calls that name their columns keep working and its EXECUTE privileges are
--          kept, but views or SQL functions of yours that depend on it must be recreated.
-- Upgrade: adds the column (no table rewrite) and builds the index (a scan of lease_queue.messages,
-- under a lock that makes sends, deliveries and acks wait until it is built). All state is kept:
-- messages (in open batches, retrying, delayed), dead letters, epochs.

\echo Use "ALTER EXTENSION pg_lease_queue UPDATE TO '0.2.0'" to load this file. \quit

-- status is dropped and created anew (a new result column) and keeps the privileges it had: its
-- ACL, as text ('' for the defaults), for the end of this script (a transaction-local setting).
SELECT pg_catalog.set_config('pg_lease_queue.upgrade_acl_status',
                             COALESCE(p.proacl::pg_catalog.text, ''), true)
  FROM pg_catalog.pg_proc AS p
 WHERE p.oid OPERATOR(pg_catalog.=) 'lease_queue.status(text)'::pg_catalog.regprocedure;

ALTER TABLE lease_queue.partitions ADD COLUMN acked bigint NOT NULL DEFAULT 0;

-- Keyed messages waiting for their retry after a nack, each holding its key back (status counts
-- their keys). Entries are written by nack (and by an abandoned batch's retried messages): a send,
-- the commit's stamp and a delivery leave their rows outside it. Of its columns only retry was not
-- indexed before, and only nack changes it, in an update that changes batch_id too: no update that
-- was HOT stops being so.
CREATE INDEX messages_held_back ON lease_queue.messages (qid, partition, key)
    WHERE retry AND batch_id IS NULL AND key IS NOT NULL;

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
    v_acked bigint;
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

    IF p.batch_id IS DISTINCT FROM ack.batch_id OR p.batch_epoch IS DISTINCT FROM ack.epoch THEN
        IF p.last_batch_id = ack.batch_id AND p.last_batch_epoch = ack.epoch THEN
            RETURN;
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'LQ002',
            MESSAGE = 'lease_queue.ack: batch ' || ack.batch_id || ' is not the open batch of partition '
                      || ack.partition || ' of ' || pg_catalog.quote_literal(ack.queue) || ' at epoch ' || ack.epoch,
            DETAIL  = CASE WHEN p.batch_id IS NULL THEN 'The partition has no open batch.'
                           ELSE 'The open batch is ' || p.batch_id || ', issued at epoch ' || p.batch_epoch || '.' END,
            HINT    = 'Call lease_queue.receive to get the open batch at your epoch.';
    END IF;

    DELETE FROM lease_queue.messages AS b WHERE b.batch_id = p.batch_id;
    GET DIAGNOSTICS v_acked = ROW_COUNT;
    UPDATE lease_queue.partitions AS t
       SET batch_id = NULL, batch_epoch = NULL, batch_owner = NULL, batch_opened_at = NULL,
           batch_keys = NULL, last_batch_id = p.batch_id, last_batch_epoch = ack.epoch,
           acked = t.acked + v_acked
     WHERE t.qid = p.qid AND t.partition = p.partition;
    -- Every key the batch held, also those its nacks sent back: one pass, in key order.
    PERFORM lease_queue._refresh_keys(p.qid, p.partition, p.batch_keys);
END
$$;

DROP FUNCTION lease_queue.status(text);

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.status(queue DEFAULT NULL) -> SETOF (...)
--
-- Per partition of the queue (of every queue if NULL), as of now by the server clock; advisory (no
-- locks):
--   owner, epoch, expires_at  the holder (NULL unless the lease is held), the lease's epoch (the
--                             current grant's, or the key's fencing counter when not held; NULL if
--                             never claimed) and its expiry
--   batch_id, batch_epoch, batch_size, batch_opened_at   the open batch: its id, the epoch it was
--                             issued at, its messages, when it was opened
--   backlog                   the pending messages not in the open batch
--   oldest_enqueued_at        when the partition's first pending message was enqueued, first in the
--                             queue's order: of its keyed messages the one first in commit order
--                             (the lowest position), of its unkeyed ones the one sent first (the
--                             lowest id); the earlier of the two. The open batch's messages count;
--                             NULL if nothing is pending. (Since 0.2.0; the earliest enqueued_at of
--                             all would take a read of every message row: docs/QUEUE.md §2.)
--   held_back_keys            the keys held back by a failed message awaiting its retry
--   dead_letters              the partition's dead letters
--   acked                     the messages acked in the partition (lease_queue.partitions.acked)
-- The holder, epoch, expiry and the batch's id and epoch only for a role that may consume the queue
-- (NULL for others); the counts, times and sizes for every role that may call it.
-- Cost: one index-only pass over the selected queues' entries in messages_by_key (keyed messages)
-- and messages_unkeyed_due (unkeyed ones outside open batches); per partition an index-only search
-- of messages_by_key for the key of the first keyed message, in key order, which stops at the
-- first match (at most one more pass over the partition's entries); index probes for the rest (the
-- open batch, the first messages' rows, the held-back keys); one pass over the queues' dead letters.
-- Never a read of every message row: its statements are planned without sequential or bitmap heap
-- scans. (Entries on pages that vacuum has not yet marked all-visible are checked in the heap, as in
-- any index-only scan.) Of equal lowest positions (possible after a redrive) the first key counts.
-- Without JIT compilation: at a million messages the plan's cost crosses jit_above_cost, and
-- compiling it took longer (~35 ms) than it saved.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.status(queue text DEFAULT NULL)
RETURNS TABLE (queue_name text, partition integer, owner text, epoch bigint, expires_at timestamptz,
               batch_id bigint, batch_epoch bigint, batch_size bigint, batch_opened_at timestamptz,
               backlog bigint, oldest_enqueued_at timestamptz, held_back_keys bigint,
               dead_letters bigint, acked bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_qids bigint[];
BEGIN
    IF status.queue IS NOT NULL AND lease_queue._valid_name(status.queue) IS NOT TRUE THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.status',
            lease_queue._name_violations('queue', status.queue));
    END IF;
    IF status.queue IS NOT NULL THEN
        PERFORM lease_queue._queue('lease_queue.status', status.queue);
    END IF;
    SELECT pg_catalog.array_agg(q.qid) INTO v_qids
      FROM lease_queue.queues AS q
     WHERE status.queue IS NULL OR q.name = status.queue;
    RETURN QUERY
        WITH sel AS MATERIALIZED (
            -- The queues, and whether the session may see their holders and batches.
            SELECT q.qid, q.name, lease_queue._may(q.qid, 'consume') AS may
              FROM lease_queue.queues AS q
             WHERE q.qid = ANY (v_qids)
        ), keyed AS MATERIALIZED (
            -- Per partition: its committed keyed messages, and the lowest position among them.
            SELECT m.qid, m.partition, pg_catalog.count(*) AS n, pg_catalog.min(m.seq) AS first_seq
              FROM lease_queue.messages AS m
             WHERE m.qid = ANY (v_qids) AND m.key IS NOT NULL AND m.seq IS NOT NULL
             GROUP BY m.qid, m.partition
        ), unkeyed AS MATERIALIZED (
            -- Per partition: its unkeyed messages outside the open batch, and the first sent.
            SELECT m.qid, m.partition, pg_catalog.count(*) AS n, pg_catalog.min(m.id) AS first_id
              FROM lease_queue.messages AS m
             WHERE m.qid = ANY (v_qids) AND m.key IS NULL AND m.batch_id IS NULL
             GROUP BY m.qid, m.partition
        ), held AS MATERIALIZED (
            SELECT m.qid, m.partition, pg_catalog.count(DISTINCT m.key) AS n
              FROM lease_queue.messages AS m
             WHERE m.qid = ANY (v_qids) AND m.retry AND m.batch_id IS NULL AND m.key IS NOT NULL
             GROUP BY m.qid, m.partition
        ), dead AS MATERIALIZED (
            SELECT d.qid, d.partition, pg_catalog.count(*) AS n
              FROM lease_queue.dead_letters AS d
             WHERE d.qid = ANY (v_qids)
             GROUP BY d.qid, d.partition
        )
        SELECT s.name::text, p.partition,
               -- Who holds the partition and its open batch: for roles that may consume the queue.
               CASE WHEN s.may THEN l.owner END, CASE WHEN s.may THEN l.epoch END,
               CASE WHEN s.may THEN l.expires_at END,
               CASE WHEN s.may THEN p.batch_id END, CASE WHEN s.may THEN p.batch_epoch END,
               b.size, p.batch_opened_at,
               -- Pending: the committed keyed messages and the unkeyed ones; the open batch's
               -- unkeyed messages are not among the latter, its keyed ones are among the former.
               COALESCE(k.n, 0) + COALESCE(u.n, 0) - b.keyed,
               -- The first keyed message: its key is found in the index, in key order, stopping
               -- at the first entry at the lowest position; then its row.
               LEAST((SELECT pg_catalog.min(x.enqueued_at) FROM lease_queue.messages AS x
                       WHERE x.qid = p.qid AND x.partition = p.partition AND x.seq = k.first_seq
                         AND x.key = (SELECT y.key FROM lease_queue.messages AS y
                                       WHERE y.qid = p.qid AND y.partition = p.partition
                                         AND y.key IS NOT NULL AND y.seq = k.first_seq
                                       ORDER BY y.key
                                       LIMIT 1)),
                     (SELECT x.enqueued_at FROM lease_queue.messages AS x
                       WHERE x.id = LEAST(u.first_id, b.first_unkeyed))),
               COALESCE(h.n, 0), COALESCE(d.n, 0), p.acked
          FROM sel AS s
          JOIN lease_queue.partitions AS p ON p.qid = s.qid
          LEFT JOIN LATERAL lease.inspect(lease_queue.lease_key(s.name, p.partition)) AS l ON true
          CROSS JOIN LATERAL (
                SELECT pg_catalog.count(*) AS size, pg_catalog.count(x.key) AS keyed,
                       pg_catalog.min(x.id) FILTER (WHERE x.key IS NULL) AS first_unkeyed
                  FROM lease_queue.messages AS x
                 WHERE x.batch_id = p.batch_id) AS b
          LEFT JOIN keyed AS k ON k.qid = p.qid AND k.partition = p.partition
          LEFT JOIN unkeyed AS u ON u.qid = p.qid AND u.partition = p.partition
          LEFT JOIN held AS h ON h.qid = p.qid AND h.partition = p.partition
          LEFT JOIN dead AS d ON d.qid = p.qid AND d.partition = p.partition
         ORDER BY s.name, p.partition;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- Restore the privileges of status as they were before this script (see the top): who may execute
-- it, and with grant option.
-- ---------------------------------------------------------------------------------------------------
DO $$
DECLARE
    v_acl text := pg_catalog.current_setting('pg_lease_queue.upgrade_acl_status');
    v_grant record;
BEGIN
    IF v_acl OPERATOR(pg_catalog.<>) '' THEN             -- '': the defaults, which the new one has
        REVOKE ALL ON FUNCTION lease_queue.status(text) FROM PUBLIC;
        FOR v_grant IN
            SELECT a.grantee, a.is_grantable
              FROM pg_catalog.aclexplode(v_acl::pg_catalog.aclitem[]) AS a
             WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION lease_queue.status(text) TO %s%s',
                CASE WHEN v_grant.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(v_grant.grantee)) END,
                CASE WHEN v_grant.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.2.0'::text $$;
