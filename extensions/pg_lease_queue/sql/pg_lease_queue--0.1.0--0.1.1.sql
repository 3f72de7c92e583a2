-- pg_lease_queue 0.1.0 -> 0.1.1: a queue belongs to the roles granted it; for pg_lease 0.8.0, whose
-- grants belong to the role that took them; and the audit's argument checks (docs/QUEUE.md §9).
--
-- Added: lease_queue.grants; lease_queue.grant_queue and revoke_queue (queue, role, privilege), the
--        installing role's (grantable); lease_queue.privileges(queue), what the session may do. produce: send, send_batch; consume: claim, claim_any,
--        receive, ack, nack, release, next_due, list_dead_letters, and the holders and batches in
--        status(). Refused calls raise 42501 and change nothing.
-- Changed: create_queue grants both privileges to its creator only; drop_queue ends the
--          partitions' leases with lease.force_release, whoever holds them; lease_key and
--          partition_of check their arguments (22023).
-- Upgrade: every existing queue is granted produce and consume to PUBLIC, so nothing that worked
-- stops working; narrow it with revoke_queue. Needs pg_lease 0.8.0 or later (55000 otherwise:
-- update pg_lease first). All state is kept.

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


-- Who may use a queue (docs/QUEUE.md §9): one row per queue, privilege and grantee, the grantee a
-- role name or 'public' (every role). produce: send, send_batch; consume: claim, claim_any, receive,
-- ack, nack, release, next_due, list_dead_letters, and the holders and batches in status(). A queue's
-- grants go with it (drop_queue).
CREATE TABLE lease_queue.grants (
    qid       bigint NOT NULL,
    privilege text COLLATE "C" NOT NULL,
    grantee   text COLLATE "C" NOT NULL,
    CONSTRAINT grants_pkey PRIMARY KEY (qid, privilege, grantee),
    CONSTRAINT grants_privilege_check CHECK (privilege IN ('produce', 'consume')),
    CONSTRAINT grants_qid_fkey FOREIGN KEY (qid) REFERENCES lease_queue.queues (qid) ON DELETE CASCADE
);
COMMENT ON TABLE lease_queue.grants IS
    'pg_lease_queue: who may produce to and consume each queue; change with lease_queue.grant_queue and revoke_queue';
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.grants', '');
REVOKE ALL ON TABLE lease_queue.grants FROM PUBLIC;
GRANT SELECT, INSERT ON TABLE lease_queue.grants TO @extowner@;

-- Every existing queue stays usable by every role, as before the upgrade.
INSERT INTO lease_queue.grants (qid, privilege, grantee)
SELECT q.qid, v.privilege, 'public'
  FROM lease_queue.queues AS q CROSS JOIN (VALUES ('produce'), ('consume')) AS v(privilege);

DROP FUNCTION lease_queue._lock_partition(text, text, integer);

-- Whether the session may use queue `qid` for `privilege` (produce, consume): a grant to PUBLIC, to
-- the session's login role or to a role it is a member of; a superuser may everything, as everywhere
-- in PostgreSQL. The calls test the first two in the statement that reads the queue, and this only
-- when those found nothing.
CREATE FUNCTION lease_queue._may(qid bigint, privilege text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT FROM lease_queue.grants AS g
                    WHERE g.qid = _may.qid AND g.privilege = _may.privilege
                      AND (g.grantee = 'public' OR g.grantee = SESSION_USER
                           OR pg_catalog.pg_has_role(SESSION_USER,
                                  (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = g.grantee),
                                  'MEMBER')))
        OR COALESCE((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = SESSION_USER), false)
$$;

-- Raise 42501: the session's role may not use `queue` for `privilege`. Never returns.
CREATE FUNCTION lease_queue._raise_not_granted(fn text, queue text, privilege text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = '42501',
        MESSAGE = fn || ': role ' || pg_catalog.quote_ident(SESSION_USER) || ' may not ' || privilege
                  || ' queue ' || pg_catalog.quote_literal(queue),
        DETAIL  = 'Neither the role nor a role it is a member of (nor PUBLIC) was granted ' || privilege
                  || ' on the queue.',
        HINT    = 'The installing role grants it: lease_queue.grant_queue(queue, role, '
                  || pg_catalog.quote_literal(privilege) || ').';
END
$$;

-- The queue named `queue` (LQ001 if none), as lease_queue._queue, and 42501 unless the session may
-- use it for `privilege`.
CREATE FUNCTION lease_queue._queue_for(fn text, queue text, privilege text,
    OUT qid bigint, OUT partitions integer, OUT max_attempts integer, OUT notify boolean)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_may boolean;
BEGIN
    SELECT q.qid, q.partitions, q.max_attempts, q.notify,
           EXISTS (SELECT FROM lease_queue.grants AS g
                    WHERE g.qid = q.qid AND g.privilege = _queue_for.privilege
                      AND (g.grantee = 'public' OR g.grantee = SESSION_USER))
      INTO qid, partitions, max_attempts, notify, v_may
      FROM lease_queue.queues AS q
     WHERE q.name = _queue_for.queue;
    IF NOT FOUND THEN
        PERFORM lease_queue._queue(fn, queue);           -- LQ001
    END IF;
    IF NOT v_may THEN
        IF NOT lease_queue._may(qid, privilege) THEN
            PERFORM lease_queue._raise_not_granted(fn, queue, privilege);
        END IF;
    END IF;
END
$$;

-- The partition row of (qid, partition), locked FOR NO KEY UPDATE. Raises 22023 if the partition is
-- out of range for the queue, LQ001 if the row is gone (the queue was dropped meanwhile).; with a
-- `privilege`, 42501 unless the session may use the queue for it (lease_queue._queue_for).
CREATE FUNCTION lease_queue._lock_partition(fn text, queue text, partition integer, privilege text)
RETURNS lease_queue.partitions
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
    p lease_queue.partitions;
BEGIN
    IF privilege IS NULL THEN
        q := lease_queue._queue(fn, queue);
    ELSE
        q := lease_queue._queue_for(fn, queue, privilege);
    END IF;
    IF partition >= q.partitions THEN
        PERFORM lease_queue._raise_invalid_input(fn, ARRAY['partition must be in [0, ' || q.partitions
            || ') for queue ' || pg_catalog.quote_literal(queue) || ' (got ' || partition || ')']);
    END IF;
    SELECT * INTO p
      FROM lease_queue.partitions AS t
     WHERE t.qid = q.qid AND t.partition = _lock_partition.partition
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LQ001',
            MESSAGE = fn || ': queue ' || pg_catalog.quote_literal(queue) || ' does not exist',
            DETAIL  = 'It was dropped while this call waited for its partition.';
    END IF;
    RETURN p;
END
$$;

CREATE FUNCTION lease_queue._check_grant_args(fn text, queue text, role text, privilege text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_violations text[] := lease_queue._name_violations('queue', queue);
BEGIN
    IF role IS NULL THEN
        v_violations := v_violations || 'role must not be NULL'::text;
    ELSIF role <> 'public' AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = role) THEN
        v_violations := v_violations || ('role must be an existing role or public (got '
                                         || pg_catalog.quote_literal(role) || ')');
    END IF;
    IF privilege IS NULL OR privilege NOT IN ('produce', 'consume') THEN
        v_violations := v_violations || ('privilege must be produce or consume (got '
                                         || COALESCE(pg_catalog.quote_literal(privilege), 'NULL') || ')');
    END IF;
    IF pg_catalog.cardinality(v_violations) > 0 THEN
        PERFORM lease_queue._raise_invalid_input(fn, v_violations);
    END IF;
    RETURN (lease_queue._queue(fn, queue)).qid;
END
$$;

CREATE FUNCTION lease_queue.grant_queue(queue text, role text, privilege text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease_queue.grants (qid, privilege, grantee)
    VALUES (lease_queue._check_grant_args('lease_queue.grant_queue', grant_queue.queue, grant_queue.role,
                                          grant_queue.privilege),
            grant_queue.privilege, grant_queue.role)
    ON CONFLICT ON CONSTRAINT grants_pkey DO NOTHING;
END
$$;

CREATE FUNCTION lease_queue.revoke_queue(queue text, role text, privilege text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid bigint := lease_queue._check_grant_args('lease_queue.revoke_queue', revoke_queue.queue,
                                                  revoke_queue.role, revoke_queue.privilege);
BEGIN
    DELETE FROM lease_queue.grants AS g
     WHERE g.qid = v_qid AND g.privilege = revoke_queue.privilege AND g.grantee = revoke_queue.role;
END
$$;

REVOKE ALL ON FUNCTION lease_queue._lock_partition(text, text, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._queue_for(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._may(bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._raise_not_granted(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.grant_queue(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.revoke_queue(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._check_grant_args(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease_queue.grant_queue(text, text, text) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION lease_queue.revoke_queue(text, text, text) TO @extowner@ WITH GRANT OPTION;

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

CREATE OR REPLACE FUNCTION lease_queue.create_queue(
    queue text, partitions integer, max_attempts integer DEFAULT 10, notify boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid bigint;
BEGIN
    IF (lease_queue._valid_name(create_queue.queue)
        AND create_queue.partitions BETWEEN 1 AND 1024
        AND create_queue.max_attempts BETWEEN 1 AND 10000
        AND create_queue.notify IS NOT NULL) IS NOT TRUE
    THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.create_queue',
            lease_queue._name_violations('queue', create_queue.queue)
            || lease_queue._int_violations('partitions', create_queue.partitions, 1, 1024)
            || lease_queue._int_violations('max_attempts', create_queue.max_attempts, 1, 10000)
            || CASE WHEN create_queue.notify IS NULL THEN ARRAY['notify must not be NULL'] ELSE '{}' END);
    END IF;

    INSERT INTO lease_queue.queues (name, partitions, max_attempts, notify, created_at)
    VALUES (create_queue.queue, create_queue.partitions, create_queue.max_attempts,
            create_queue.notify, pg_catalog.clock_timestamp())
    ON CONFLICT (name) DO NOTHING
    RETURNING qid INTO v_qid;
    IF v_qid IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = '42710',
            MESSAGE = 'lease_queue.create_queue: queue ' || pg_catalog.quote_literal(create_queue.queue)
                      || ' already exists';
    END IF;
    INSERT INTO lease_queue.partitions (qid, partition)
    SELECT v_qid, p FROM pg_catalog.generate_series(0, create_queue.partitions - 1) AS p;
    -- A new queue is its creator's: nobody else may use it until granted (lease_queue.grant_queue).
    INSERT INTO lease_queue.grants (qid, privilege, grantee)
    VALUES (v_qid, 'produce', SESSION_USER), (v_qid, 'consume', SESSION_USER);
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

CREATE OR REPLACE FUNCTION lease_queue.send(queue text, key text, payload jsonb, delay interval DEFAULT interval '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid bigint;
    v_partitions integer;
    v_notify boolean;
    v_id bigint;
    v_partition integer;
    v_now timestamptz;
    v_may boolean;               -- PUBLIC or the session's role may produce
BEGIN
    IF (lease_queue._valid_name(send.queue)
        AND (send.key IS NULL OR pg_catalog.octet_length(send.key) BETWEEN 1 AND 1024)
        AND send.payload IS NOT NULL
        AND EXTRACT(epoch FROM send.delay) <@ '[0,31536000]'::pg_catalog.numrange) IS NOT TRUE
    THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.send',
            lease_queue._name_violations('queue', send.queue)
            || lease_queue._text_violations('key', send.key, true, 1024)
            || CASE WHEN send.payload IS NULL THEN ARRAY['payload must not be NULL'] ELSE '{}' END
            || lease_queue._interval_violations('delay', send.delay, false));
    END IF;
    IF pg_catalog.current_setting('session_replication_role') = 'replica' THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'lease_queue.send: triggers are disabled (session_replication_role = replica)',
            HINT    = 'The commit order of messages is recorded by a trigger; send with origin.';
    END IF;

    -- The queue, and whether PUBLIC or the session's role may produce to it (members and superusers:
    -- lease_queue._may, only when not).
    SELECT q.qid, q.partitions, q.notify,
           EXISTS (SELECT FROM lease_queue.grants AS g
                    WHERE g.qid = q.qid AND g.privilege = 'produce'
                      AND (g.grantee = 'public' OR g.grantee = SESSION_USER))
      INTO v_qid, v_partitions, v_notify, v_may
      FROM lease_queue.queues AS q
     WHERE q.name = send.queue
       FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lease_queue._queue('lease_queue.send', send.queue);
    END IF;
    IF NOT v_may THEN
        IF NOT lease_queue._may(v_qid, 'produce') THEN
            PERFORM lease_queue._raise_not_granted('lease_queue.send', send.queue, 'produce');
        END IF;
    END IF;

    v_id := pg_catalog.nextval('lease_queue.message_ids');
    v_now := pg_catalog.clock_timestamp();
    v_partition := COALESCE(lease_queue.partition_of(send.key, v_partitions), (v_id % v_partitions)::integer);
    INSERT INTO lease_queue.messages (id, qid, partition, key, payload, enqueued_at, deliver_at)
    VALUES (v_id, v_qid, v_partition, send.key, send.payload, v_now,
            v_now + pg_catalog.date_part('epoch', send.delay) * interval '1 second');
    IF send.key IS NOT NULL THEN
        INSERT INTO lease_queue.commit_marks (xid, first_id) VALUES (pg_catalog.txid_current(), v_id)
        ON CONFLICT DO NOTHING;
    END IF;
    IF v_notify THEN
        PERFORM pg_catalog.pg_notify('lease_queue', send.queue || ':' || v_partition);
    END IF;
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.send_batch(
    queue text, keys text[], payloads jsonb[], delay interval DEFAULT interval '0')
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid bigint;
    v_partitions integer;
    v_notify boolean;
    v_now timestamptz;
    v_bad text[];
    v_ids bigint[];
    v_parts integer[];
    v_may boolean;
BEGIN
    IF (lease_queue._valid_name(send_batch.queue)
        AND pg_catalog.array_ndims(send_batch.keys) IS NOT DISTINCT FROM pg_catalog.array_ndims(send_batch.payloads)
        AND COALESCE(pg_catalog.array_ndims(send_batch.keys), 1) = 1
        AND pg_catalog.cardinality(send_batch.keys) = pg_catalog.cardinality(send_batch.payloads)
        AND pg_catalog.cardinality(send_batch.keys) <= 100000
        AND EXTRACT(epoch FROM send_batch.delay) <@ '[0,31536000]'::pg_catalog.numrange
        AND NOT EXISTS (SELECT FROM ROWS FROM (pg_catalog.unnest(send_batch.keys), pg_catalog.unnest(send_batch.payloads)) AS u(k, p)
                         WHERE u.p IS NULL OR pg_catalog.octet_length(u.k) NOT BETWEEN 1 AND 1024))
       IS NOT TRUE
    THEN
        SELECT pg_catalog.array_agg(v) INTO v_bad
          FROM (SELECT v FROM ROWS FROM (pg_catalog.unnest(send_batch.keys),
                                         pg_catalog.unnest(send_batch.payloads))
                              WITH ORDINALITY AS u(k, p, i),
                       LATERAL pg_catalog.unnest(
                           lease_queue._text_violations('keys[' || u.i || ']', u.k, true, 1024)
                           || CASE WHEN u.p IS NULL AND u.i <= pg_catalog.cardinality(send_batch.payloads)
                                   THEN ARRAY['payloads[' || u.i || '] must not be NULL']
                                   ELSE '{}' END) AS v
                 LIMIT 10) AS f;
        PERFORM lease_queue._raise_invalid_input('lease_queue.send_batch',
            lease_queue._name_violations('queue', send_batch.queue)
            || CASE WHEN send_batch.keys IS NULL THEN ARRAY['keys must not be NULL'] ELSE '{}' END
            || CASE WHEN send_batch.payloads IS NULL THEN ARRAY['payloads must not be NULL'] ELSE '{}' END
            || CASE WHEN pg_catalog.array_ndims(send_batch.keys) > 1
                      OR pg_catalog.array_ndims(send_batch.payloads) > 1
                    THEN ARRAY['keys and payloads must be one-dimensional'] ELSE '{}' END
            || CASE WHEN pg_catalog.cardinality(send_batch.keys) <> pg_catalog.cardinality(send_batch.payloads)
                    THEN ARRAY['keys and payloads must have the same length (got '
                               || pg_catalog.cardinality(send_batch.keys) || ' and '
                               || pg_catalog.cardinality(send_batch.payloads) || ')'] ELSE '{}' END
            || CASE WHEN pg_catalog.cardinality(send_batch.keys) > 100000
                    THEN ARRAY['at most 100000 messages per call (got '
                               || pg_catalog.cardinality(send_batch.keys) || ')'] ELSE '{}' END
            || COALESCE(v_bad, '{}')
            || lease_queue._interval_violations('delay', send_batch.delay, false));
    END IF;
    IF pg_catalog.current_setting('session_replication_role') = 'replica' THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'lease_queue.send_batch: triggers are disabled (session_replication_role = replica)',
            HINT    = 'The commit order of messages is recorded by a trigger; send with origin.';
    END IF;

    SELECT q.qid, q.partitions, q.notify,                   -- as in send
           EXISTS (SELECT FROM lease_queue.grants AS g
                    WHERE g.qid = q.qid AND g.privilege = 'produce'
                      AND (g.grantee = 'public' OR g.grantee = SESSION_USER))
      INTO v_qid, v_partitions, v_notify, v_may
      FROM lease_queue.queues AS q
     WHERE q.name = send_batch.queue
       FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lease_queue._queue('lease_queue.send_batch', send_batch.queue);
    END IF;
    IF NOT v_may THEN
        IF NOT lease_queue._may(v_qid, 'produce') THEN
            PERFORM lease_queue._raise_not_granted('lease_queue.send_batch', send_batch.queue, 'produce');
        END IF;
    END IF;

    v_now := pg_catalog.clock_timestamp();
    -- Ids are taken in array order, so ordering by id returns them in that order.
    WITH input AS MATERIALIZED (
        SELECT pg_catalog.nextval('lease_queue.message_ids') AS id, u.k, u.p
          FROM ROWS FROM (pg_catalog.unnest(send_batch.keys), pg_catalog.unnest(send_batch.payloads))
               WITH ORDINALITY AS u(k, p, i)
         ORDER BY u.i
    ), added AS (
        INSERT INTO lease_queue.messages (id, qid, partition, key, payload, enqueued_at, deliver_at)
        SELECT input.id, v_qid,
               COALESCE(lease_queue.partition_of(input.k, v_partitions), (input.id % v_partitions)::integer),
               input.k, input.p, v_now,
               v_now + pg_catalog.date_part('epoch', send_batch.delay) * interval '1 second'
          FROM input
        RETURNING lease_queue.messages.id, lease_queue.messages.partition
    )
    SELECT pg_catalog.array_agg(added.id ORDER BY added.id), pg_catalog.array_agg(DISTINCT added.partition)
      INTO v_ids, v_parts
      FROM added;
    IF EXISTS (SELECT FROM pg_catalog.unnest(send_batch.keys) AS k WHERE k IS NOT NULL) THEN
        INSERT INTO lease_queue.commit_marks (xid, first_id) VALUES (pg_catalog.txid_current(), v_ids[1])
        ON CONFLICT DO NOTHING;
    END IF;
    IF v_notify AND v_parts IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify('lease_queue', send_batch.queue || ':' || x)
           FROM pg_catalog.unnest(v_parts) AS x;
    END IF;
    RETURN QUERY SELECT x FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(x, n) ORDER BY u.n;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.claim(queue text, partition integer, owner text, ttl interval)
RETURNS lease_queue.claim_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease_queue.claim_result;
    p lease_queue.partitions;
BEGIN
    IF (lease_queue._valid_name(claim.queue)
        AND claim.partition BETWEEN 0 AND 1023
        AND pg_catalog.octet_length(claim.owner) BETWEEN 1 AND 1024
        AND EXTRACT(epoch FROM claim.ttl) <@ '(0,31536000]'::pg_catalog.numrange) IS NOT TRUE
    THEN
        PERFORM lease_queue._check_partition_args('lease_queue.claim', claim.queue, claim.partition,
            claim.owner, 0::bigint, lease_queue._interval_violations('ttl', claim.ttl, true));
    END IF;
    p := lease_queue._lock_partition('lease_queue.claim', claim.queue, claim.partition, 'consume');

    SELECT a.acquired, a.epoch, a.expires_at INTO r.claimed, r.epoch, r.expires_at
      FROM lease.acquire(lease_queue.lease_key(claim.queue, claim.partition), claim.owner, claim.ttl) AS a;
    IF r.claimed THEN
        UPDATE lease_queue.partitions AS t
           SET claim_epoch = r.epoch, ttl = claim.ttl
         WHERE t.qid = p.qid AND t.partition = p.partition;
    END IF;
    RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.claim_any(queue text, owner text, ttl interval)
RETURNS lease_queue.claim_any_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease_queue.claim_any_result;
    q record;
    v_start integer;
    c record;
BEGIN
    IF (lease_queue._valid_name(claim_any.queue)
        AND pg_catalog.octet_length(claim_any.owner) BETWEEN 1 AND 1024
        AND EXTRACT(epoch FROM claim_any.ttl) <@ '(0,31536000]'::pg_catalog.numrange) IS NOT TRUE
    THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.claim_any',
            lease_queue._name_violations('queue', claim_any.queue)
            || lease_queue._text_violations('owner', claim_any.owner, false, 1024)
            || lease_queue._interval_violations('ttl', claim_any.ttl, true));
    END IF;
    q := lease_queue._queue_for('lease_queue.claim_any', claim_any.queue, 'consume');
    v_start := lease_queue.partition_of(claim_any.owner, q.partitions);
    r.claimed := false;

    FOR c IN
        SELECT p.partition
          FROM lease_queue.partitions AS p
          LEFT JOIN lease.list('lease_queue:' || claim_any.queue || ':') AS l
                 ON l.key = lease_queue.lease_key(claim_any.queue, p.partition)
         WHERE p.qid = q.qid AND l.held IS NOT TRUE
         ORDER BY (p.partition - v_start + q.partitions) % q.partitions
    LOOP
        PERFORM FROM lease_queue.partitions AS p
          WHERE p.qid = q.qid AND p.partition = c.partition
            FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        -- Judged again under the partition's lock: held since the list was read (by anyone, the
        -- caller too) means busy.
        CONTINUE WHEN EXISTS (SELECT FROM lease.inspect(lease_queue.lease_key(claim_any.queue, c.partition)) AS i
                               WHERE i.held);
        SELECT a.acquired, a.epoch, a.expires_at INTO r.claimed, r.epoch, r.expires_at
          FROM lease.acquire(lease_queue.lease_key(claim_any.queue, c.partition), claim_any.owner,
                             claim_any.ttl) AS a;
        IF r.claimed THEN
            UPDATE lease_queue.partitions AS p
               SET claim_epoch = r.epoch, ttl = claim_any.ttl
             WHERE p.qid = q.qid AND p.partition = c.partition;
            r.partition := c.partition;
            RETURN r;
        END IF;
    END LOOP;
    r.claimed := false;
    r.epoch := NULL;
    r.expires_at := NULL;
    RETURN r;
END
$$;

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
    v_key text;
    v_status text;
    v_now timestamptz;
    v_batch bigint;
    v_left integer;
    v_ids bigint[] := '{}';
    v_dead bigint[] := '{}';
    v_keys text[] COLLATE "C";
    c record;
    m record;
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
    v_key := lease_queue.lease_key(receive.queue, receive.partition);

    -- The fence and the heartbeat. A lease not taken through claim has no recorded ttl: refused.
    IF p.claim_epoch IS DISTINCT FROM receive.epoch THEN
        PERFORM lease.fence(v_key, receive.owner, receive.epoch);
        RAISE EXCEPTION USING
            ERRCODE = 'LQ004',
            MESSAGE = 'lease_queue.receive: epoch ' || receive.epoch || ' of ' || pg_catalog.quote_literal(v_key)
                      || ' was not claimed through lease_queue.claim',
            HINT    = 'Take partitions with lease_queue.claim or lease_queue.claim_any, not lease.acquire.';
    END IF;
    SELECT n.status INTO v_status FROM lease.renew(v_key, receive.owner, receive.epoch, p.ttl) AS n;
    IF v_status <> 'ok' THEN
        PERFORM lease_queue._raise_fenced('lease_queue.receive', v_key, v_status);
    END IF;

    -- An open batch: the same messages again.
    IF p.batch_id IS NOT NULL THEN
        IF p.batch_epoch <> receive.epoch THEN
            SELECT pg_catalog.array_agg(b.id) INTO v_dead
              FROM lease_queue.messages AS b
             WHERE b.batch_id = p.batch_id AND b.attempts >= q.max_attempts;
            IF v_dead IS NOT NULL THEN
                SELECT pg_catalog.array_agg(DISTINCT b.key) INTO v_keys
                  FROM lease_queue.messages AS b WHERE b.id = ANY (v_dead) AND b.key IS NOT NULL;
                PERFORM lease_queue._bury(v_dead, NULL);
                PERFORM lease_queue._refresh_keys(p.qid, p.partition, v_keys);
            END IF;
            UPDATE lease_queue.messages AS b
               SET attempts = b.attempts + 1, epoch = receive.epoch
             WHERE b.batch_id = p.batch_id;
            IF FOUND THEN
                UPDATE lease_queue.partitions AS t
                   SET batch_epoch = receive.epoch, batch_owner = receive.owner
                 WHERE t.qid = p.qid AND t.partition = p.partition;
            ELSE
                -- Every message of the batch was dead-lettered: the batch is over.
                UPDATE lease_queue.partitions AS t
                   SET batch_id = NULL, batch_epoch = NULL, batch_owner = NULL, batch_opened_at = NULL,
                       batch_keys = NULL
                 WHERE t.qid = p.qid AND t.partition = p.partition;
                PERFORM lease_queue._refresh_keys(p.qid, p.partition, p.batch_keys);
                p.batch_id := NULL;
            END IF;
        END IF;
        IF p.batch_id IS NOT NULL THEN
            RETURN QUERY
                SELECT b.batch_id, b.id, b.key::text, b.payload, b.attempts, b.enqueued_at
                  FROM lease_queue.messages AS b
                 WHERE b.batch_id = p.batch_id
                 ORDER BY b.batch_pos;
            RETURN;
        END IF;
    END IF;

    -- A new batch. The due keys and unkeyed messages, oldest first; the key rows are locked in key
    -- order (the order producers lock them in) before their messages are read. A key whose row a
    -- producer holds at this moment (committing) is skipped, not waited for: receive never waits for
    -- a producer, and delivering a key later is always safe.
    v_now := pg_catalog.clock_timestamp();
    v_left := receive.max;
    SELECT pg_catalog.array_agg(k.key) INTO v_keys
      FROM (SELECT k.key FROM lease_queue.keys AS k
             WHERE k.qid = p.qid AND k.partition = p.partition AND k.ready_at <= v_now
             ORDER BY k.ready_at, k.key
             LIMIT receive.max) AS k;
    IF v_keys IS NOT NULL THEN
        SELECT pg_catalog.array_agg(l.key) INTO v_keys
          FROM (SELECT k.key FROM lease_queue.keys AS k
                 WHERE k.qid = p.qid AND k.key = ANY (v_keys)
                 ORDER BY k.key
                   FOR NO KEY UPDATE SKIP LOCKED) AS l;
    END IF;
    v_dead := '{}';

    FOR c IN
        SELECT u.t, u.key, u.id FROM (
            (SELECT k.ready_at AS t, k.key, NULL::bigint AS id
               FROM lease_queue.keys AS k
              WHERE k.qid = p.qid AND k.key = ANY (COALESCE(v_keys, '{}')) AND k.ready_at <= v_now)
            UNION ALL
            (SELECT x.deliver_at, NULL, x.id
               FROM lease_queue.messages AS x
              WHERE x.qid = p.qid AND x.partition = p.partition AND x.key IS NULL
                AND x.batch_id IS NULL AND x.deliver_at <= v_now
              ORDER BY x.deliver_at, x.id
              LIMIT receive.max)) AS u
         ORDER BY u.t, u.key, u.id
    LOOP
        EXIT WHEN v_left = 0;
        IF c.id IS NOT NULL THEN
            -- An unkeyed message.
            SELECT b.attempts INTO m FROM lease_queue.messages AS b WHERE b.id = c.id;
            IF m.attempts >= q.max_attempts THEN
                v_dead := v_dead || c.id;
            ELSE
                v_ids := v_ids || c.id;
                v_left := v_left - 1;
            END IF;
            CONTINUE;
        END IF;
        -- A key: its messages from the head, while they are due; a retried message ends the key's
        -- part of the batch; a message delivered max_attempts times is dead-lettered and skipped.
        FOR m IN
            SELECT b.id, b.deliver_at, b.attempts, b.retry, b.batch_id
              FROM lease_queue.messages AS b
             WHERE b.qid = p.qid AND b.partition = p.partition AND b.key = c.key AND b.seq IS NOT NULL
             ORDER BY b.seq
        LOOP
            EXIT WHEN v_left = 0 OR m.batch_id IS NOT NULL;
            IF m.attempts >= q.max_attempts THEN
                v_dead := v_dead || m.id;
                CONTINUE;
            END IF;
            EXIT WHEN m.deliver_at > v_now;
            v_ids := v_ids || m.id;
            v_left := v_left - 1;
            EXIT WHEN m.retry;
        END LOOP;
    END LOOP;

    IF pg_catalog.cardinality(v_dead) > 0 THEN
        PERFORM lease_queue._bury(v_dead, NULL);
    END IF;
    IF pg_catalog.cardinality(v_ids) > 0 THEN
        v_batch := pg_catalog.nextval('lease_queue.batch_ids');
        UPDATE lease_queue.messages AS b
           SET batch_id = v_batch, batch_pos = u.pos, attempts = b.attempts + 1,
               epoch = receive.epoch, last_batch_id = v_batch
          FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(id, pos)
         WHERE b.id = u.id;
        UPDATE lease_queue.partitions AS t
           SET batch_id = v_batch, batch_epoch = receive.epoch, batch_owner = receive.owner,
               batch_opened_at = v_now,
               batch_keys = (SELECT pg_catalog.array_agg(DISTINCT b.key ORDER BY b.key)
                               FROM lease_queue.messages AS b
                              WHERE b.id = ANY (v_ids) AND b.key IS NOT NULL)
         WHERE t.qid = p.qid AND t.partition = p.partition;
    END IF;
    PERFORM lease_queue._refresh_keys(p.qid, p.partition, v_keys);

    IF v_batch IS NOT NULL THEN
        RETURN QUERY
            SELECT b.batch_id, b.id, b.key::text, b.payload, b.attempts, b.enqueued_at
              FROM lease_queue.messages AS b
             WHERE b.batch_id = v_batch
             ORDER BY b.batch_pos;
    END IF;
END
$$;

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
    UPDATE lease_queue.partitions AS t
       SET batch_id = NULL, batch_epoch = NULL, batch_owner = NULL, batch_opened_at = NULL,
           batch_keys = NULL, last_batch_id = p.batch_id, last_batch_epoch = ack.epoch
     WHERE t.qid = p.qid AND t.partition = p.partition;
    -- Every key the batch held, also those its nacks sent back: one pass, in key order.
    PERFORM lease_queue._refresh_keys(p.qid, p.partition, p.batch_keys);
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.nack(
    queue text, partition integer, owner text, epoch bigint, batch_id bigint, id bigint,
    retry_after interval DEFAULT interval '0', reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p lease_queue.partitions;
    q record;
    m lease_queue.messages;
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

    SELECT * INTO m FROM lease_queue.messages AS b WHERE b.id = nack.id AND b.qid = p.qid;
    IF FOUND AND m.batch_id IS NULL AND m.last_batch_id = nack.batch_id AND m.epoch = nack.epoch THEN
        RETURN 'retrying';                               -- sent back by this batch already
    ELSIF NOT FOUND AND EXISTS (SELECT FROM lease_queue.dead_letters AS d
                                 WHERE d.id = nack.id AND d.qid = p.qid AND d.batch_id = nack.batch_id
                                   AND d.epoch = nack.epoch) THEN
        RETURN 'dead_lettered';
    ELSIF NOT FOUND OR m.batch_id IS DISTINCT FROM nack.batch_id THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LQ003',
            MESSAGE = 'lease_queue.nack: message ' || nack.id || ' is not in batch ' || nack.batch_id,
            HINT    = 'Nack only messages that receive returned in the open batch.';
    END IF;

    -- No key row is touched here: the batch's keys are brought up to date when it closes (ack) or
    -- is abandoned, in key order. (Locking the key now would take key rows out of order in a
    -- transaction that nacks one key and then acks, and deadlock with a committing producer.)
    IF m.key IS NOT NULL THEN
        -- The later messages of the key in this batch go back undelivered.
        UPDATE lease_queue.messages AS b
           SET batch_id = NULL, batch_pos = NULL, attempts = b.attempts - 1
         WHERE b.qid = p.qid AND b.partition = p.partition AND b.key = m.key
           AND b.seq > m.seq AND b.batch_id = p.batch_id;
    END IF;
    IF m.attempts >= q.max_attempts THEN
        PERFORM lease_queue._bury(ARRAY[m.id], nack.reason);
    ELSE
        UPDATE lease_queue.messages AS b
           SET batch_id = NULL, batch_pos = NULL, retry = true, reason = nack.reason,
               deliver_at = pg_catalog.clock_timestamp()
                            + pg_catalog.date_part('epoch', nack.retry_after) * interval '1 second'
         WHERE b.id = m.id;
    END IF;
    RETURN CASE WHEN m.attempts >= q.max_attempts THEN 'dead_lettered' ELSE 'retrying' END;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.release(
    queue text, partition integer, owner text, epoch bigint, force boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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
        UPDATE lease_queue.messages AS b
           SET batch_id = NULL, batch_pos = NULL
         WHERE b.batch_id = p.batch_id;
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
           batch_keys = NULL
     WHERE t.qid = p.qid AND t.partition = p.partition;
    RETURN v_abandoned;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.redrive(queue text, key text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
    v_partition integer;
    v_head bigint;
    v_ready timestamptz;
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
    PERFORM lease_queue._lock_partition('lease_queue.redrive', redrive.queue, v_partition, NULL);
    INSERT INTO lease_queue.keys AS k (qid, key, partition, ready_at)
    VALUES (q.qid, v_key, v_partition, v_now)
    ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING;
    SELECT k.ready_at INTO v_ready
      FROM lease_queue.keys AS k WHERE k.qid = q.qid AND k.key = v_key FOR NO KEY UPDATE;
    IF v_ready IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = '55006',
            MESSAGE = 'lease_queue.redrive: key ' || pg_catalog.quote_literal(redrive.key)
                      || ' has messages in an open batch',
            HINT    = 'Redrive after the batch is acked.';
    END IF;
    SELECT pg_catalog.min(m.seq) INTO v_head
      FROM lease_queue.messages AS m
     WHERE m.qid = q.qid AND m.partition = v_partition AND m.key = v_key AND m.seq IS NOT NULL;
    v_head := COALESCE(v_head, pg_catalog.nextval('lease_queue.positions'));

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
    PERFORM lease_queue._refresh_keys(q.qid, v_partition, ARRAY[v_key]);
    IF q.notify AND v_count > 0 THEN
        PERFORM pg_catalog.pg_notify('lease_queue', redrive.queue || ':' || v_partition);
    END IF;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.next_due(queue text, partition integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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
          ORDER BY k.ready_at LIMIT 1),
        (SELECT m.deliver_at FROM lease_queue.messages AS m
          WHERE m.qid = q.qid AND m.partition = next_due.partition AND m.key IS NULL AND m.batch_id IS NULL
          ORDER BY m.deliver_at, m.id LIMIT 1));
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.list_dead_letters(queue text, max integer DEFAULT 100)
RETURNS TABLE (id bigint, partition integer, key text, payload jsonb, attempts integer, reason text,
               epoch bigint, batch_id bigint, enqueued_at timestamptz, dead_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
BEGIN
    IF (lease_queue._valid_name(list_dead_letters.queue)
        AND list_dead_letters.max BETWEEN 1 AND 10000) IS NOT TRUE
    THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.list_dead_letters',
            lease_queue._name_violations('queue', list_dead_letters.queue)
            || lease_queue._int_violations('max', list_dead_letters.max, 1, 10000));
    END IF;
    q := lease_queue._queue_for('lease_queue.list_dead_letters', list_dead_letters.queue, 'consume');
    RETURN QUERY
        SELECT d.id, d.partition, d.key::text, d.payload, d.attempts, d.reason, d.epoch, d.batch_id,
               d.enqueued_at, d.dead_at
          FROM lease_queue.dead_letters AS d
         WHERE d.qid = q.qid
         ORDER BY d.dead_at, d.id
         LIMIT list_dead_letters.max;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.status(queue text DEFAULT NULL)
RETURNS TABLE (queue_name text, partition integer, owner text, epoch bigint, expires_at timestamptz,
               batch_id bigint, batch_epoch bigint, batch_size bigint, batch_opened_at timestamptz,
               backlog bigint, oldest_enqueued_at timestamptz, held_back_keys bigint,
               dead_letters bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF status.queue IS NOT NULL AND lease_queue._valid_name(status.queue) IS NOT TRUE THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.status',
            lease_queue._name_violations('queue', status.queue));
    END IF;
    IF status.queue IS NOT NULL THEN
        PERFORM lease_queue._queue('lease_queue.status', status.queue);
    END IF;
    RETURN QUERY
        SELECT q.name::text, p.partition,
               -- Who holds the partition and its open batch: for roles that may consume the queue.
               CASE WHEN v.may THEN l.owner END, CASE WHEN v.may THEN l.epoch END,
               CASE WHEN v.may THEN l.expires_at END,
               CASE WHEN v.may THEN p.batch_id END, CASE WHEN v.may THEN p.batch_epoch END,
               (SELECT pg_catalog.count(*) FROM lease_queue.messages AS b WHERE b.batch_id = p.batch_id),
               p.batch_opened_at,
               m.pending - (SELECT pg_catalog.count(*) FROM lease_queue.messages AS b WHERE b.batch_id = p.batch_id),
               m.oldest, m.held_back,
               (SELECT pg_catalog.count(*) FROM lease_queue.dead_letters AS d
                 WHERE d.qid = q.qid AND d.partition = p.partition)
          FROM lease_queue.queues AS q
          CROSS JOIN LATERAL (SELECT lease_queue._may(q.qid, 'consume') AS may) AS v
          JOIN lease_queue.partitions AS p ON p.qid = q.qid
          LEFT JOIN LATERAL lease.inspect(lease_queue.lease_key(q.name, p.partition)) AS l ON true
          CROSS JOIN LATERAL (
                SELECT pg_catalog.count(*) AS pending, pg_catalog.min(x.enqueued_at) AS oldest,
                       pg_catalog.count(DISTINCT x.key) FILTER (WHERE x.retry AND x.batch_id IS NULL)
                           AS held_back
                  FROM lease_queue.messages AS x
                 WHERE x.qid = q.qid AND x.partition = p.partition
                   AND (x.key IS NOT NULL AND x.seq IS NOT NULL
                        OR x.key IS NULL)) AS m
         WHERE status.queue IS NULL OR q.name = status.queue
         ORDER BY q.name, p.partition;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.privileges(queue text DEFAULT NULL)
RETURNS TABLE (queue_name text, produce boolean, consume boolean)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF privileges.queue IS NOT NULL AND lease_queue._valid_name(privileges.queue) IS NOT TRUE THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.privileges',
            lease_queue._name_violations('queue', privileges.queue));
    END IF;
    IF privileges.queue IS NOT NULL THEN
        PERFORM lease_queue._queue('lease_queue.privileges', privileges.queue);
    END IF;
    RETURN QUERY
        SELECT q.name::text, lease_queue._may(q.qid, 'produce'), lease_queue._may(q.qid, 'consume')
          FROM lease_queue.queues AS q
         WHERE privileges.queue IS NULL OR q.name = privileges.queue
         ORDER BY q.name;
END
$$;

CREATE OR REPLACE FUNCTION lease_queue.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.1.1'::text $$;
