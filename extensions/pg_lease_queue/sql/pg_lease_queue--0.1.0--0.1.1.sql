-- pg_lease_queue 0.1.0 -> 0.1.1: for pg_lease 0.8.0, whose grants belong to the role that took them.
--
-- Changed: lease_queue.drop_queue ends the partitions' leases with lease.force_release, whoever holds
--          them (lease.release would now refuse a consumer's lease under another role, 42501).
-- Needs pg_lease 0.8.0 or later (55000 otherwise: update pg_lease first). All state is kept.

\echo Use "ALTER EXTENSION pg_lease_queue UPDATE TO '0.1.1'" to load this file. \quit

-- ---------------------------------------------------------------------------------------------------
-- The pg_lease this version needs: 0.8.0 or later (lease.force_release, with which drop_queue ends
-- the partitions' leases whoever holds them).
-- ---------------------------------------------------------------------------------------------------
DO $$
BEGIN
    IF pg_catalog.to_regprocedure('lease.force_release(text)') IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease_queue needs pg_lease 0.8.0 or later',
            HINT    = 'Update pg_lease first (ALTER EXTENSION pg_lease UPDATE, or pglease install).';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.drop_queue(queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid bigint;
    r record;
BEGIN
    IF lease_queue._valid_name(drop_queue.queue) IS NOT TRUE THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.drop_queue',
            lease_queue._name_violations('queue', drop_queue.queue));
    END IF;
    -- FOR UPDATE conflicts with the FOR KEY SHARE lock every send holds until its transaction ends.
    SELECT q.qid INTO v_qid FROM lease_queue.queues AS q WHERE q.name = drop_queue.queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM lease_queue._queue('lease_queue.drop_queue', drop_queue.queue);
    END IF;
    PERFORM FROM lease_queue.partitions AS p WHERE p.qid = v_qid ORDER BY p.partition FOR UPDATE;

    FOR r IN
        SELECT l.key
          FROM lease.list('lease_queue:' || drop_queue.queue || ':') AS l
         WHERE l.held
    LOOP
        PERFORM lease.force_release(r.key);
    END LOOP;

    DELETE FROM lease_queue.messages AS m WHERE m.qid = v_qid AND m.key IS NOT NULL;
    DELETE FROM lease_queue.messages AS m WHERE m.qid = v_qid AND m.key IS NULL AND m.batch_id IS NULL;
    DELETE FROM lease_queue.messages AS m
     USING lease_queue.partitions AS p
     WHERE p.qid = v_qid AND p.batch_id IS NOT NULL AND m.batch_id = p.batch_id;
    DELETE FROM lease_queue.keys AS k WHERE k.qid = v_qid;
    DELETE FROM lease_queue.dead_letters AS d WHERE d.qid = v_qid;
    DELETE FROM lease_queue.partitions AS p WHERE p.qid = v_qid;
    DELETE FROM lease_queue.queues AS q WHERE q.qid = v_qid;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.1.1'::text $$;
