-- pg_lease_queue 0.1.0 -> 0.1.1: for pg_lease 0.8.0, whose grants belong to the role that took them;
-- and the audit's argument checks.
--
-- Changed: lease_queue.drop_queue ends the partitions' leases with lease.force_release, whoever holds
--          them (lease.release would now refuse a consumer's lease under another role, 42501).
--          lease_queue.lease_key and lease_queue.partition_of check their arguments (22023 for a
--          NULL or out-of-range partition or number of partitions, an invalid queue name or key).
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


CREATE OR REPLACE FUNCTION lease_queue.lease_key(queue text, partition integer)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (pg_catalog.octet_length(lease_key.queue) <= 128 AND lease_key.partition BETWEEN 0 AND 1023
        AND lease_key.queue COLLATE "C" ~ '^[A-Za-z0-9_.-]+$') IS NOT TRUE
    THEN
        -- (The violations are named here, not by the internal helpers: no role may call those,
        -- and this function runs as its caller.)
        RAISE EXCEPTION USING
            ERRCODE = '22023',
            MESSAGE = 'invalid input to lease_queue.lease_key',
            DETAIL  = pg_catalog.array_to_string(pg_catalog.array_remove(ARRAY[
                CASE WHEN lease_key.queue IS NULL THEN 'queue must not be NULL'
                     WHEN lease_key.queue = '' THEN 'queue must not be empty'
                     WHEN pg_catalog.octet_length(lease_key.queue) > 128
                     THEN 'queue must be at most 128 bytes (got ' || pg_catalog.octet_length(lease_key.queue) || ')'
                     WHEN NOT (lease_key.queue COLLATE "C" ~ '^[A-Za-z0-9_.-]+$')
                     THEN 'queue must consist of the characters A-Z a-z 0-9 _ . -' END,
                CASE WHEN lease_key.partition IS NULL THEN 'partition must not be NULL'
                     WHEN lease_key.partition NOT BETWEEN 0 AND 1023
                     THEN 'partition must be in [0, 1023] (got ' || lease_key.partition || ')' END], NULL),
                '; ') || '.',
            HINT    = 'See docs/QUEUE.md, "Arguments", for the limits of every argument.';
    END IF;
    RETURN 'lease_queue:' || lease_key.queue || ':' || lease_key.partition;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.partition_of(key text, partitions integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (partition_of.partitions BETWEEN 1 AND 1024
        AND pg_catalog.octet_length(COALESCE(partition_of.key, 'k')) BETWEEN 1 AND 1024) IS NOT TRUE
    THEN
        RAISE EXCEPTION USING                -- (named here, as in lease_key)
            ERRCODE = '22023',
            MESSAGE = 'invalid input to lease_queue.partition_of',
            DETAIL  = pg_catalog.array_to_string(pg_catalog.array_remove(ARRAY[
                CASE WHEN partition_of.key = '' THEN 'key must not be empty'
                     WHEN pg_catalog.octet_length(partition_of.key) > 1024
                     THEN 'key must be at most 1024 bytes (got ' || pg_catalog.octet_length(partition_of.key) || ')' END,
                CASE WHEN partition_of.partitions IS NULL THEN 'partitions must not be NULL'
                     WHEN partition_of.partitions NOT BETWEEN 1 AND 1024
                     THEN 'partitions must be in [1, 1024] (got ' || partition_of.partitions || ')' END], NULL),
                '; ') || '.',
            HINT    = 'See docs/QUEUE.md, "Arguments", for the limits of every argument.';
    END IF;
    RETURN ((CASE WHEN h < 0 THEN h::numeric + 18446744073709551616 ELSE h::numeric END)
            % partition_of.partitions)::integer
      FROM (SELECT ('x' || pg_catalog.substr(pg_catalog.md5(partition_of.key), 1, 16))::bit(64)::bigint AS h) AS d;
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
