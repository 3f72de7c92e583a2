-- pg_lease_queue: an ordered, partitioned work queue whose partitions are owned through pg_lease
-- leases, with every consuming call fenced by the lease's epoch. The whole current API.
--
-- This is the one source of the SQL API: `make` (extensions/pg_lease_queue/Makefile) produces the
-- versioned install script of the current version, pg_lease_queue--<default_version>.sql, from it;
-- both are committed and a test checks they agree. Each release adds an upgrade script holding only
-- the changes (ADR 0003).
--
-- The contract is docs/QUEUE.md (the model, the guarantees, the ordering argument); the error codes
-- are listed in docs/SQLSTATES.md; the design and its alternatives are ADR 0004. In brief:
--   * A queue has a fixed number of partitions. A message with a key goes to the partition of its
--     key (lease_queue.partition_of); within a key, messages are delivered in the order their
--     producers' transactions committed. A message without a key (NULL) is unordered.
--   * Partition p of queue q is owned through the pg_lease lease on key 'lease_queue:<q>:<p>'
--     (lease_queue.lease_key), held under the claimer's owner string. Its epoch fences every call
--     that reads or settles messages: receive, ack, nack, release raise LE001 (not the holder),
--     LE002 (lapsed) or LE003 (stale epoch), pg_lease's own fencing codes, and change nothing.
--   * A partition has at most one open batch. receive opens one, or re-issues the open one (to the
--     heir of a crashed holder, restamped with the heir's epoch); ack closes it; nack sends one of
--     its messages back for a retry, holding back only that message's key; release refuses while a
--     batch is open unless forced, which abandons the batch.
--
-- Locks. Every call about a partition locks the partition's row first (FOR NO KEY UPDATE), then
-- the lease row (through lease.*), then key rows in key order; a producer locks key rows, in key
-- order, only in its commit's pre-commit phase. This fixed order means the queue's own calls cannot
-- deadlock with each other.
--
-- Privileges (ADR 0001, as in pg_lease). The functions run as the owner of the extension's objects
-- (the bootstrap superuser under CREATE EXTENSION), pin `search_path = pg_catalog, pg_temp` and name
-- every object with its schema; schema `lease_queue` is taken over by the script below. No role can
-- read or write the tables directly. A queue belongs to the roles granted it (lease_queue.grant_queue):
-- produce to send, consume to claim, receive, ack, nack and release; every role with USAGE on the
-- schema reads the counts in status(). Creating, dropping, granting and re-driving are the installing
-- role's (with the grant option), like lease.purge.
--
-- The Rust installer runs the versioned script in databases that have no extension files: it drops
-- the `\echo` line and every statement that follows a `-- pglease:extension-only` marker line, and
-- substitutes @extowner@.

\echo Use "CREATE EXTENSION pg_lease_queue" to load this file. \quit

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

-- ---------------------------------------------------------------------------------------------------
-- The schema: must be empty (an object planted in it could be resolved by the functions below), then
-- taken over by the role running this script. The check names its operators with their schema.
-- ---------------------------------------------------------------------------------------------------
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                  AND d.refobjid OPERATOR(pg_catalog.=) 'lease_queue'::pg_catalog.regnamespace
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_default_acl'::pg_catalog.regclass)
    THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease_queue: schema "lease_queue" is not empty',
            HINT    = 'pg_lease_queue installs only into a new or empty schema "lease_queue".';
    END IF;
END
$$;

ALTER SCHEMA lease_queue OWNER TO CURRENT_USER;
-- Privileges granted on the schema before the takeover do not survive it: a role that could create
-- objects in it could plant one that the functions below resolve. (ALTER SCHEMA ... OWNER keeps the
-- schema's grants.) What this extension grants follows.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee
          FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
         WHERE n.nspname OPERATOR(pg_catalog.=) 'lease_queue'
           AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA lease_queue FROM %s CASCADE',
            CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE r.grantee::pg_catalog.regrole::pg_catalog.text END);
    END LOOP;
END
$$;
GRANT USAGE ON SCHEMA lease_queue TO @extowner@ WITH GRANT OPTION;

-- ---------------------------------------------------------------------------------------------------
-- State
-- ---------------------------------------------------------------------------------------------------

CREATE SEQUENCE lease_queue.queue_ids;
CREATE SEQUENCE lease_queue.message_ids;
CREATE SEQUENCE lease_queue.batch_ids;
-- Unused since 0.3.0 (a keyed message's position is taken from message_ids: see
-- lease_queue._stamp_commit_order); kept so that dumps of earlier releases restore.
CREATE SEQUENCE lease_queue.positions;

-- One row per queue (notify: whether sends notify channel lease_queue). qid is internal: a queue dropped and created again is a new qid (its partitions'
-- lease keys, which are named by the queue's name, keep their epochs).
CREATE TABLE lease_queue.queues (
    qid          bigint NOT NULL DEFAULT pg_catalog.nextval('lease_queue.queue_ids'),
    name         text COLLATE "C" NOT NULL,
    partitions   integer NOT NULL,
    max_attempts integer NOT NULL,
    notify       boolean NOT NULL,
    created_at   timestamptz NOT NULL,
    CONSTRAINT queues_pkey PRIMARY KEY (qid),
    CONSTRAINT queues_name_key UNIQUE (name)
);

-- One row per partition of a queue, locked by every call about the partition.
--   claim_epoch, ttl      the last claim through lease_queue.claim(_any): its epoch and ttl (receive
--                         renews with that ttl, and only at that epoch)
--   batch_*               the open batch, if any: its id, the epoch and owner it was last issued to,
--                         when it was opened, the keys of its messages (their rows are brought
--                         up to date when the batch closes or is abandoned: nack takes no key row,
--                         so a transaction that nacks and then acks locks key rows in key order once)
--                         and, in batch_ids, its messages' ids in delivery order (since 0.3.0: a
--                         delivery writes no message row; the batch is this row)
--   last_batch_id/epoch   the last batch closed by ack, and the epoch that acked it (a repeated ack
--                         of it by that epoch succeeds again: safe to retry after a lost answer)
--   acked                 messages acked in the partition since it was created (or since the update
--                         to 0.2.0): ack adds the messages its DELETE removed, in the update of this
--                         row it makes anyway; nothing else changes it (status() shows it)
-- No column that calls change is indexed: every update is HOT.
CREATE TABLE lease_queue.partitions (
    qid              bigint NOT NULL,
    partition        integer NOT NULL,
    claim_epoch      bigint,
    ttl              interval,
    batch_id         bigint,
    batch_epoch      bigint,
    batch_owner      text,
    batch_opened_at  timestamptz,
    batch_keys       text[] COLLATE "C",
    last_batch_id    bigint,
    last_batch_epoch bigint,
    acked            bigint NOT NULL DEFAULT 0,
    batch_ids        bigint[],
    CONSTRAINT partitions_pkey PRIMARY KEY (qid, partition)
) WITH (fillfactor = 50);

-- One row per message not yet acked or dead-lettered.
--   partition     the partition of its key (lease_queue.partition_of), or id mod partitions if unkeyed
--   seq           keyed messages: the position within the key; its id when sent, given a new one at
--                 the producer's commit only if a transaction that sent later committed first
--                 (lease_queue._stamp_commit_order); unkeyed: NULL
--   deliver_at    not delivered before (send's delay; a nack's retry_after)
--   attempts      deliveries completed so far, the delivery in an open batch not included (it is
--                 counted when it ends without an ack: a re-issue to an heir, a nack, an abandoned
--                 batch; a message sent back undelivered by a nack of an earlier message of its key
--                 counts nothing)
--   retry         nacked at least once: delivered without any later message of its key in the same
--                 batch, and until acked no later message of its key is delivered
--   epoch, last_batch_id   the epoch and batch of its last completed delivery (or of the batch whose
--                 nack sent it back)
-- Whether a message is in the open batch is recorded on the partition (batch_ids), not here: a
-- delivery writes no message row.
CREATE TABLE lease_queue.messages (
    id            bigint NOT NULL DEFAULT pg_catalog.nextval('lease_queue.message_ids'),
    qid           bigint NOT NULL,
    partition     integer NOT NULL,
    key           text COLLATE "C",
    seq           bigint,
    payload       jsonb NOT NULL,
    enqueued_at   timestamptz NOT NULL,
    deliver_at    timestamptz NOT NULL,
    attempts      integer NOT NULL DEFAULT 0,
    retry         boolean NOT NULL DEFAULT false,
    reason        text,
    epoch         bigint,
    last_batch_id bigint,
    CONSTRAINT messages_pkey PRIMARY KEY (id)
);
-- A key's messages in order: the head of a key and what follows it.
CREATE INDEX messages_by_key ON lease_queue.messages (qid, partition, key, seq) WHERE key IS NOT NULL;
-- Unkeyed messages by due time (a partition's open batch, whose ids its row holds, is among them
-- only while it is open: a new batch is opened only when none is).
CREATE INDEX messages_unkeyed_due ON lease_queue.messages (qid, partition, deliver_at, id)
    WHERE key IS NULL;
-- Keyed messages nacked at least once, each holding its key back while it awaits its retry (status
-- counts their keys, leaving out those in the open batch). Entries are written by nack only.
CREATE INDEX messages_held_back ON lease_queue.messages (qid, partition, key)
    WHERE retry AND key IS NOT NULL;

-- One row per key that has messages (created by the first commit of a message of the key, deleted
-- when its last message is acked or dead-lettered). Its row lock orders the commits of the key.
--   ready_at   when the key's head becomes deliverable (its deliver_at), as of the key's last
--              refresh: a delivery leaves it as it is (since 0.3.1), so while a message of the key
--              is in the partition's open batch (the batch's messages of a key are always a prefix
--              of the key, and the batch's keys are the partition's batch_keys) it is the due time
--              of that message; the batch's close sets it again. receive reads it only when no
--              batch is open; next_due leaves the open batch's keys out. (0.3.0 set it NULL at
--              each delivery: an update of an indexed column, so a key row and two index entries
--              written per key delivered.)
--   last_seq   at least the highest position of the key's committed messages: a committing
--              transaction whose messages of the key all lie above it keeps their positions
-- A commit of a message of an existing key locks the row with an update of last_seq (not indexed):
-- a HOT update.
CREATE TABLE lease_queue.keys (
    qid       bigint NOT NULL,
    key       text COLLATE "C" NOT NULL,
    partition integer NOT NULL,
    ready_at  timestamptz,
    last_seq  bigint NOT NULL DEFAULT 0,
    CONSTRAINT keys_pkey PRIMARY KEY (qid, key)
) WITH (fillfactor = 70);
-- The due keys of a partition, in the order receive takes them (no sort: a batch reads `max` entries).
CREATE INDEX keys_ready ON lease_queue.keys (qid, partition, ready_at, key) WHERE ready_at IS NOT NULL;

-- One row per transaction that has sent keyed messages and not yet committed them (its top-level
-- transaction id, and the ids of those messages as ranges: a batch's ids, taken in one statement,
-- are usually one range): the deferred constraint trigger that orders the commit sits on this table,
-- so it fires once per transaction, whatever the number of messages, and finds the transaction's
-- messages through the primary key. The trigger deletes the row. receive and the key refresh leave
-- the calling transaction's own uncommitted messages (these ids) out.
CREATE TABLE lease_queue.commit_marks (
    xid      bigint NOT NULL,
    ids      pg_catalog.int8multirange NOT NULL,
    CONSTRAINT commit_marks_pkey PRIMARY KEY (xid)
);

-- Messages that were delivered max_attempts times without an ack, with the last delivery's epoch and
-- batch and the reason given by the last nack (if any). lease_queue.redrive puts them back.
CREATE TABLE lease_queue.dead_letters (
    id          bigint NOT NULL,
    qid         bigint NOT NULL,
    queue       text COLLATE "C" NOT NULL,
    partition   integer NOT NULL,
    key         text COLLATE "C",
    seq         bigint,
    payload     jsonb NOT NULL,
    enqueued_at timestamptz NOT NULL,
    attempts    integer NOT NULL,
    reason      text,
    epoch       bigint,
    batch_id    bigint,
    dead_at     timestamptz NOT NULL,
    CONSTRAINT dead_letters_pkey PRIMARY KEY (id)
);
CREATE INDEX dead_letters_by_key ON lease_queue.dead_letters (qid, key, seq);

COMMENT ON TABLE lease_queue.queues IS 'pg_lease_queue queues; internal: use the lease_queue.* functions';
COMMENT ON TABLE lease_queue.partitions IS 'pg_lease_queue partitions and their open batches; internal';
COMMENT ON TABLE lease_queue.messages IS 'pg_lease_queue messages not yet acked; internal';
COMMENT ON TABLE lease_queue.keys IS 'pg_lease_queue per-key order and readiness; internal';
COMMENT ON TABLE lease_queue.commit_marks IS 'pg_lease_queue transactions with keyed messages to stamp at commit; internal';
COMMENT ON TABLE lease_queue.dead_letters IS
    'pg_lease_queue messages delivered max_attempts times without an ack; read with lease_queue.list_dead_letters';

-- pg_dump keeps the queues, their messages and the positions: a restored database delivers what was
-- pending, in order.
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.queues', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.partitions', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.messages', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.keys', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.dead_letters', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.queue_ids', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.message_ids', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.batch_ids', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease_queue.positions', '');

REVOKE ALL ON TABLE lease_queue.queues, lease_queue.partitions, lease_queue.messages,
                    lease_queue.keys, lease_queue.dead_letters, lease_queue.commit_marks FROM PUBLIC;
REVOKE ALL ON SEQUENCE lease_queue.queue_ids, lease_queue.message_ids, lease_queue.batch_ids,
                       lease_queue.positions FROM PUBLIC;
-- The installing role may dump the state and restore it (COPY into the tables, setval).
GRANT SELECT, INSERT ON TABLE lease_queue.queues, lease_queue.partitions, lease_queue.messages,
                              lease_queue.keys, lease_queue.dead_letters TO @extowner@;
GRANT SELECT, UPDATE ON SEQUENCE lease_queue.queue_ids, lease_queue.message_ids, lease_queue.batch_ids,
                                 lease_queue.positions TO @extowner@;

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

-- ---------------------------------------------------------------------------------------------------
-- Result types (named row types: PostgreSQL caches their descriptors)
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease_queue.claim_result AS (claimed boolean, epoch bigint, expires_at timestamptz);
CREATE TYPE lease_queue.claim_any_result AS
    (claimed boolean, partition integer, epoch bigint, expires_at timestamptz);
CREATE TYPE lease_queue.delivery AS
    (batch_id bigint, id bigint, key text, payload jsonb, attempts integer, enqueued_at timestamptz);

-- ---------------------------------------------------------------------------------------------------
-- Input validation (error paths only). Each public function checks its arguments with one boolean
-- expression; only when it finds a problem does it collect every violation and raise 22023 naming
-- them all in the DETAIL. Nothing is read or written before the checks pass.
-- Limits: queue names are 1..128 bytes of [A-Za-z0-9_.-]; owners, keys 1..1024 bytes; partitions
-- 1..1024; max_attempts 1..10000; max 1..10000; ttl (0, 365 days]; delay, retry_after and
-- older_than [0, 365 days]; reason at most 8192 bytes; payloads not NULL.
-- ---------------------------------------------------------------------------------------------------

-- Whether a queue name is valid (the fast check).
CREATE FUNCTION lease_queue._valid_name(value text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.octet_length(value) BETWEEN 1 AND 128
           AND value COLLATE "C" ~ '^[A-Za-z0-9_.-]+$'
$$;

CREATE FUNCTION lease_queue._name_violations(name text, value text)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.array_remove(ARRAY[
        CASE WHEN value IS NULL THEN name || ' must not be NULL' END,
        CASE WHEN value = '' THEN name || ' must not be empty' END,
        CASE WHEN pg_catalog.octet_length(value) > 128
             THEN name || ' must be at most 128 bytes (got ' || pg_catalog.octet_length(value) || ')' END,
        CASE WHEN value <> '' AND NOT (value COLLATE "C" ~ '^[A-Za-z0-9_.-]+$')
             THEN name || ' must consist of the characters A-Z a-z 0-9 _ . -' END
    ], NULL)
$$;

-- Violations of a text argument (an owner, a key, a reason).
CREATE FUNCTION lease_queue._text_violations(
    name text, value text, may_be_null boolean, max_bytes integer)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.array_remove(ARRAY[
        CASE WHEN value IS NULL AND NOT may_be_null THEN name || ' must not be NULL' END,
        CASE WHEN value = '' THEN name || ' must not be empty' END,
        CASE WHEN pg_catalog.octet_length(value) > max_bytes
             THEN name || ' must be at most ' || max_bytes || ' bytes (got '
                  || pg_catalog.octet_length(value) || ')' END
    ], NULL)
$$;

-- Violations of a duration argument, judged by its length date_part('epoch', value) in seconds, as
-- in pg_lease: positive (a ttl: > 0) or not negative; at most 365 days; finite.
CREATE FUNCTION lease_queue._interval_violations(name text, value interval, positive boolean)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_s double precision := pg_catalog.date_part('epoch', value);
BEGIN
    IF value IS NULL THEN
        RETURN ARRAY[name || ' must not be NULL'];
    ELSIF NOT pg_catalog.isfinite(value) THEN
        RETURN ARRAY[name || ' must be finite'];
    ELSIF v_s > 31536000 THEN
        RETURN ARRAY[name || ' must be at most 365 days'];
    ELSIF positive AND v_s <= 0 THEN
        RETURN ARRAY[name || ' must be positive'];
    ELSIF NOT positive AND v_s < 0 THEN
        RETURN ARRAY[name || ' must not be negative'];
    END IF;
    RETURN '{}';
END
$$;

-- Violations of an integer argument that must lie in [lo, hi].
CREATE FUNCTION lease_queue._int_violations(name text, value bigint, lo bigint, hi bigint)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN value IS NULL THEN ARRAY[name || ' must not be NULL']
                WHEN value < lo OR value > hi
                THEN ARRAY[name || ' must be in [' || lo || ', ' || hi || '] (got ' || value || ')']
                ELSE '{}'::text[] END
$$;

-- Raise 22023 (invalid_parameter_value) naming every violation. Never returns.
CREATE FUNCTION lease_queue._raise_invalid_input(fn text, violations text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = '22023',
        MESSAGE = 'invalid input to ' || fn,
        DETAIL  = pg_catalog.array_to_string(violations, '; ') || '.',
        HINT    = 'See docs/QUEUE.md, "Arguments", for the limits of every argument.';
END
$$;

-- Raise 22023 naming every violation of the arguments shared by the calls about one partition.
CREATE FUNCTION lease_queue._check_partition_args(
    fn text, queue text, partition integer, owner text, epoch bigint, more text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text[] := lease_queue._name_violations('queue', queue)
                || lease_queue._int_violations('partition', partition, 0, 1023)
                || lease_queue._text_violations('owner', owner, false, 1024)
                || CASE WHEN epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
                || more;
BEGIN
    IF pg_catalog.cardinality(v) > 0 THEN
        PERFORM lease_queue._raise_invalid_input(fn, v);
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- Names and hashing (public, immutable)
-- ---------------------------------------------------------------------------------------------------

-- lease_queue.lease_key(queue, partition) -> text: the pg_lease key through which the partition is
-- owned: 'lease_queue:' || queue || ':' || partition. (Queue names contain no ':', so the keys of a
-- queue are exactly those listed by lease.list('lease_queue:' || queue || ':').) 22023 for a queue
-- name or a partition outside §7's limits (partition 0..1023; the queue need not exist).
CREATE FUNCTION lease_queue.lease_key(queue text, partition integer)
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

-- lease_queue.partition_of(key, partitions) -> integer: the partition of a message key in a queue of
-- `partitions` partitions: the first 8 bytes of the MD5 digest of the key's bytes (in the database
-- encoding), read as a big-endian unsigned 64-bit integer, modulo partitions. Stable across
-- PostgreSQL versions and platforms, and computable by any client. NULL for a NULL key (an unkeyed
-- message goes to partition id mod partitions). 22023 for a key or a number of partitions outside
-- §7's limits (key NULL or 1..1024 bytes; partitions 1..1024).
CREATE FUNCTION lease_queue.partition_of(key text, partitions integer)
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

-- ---------------------------------------------------------------------------------------------------
-- Internal helpers (no EXECUTE for PUBLIC)
-- ---------------------------------------------------------------------------------------------------

-- The queue named `queue`: (qid, partitions, max_attempts, notify); raises LQ001 if there is none.
CREATE FUNCTION lease_queue._queue(fn text, queue text,
    OUT qid bigint, OUT partitions integer, OUT max_attempts integer, OUT notify boolean)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT q.qid, q.partitions, q.max_attempts, q.notify INTO qid, partitions, max_attempts, notify
      FROM lease_queue.queues AS q
     WHERE q.name = _queue.queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LQ001',
            MESSAGE = fn || ': queue ' || pg_catalog.quote_literal(queue) || ' does not exist',
            HINT    = 'Create it with lease_queue.create_queue.';
    END IF;
END
$$;

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

-- Raise pg_lease's fencing SQLSTATE for a renew/release status other than 'ok'.
CREATE FUNCTION lease_queue._raise_fenced(fn text, lease_key text, status text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = CASE status WHEN 'not_owner' THEN 'LE001' WHEN 'lapsed' THEN 'LE002' ELSE 'LE003' END,
        MESSAGE = fn || ': the caller does not hold ' || pg_catalog.quote_literal(lease_key)
                  || ' at this epoch (' || status || ')',
        HINT    = 'Stop acting on this partition; claim it again to get a new epoch.';
END
$$;

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

-- Move the messages `ids` to the dead letters (in one statement), with `reason`. They die at one
-- instant (the clock is read once), so list_dead_letters lists them in id order.
CREATE FUNCTION lease_queue._bury(ids bigint[], reason text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM lease_queue.messages AS m WHERE m.id = ANY (ids) RETURNING m.*
    ), death AS MATERIALIZED (
        SELECT pg_catalog.clock_timestamp() AS at
    )
    INSERT INTO lease_queue.dead_letters
           (id, qid, queue, partition, key, seq, payload, enqueued_at, attempts, reason, epoch,
            batch_id, dead_at)
    SELECT g.id, g.qid, q.name, g.partition, g.key, g.seq, g.payload, g.enqueued_at, g.attempts,
           COALESCE(_bury.reason, g.reason), g.epoch, g.last_batch_id, death.at
      FROM gone AS g
      JOIN lease_queue.queues AS q ON q.qid = g.qid
      CROSS JOIN death
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
CREATE FUNCTION lease_queue._stamp_commit_order()
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

CREATE CONSTRAINT TRIGGER commit_order
    AFTER INSERT ON lease_queue.commit_marks
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    EXECUTE FUNCTION lease_queue._stamp_commit_order();

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.create_queue(queue, partitions, max_attempts DEFAULT 10, notify DEFAULT true)
--
-- Creates a queue of `partitions` partitions (1..1024, fixed for the queue's life); a message is
-- delivered at most max_attempts times (1..10000) before it is dead-lettered. With notify, sending
-- to it notifies channel `lease_queue` (see send). 42710 if a queue of that name exists; 22023 on
-- invalid input. The new queue is its creator's: the session's login role may produce to and
-- consume it, nobody else until lease_queue.grant_queue. The installing role's (grantable).
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.create_queue(
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

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.grant_queue(queue, role, privilege) and lease_queue.revoke_queue(queue, role, privilege)
--
-- Let `role` (a role name, or 'public' for every role) use `queue` for `privilege`: 'produce'
-- (send, send_batch) or 'consume' (claim, claim_any, receive, ack, nack, release, next_due,
-- list_dead_letters, and the holders and batches in status()); or take that back. Membership counts:
-- a grant to a role is a grant to its members. Granting what is granted, or revoking what is not,
-- changes nothing. A revoke does not end a partition lease already held: the consumer's next
-- consuming call is refused (42501). LQ001 if there is no such queue; 22023 for an unknown role or
-- privilege. The installing role's (grantable: the admin right).
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.set_notify(queue, notify)
--
-- Turns the queue's notifications on send on or off (for transactions that begin sending after
-- this commits). LQ001 if there is no such queue; 22023 on invalid input. The installing role's.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.set_notify(queue text, notify boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (lease_queue._valid_name(set_notify.queue) AND set_notify.notify IS NOT NULL) IS NOT TRUE THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.set_notify',
            lease_queue._name_violations('queue', set_notify.queue)
            || CASE WHEN set_notify.notify IS NULL THEN ARRAY['notify must not be NULL'] ELSE '{}' END);
    END IF;
    UPDATE lease_queue.queues AS q SET notify = set_notify.notify WHERE q.name = set_notify.queue;
    IF NOT FOUND THEN
        PERFORM lease_queue._queue('lease_queue.set_notify', set_notify.queue);
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.drop_queue(queue)
--
-- Drops a queue with its messages and dead letters. Waits for the calls in flight on its partitions
-- and for the transactions that sent to it to end; ends the partitions' leases that are held, whoever
-- holds them (lease.force_release; their holders' next calls raise LQ001). The leases' rows stay, so a queue created again under the
-- same name continues above every epoch of the old one. LQ001 if there is no such queue.
-- The installing role's (grantable).
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.drop_queue(queue text)
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
    DELETE FROM lease_queue.messages AS m WHERE m.qid = v_qid AND m.key IS NULL;
    DELETE FROM lease_queue.keys AS k WHERE k.qid = v_qid;
    DELETE FROM lease_queue.dead_letters AS d WHERE d.qid = v_qid;
    DELETE FROM lease_queue.partitions AS p WHERE p.qid = v_qid;
    DELETE FROM lease_queue.queues AS q WHERE q.qid = v_qid;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.send(queue, key, payload, delay DEFAULT 0) -> bigint (the message id)
--
-- Adds a message, deliverable no earlier than `delay` from now, that commits or rolls back with the
-- caller's transaction (a transactional outbox). A message with a key goes to partition
-- lease_queue.partition_of(key, partitions) and is delivered after every message of its key that
-- committed before it; a NULL key means unordered (partition id mod partitions). A delayed message
-- holds back the later messages of its key until it is delivered. Holds a FOR KEY SHARE lock on
-- the queue's row until the transaction ends (a drop_queue waits for it). If the queue notifies,
-- sends pg_notify('lease_queue', '<queue>:<partition>'), which PostgreSQL delivers when the
-- transaction commits (never if it rolls back), once per distinct payload per transaction.
-- LQ001 if there is no such queue; 55000 if triggers are disabled (session_replication_role =
-- replica: commit order could not be recorded); 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.send(queue text, key text, payload jsonb, delay interval DEFAULT interval '0')
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
    -- A keyed message's position is its id, unless its commit finds a later one committed first.
    INSERT INTO lease_queue.messages (id, qid, partition, key, seq, payload, enqueued_at, deliver_at)
    VALUES (v_id, v_qid, v_partition, send.key, CASE WHEN send.key IS NOT NULL THEN v_id END,
            send.payload, v_now,
            v_now + pg_catalog.date_part('epoch', send.delay) * interval '1 second');
    IF send.key IS NOT NULL THEN
        INSERT INTO lease_queue.commit_marks AS c (xid, ids)
        VALUES (pg_catalog.txid_current(),
                pg_catalog.int8multirange(pg_catalog.int8range(v_id, v_id + 1)))
        ON CONFLICT ON CONSTRAINT commit_marks_pkey
        DO UPDATE SET ids = c.ids OPERATOR(pg_catalog.+) EXCLUDED.ids;
    END IF;
    IF v_notify THEN
        PERFORM pg_catalog.pg_notify('lease_queue', send.queue || ':' || v_partition);
    END IF;
    RETURN v_id;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.send_batch(queue, keys, payloads, delay DEFAULT 0) -> SETOF bigint
--
-- send for each (keys[i], payloads[i]), in array order, in one statement; returns the ids in that
-- order. Messages of one key in one batch keep their array order. The arrays must be
-- one-dimensional and of the same length (at most 100000). Notifies once per partition it sent to
-- (if the queue notifies). Errors as send.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.send_batch(
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
    v_keyed pg_catalog.int8multirange;
    v_any_keyed boolean;
    v_wrap bigint;
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
    -- The ids, in array order (taken in one statement: usually one range of the sequence). A key's
    -- partition is lease_queue.partition_of's, computed inline (a call per message cost more than
    -- the rest of the insert) and in bigint: the digest's first 8 bytes read as unsigned (h, or
    -- h + 2^64 when negative) modulo the partitions; the keys were checked above.
    v_ids := ARRAY(SELECT pg_catalog.nextval('lease_queue.message_ids')
                     FROM pg_catalog.generate_series(1, pg_catalog.cardinality(send_batch.keys)));
    v_wrap := ((9223372036854775807 % v_partitions + 1) % v_partitions) * 2 % v_partitions;
    WITH input AS MATERIALIZED (
        SELECT u.id, u.k, u.p,
               (CASE WHEN u.k IS NULL THEN u.id % v_partitions
                     WHEN d.h >= 0 THEN d.h % v_partitions
                     ELSE ((d.h % v_partitions + v_wrap) % v_partitions + v_partitions) % v_partitions
                END)::integer AS part
          FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(send_batch.keys),
                          pg_catalog.unnest(send_batch.payloads)) AS u(id, k, p)
         CROSS JOIN LATERAL (SELECT ('x' || pg_catalog.substr(pg_catalog.md5(u.k), 1, 16))::bit(64)::bigint AS h) AS d
    ), added AS (
        INSERT INTO lease_queue.messages (id, qid, partition, key, seq, payload, enqueued_at, deliver_at)
        SELECT input.id, v_qid, input.part, input.k, CASE WHEN input.k IS NOT NULL THEN input.id END,
               input.p, v_now, v_now + pg_catalog.date_part('epoch', send_batch.delay) * interval '1 second'
          FROM input
    )
    SELECT pg_catalog.array_agg(DISTINCT input.part), pg_catalog.bool_or(input.k IS NOT NULL)
      INTO v_parts, v_any_keyed
      FROM input;
    -- The ids (as ranges) in the transaction's commit mark, if a message has a key (the commit
    -- trigger reads only the keyed ones).
    IF v_any_keyed THEN
        v_keyed := CASE WHEN v_ids[pg_catalog.cardinality(v_ids)] - v_ids[1] = pg_catalog.cardinality(v_ids) - 1
                        THEN pg_catalog.int8multirange(pg_catalog.int8range(v_ids[1], v_ids[pg_catalog.cardinality(v_ids)] + 1))
                        ELSE (SELECT pg_catalog.range_agg(pg_catalog.int8range(x, x + 1))
                                FROM pg_catalog.unnest(v_ids) AS x) END;
        INSERT INTO lease_queue.commit_marks AS c (xid, ids) VALUES (pg_catalog.txid_current(), v_keyed)
        ON CONFLICT ON CONSTRAINT commit_marks_pkey
        DO UPDATE SET ids = c.ids OPERATOR(pg_catalog.+) EXCLUDED.ids;
    END IF;
    IF v_notify AND v_parts IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify('lease_queue', send_batch.queue || ':' || x)
           FROM pg_catalog.unnest(v_parts) AS x;
    END IF;
    RETURN QUERY SELECT x FROM pg_catalog.unnest(v_ids) AS x;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.claim(queue, partition, owner, ttl) -> (claimed, epoch, expires_at)
--
-- Takes partition `partition` for `owner` for `ttl` through lease.acquire on its lease key (never
-- waiting): a FREE or LAPSED partition is granted with the key's next epoch; the owner's own live
-- grant is returned unchanged (its ttl is recorded for receive); a partition held by another owner
-- gives (false, NULL, NULL). receive renews the lease with this ttl. An open batch of a former
-- holder stays open: the next receive re-issues it at the new epoch.
-- LQ001 if there is no such queue; 22023 on invalid input (also a partition out of range).
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.claim(queue text, partition integer, owner text, ttl interval)
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

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.claim_any(queue, owner, ttl) -> (claimed, partition, epoch, expires_at)
--
-- Claims one partition that no one holds (FREE or LAPSED; not one the owner holds already), never
-- waiting on a busy one: partitions whose row another call is using are skipped. Tries them in an
-- order that starts at a hash of the owner, so concurrent claimers spread. (false, NULL, NULL,
-- NULL) when none is free. Errors as claim.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.claim_any(queue text, owner text, ttl interval)
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

-- The fence and heartbeat of receive and ack_and_receive, under the partition's row lock (p): the
-- epoch must have been claimed through claim/claim_any (LQ004, after pg_lease's own fencing codes
-- for a caller that does not hold the lease at all), and the lease is renewed with the claim's ttl
-- (LE001 not the holder, LE002 lapsed, LE003 stale epoch).
CREATE FUNCTION lease_queue._heartbeat(fn text, p lease_queue.partitions, lease_key text, owner text,
                                       epoch bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    IF p.claim_epoch IS DISTINCT FROM _heartbeat.epoch THEN
        PERFORM lease.fence(lease_key, _heartbeat.owner, _heartbeat.epoch);
        RAISE EXCEPTION USING
            ERRCODE = 'LQ004',
            MESSAGE = fn || ': epoch ' || _heartbeat.epoch || ' of ' || pg_catalog.quote_literal(lease_key)
                      || ' was not claimed through lease_queue.claim',
            HINT    = 'Take partitions with lease_queue.claim or lease_queue.claim_any, not lease.acquire.';
    END IF;
    SELECT n.status INTO v_status FROM lease.renew(lease_key, _heartbeat.owner, _heartbeat.epoch, p.ttl) AS n;
    IF v_status <> 'ok' THEN
        PERFORM lease_queue._raise_fenced(fn, lease_key, v_status);
    END IF;
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
CREATE FUNCTION lease_queue.receive(queue text, partition integer, owner text, epoch bigint, max integer)
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
CREATE FUNCTION lease_queue.ack(queue text, partition integer, owner text, epoch bigint, batch_id bigint)
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
CREATE FUNCTION lease_queue.ack_and_receive(
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
CREATE FUNCTION lease_queue.nack(
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
CREATE FUNCTION lease_queue.release(
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
CREATE FUNCTION lease_queue.redrive(queue text, key text)
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
-- lease_queue.discard_dead_letters(queue, older_than DEFAULT 0) -> bigint
--
-- Deletes the queue's dead letters that died more than older_than ago; returns how many. LQ001 no
-- such queue; 22023 on invalid input. The installing role's (grantable).
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.discard_dead_letters(queue text, older_than interval DEFAULT interval '0')
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
    v_count bigint;
BEGIN
    IF (lease_queue._valid_name(discard_dead_letters.queue)
        AND EXTRACT(epoch FROM discard_dead_letters.older_than) <@ '[0,31536000]'::pg_catalog.numrange)
       IS NOT TRUE
    THEN
        PERFORM lease_queue._raise_invalid_input('lease_queue.discard_dead_letters',
            lease_queue._name_violations('queue', discard_dead_letters.queue)
            || lease_queue._interval_violations('older_than', discard_dead_letters.older_than, false));
    END IF;
    q := lease_queue._queue('lease_queue.discard_dead_letters', discard_dead_letters.queue);
    DELETE FROM lease_queue.dead_letters AS d
     WHERE d.qid = q.qid
       AND d.dead_at <= pg_catalog.clock_timestamp()
                        - pg_catalog.date_part('epoch', discard_dead_letters.older_than) * interval '1 second';
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.list_dead_letters(queue, max DEFAULT 100) -> SETOF (...)
--
-- The queue's dead letters, oldest death first (at most max, 1..10000). LQ001 no such queue; 22023.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.list_dead_letters(queue text, max integer DEFAULT 100)
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

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.next_due(queue, partition) -> timestamptz
--
-- When the partition's next message outside the open batch becomes deliverable (in the past if one
-- is due now; a nacked message's retry time; a delayed message's due time), or NULL if none is
-- pending. The keys of the open batch (also those its nacks sent back) count again once it is acked
-- or abandoned. For a consumer that found nothing to receive: sleep until then or until a notification.
-- Advisory (no locks, not fenced), through the indexes of receive. LQ001 no such queue; 22023.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.next_due(queue text, partition integer)
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
-- lease_queue.list_queues() -> SETOF (queue_name, partitions, max_attempts, notify, created_at)
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.list_queues()
RETURNS TABLE (queue_name text, partitions integer, max_attempts integer, notify boolean,
               created_at timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.name::text, q.partitions, q.max_attempts, q.notify, q.created_at
      FROM lease_queue.queues AS q
     ORDER BY q.name
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.privileges(queue DEFAULT NULL) -> SETOF (queue_name, produce, consume)
--
-- For every queue (or the one named), whether the session may produce to it and consume it (§9:
-- grants to PUBLIC, to its login role or a role it is a member of; a superuser may everything).
-- Everyone. 22023 for an invalid name; LQ001 if the named queue does not exist.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.privileges(queue text DEFAULT NULL)
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
-- and messages_unkeyed_due (unkeyed ones); per partition an index-only search of messages_by_key
-- for the key of the first keyed message, in key order, which stops at the first match (at most one
-- more pass over the partition's entries); the open batch's size from the partition's row; index
-- probes for the rest (the first messages' rows, the held-back keys); one pass over the queues'
-- dead letters.
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
            -- Per partition: its unkeyed messages (the open batch's among them), and the first sent.
            SELECT m.qid, m.partition, pg_catalog.count(*) AS n, pg_catalog.min(m.id) AS first_id
              FROM lease_queue.messages AS m
             WHERE m.qid = ANY (v_qids) AND m.key IS NULL
             GROUP BY m.qid, m.partition
        ), held AS MATERIALIZED (
            -- Keys with a nacked message awaiting its retry (not redelivered in the open batch).
            SELECT m.qid, m.partition, pg_catalog.count(DISTINCT m.key) AS n
              FROM lease_queue.messages AS m
             WHERE m.qid = ANY (v_qids) AND m.retry AND m.key IS NOT NULL
               AND NOT EXISTS (SELECT FROM lease_queue.partitions AS t
                                WHERE t.qid = m.qid AND t.partition = m.partition
                                  AND m.id = ANY (t.batch_ids))
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
               -- Pending: the committed keyed messages and the unkeyed ones, less the open batch's.
               COALESCE(k.n, 0) + COALESCE(u.n, 0) - b.size,
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
                       WHERE x.id = u.first_id)),
               COALESCE(h.n, 0), COALESCE(d.n, 0), p.acked
          FROM sel AS s
          JOIN lease_queue.partitions AS p ON p.qid = s.qid
          LEFT JOIN LATERAL lease.inspect(lease_queue.lease_key(s.name, p.partition)) AS l ON true
          CROSS JOIN LATERAL (
                SELECT COALESCE(pg_catalog.cardinality(p.batch_ids), 0)::bigint AS size) AS b
          LEFT JOIN keyed AS k ON k.qid = p.qid AND k.partition = p.partition
          LEFT JOIN unkeyed AS u ON u.qid = p.qid AND u.partition = p.partition
          LEFT JOIN held AS h ON h.qid = p.qid AND h.partition = p.partition
          LEFT JOIN dead AS d ON d.qid = p.qid AND d.partition = p.partition
         ORDER BY s.name, p.partition;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease_queue.version() -> text: the version of the pg_lease_queue SQL API installed here.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease_queue.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.3.1'::text $$;

-- ---------------------------------------------------------------------------------------------------
-- Privileges of the functions. Internal helpers: no one but the owner. Administration: the installing
-- role, which may grant it on. Everything else: every role with USAGE on the schema.
-- ---------------------------------------------------------------------------------------------------
REVOKE ALL ON FUNCTION lease_queue._valid_name(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._name_violations(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._text_violations(text, text, boolean, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._interval_violations(text, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._int_violations(text, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._raise_invalid_input(text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._check_partition_args(text, text, integer, text, bigint, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._queue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._lock_partition(text, text, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._queue_for(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._may(bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._raise_not_granted(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._raise_fenced(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._refresh_keys(bigint, integer, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._heartbeat(text, lease_queue.partitions, text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._close_batch(text, text, lease_queue.partitions, bigint, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._open_batch(lease_queue.partitions, integer, text, bigint, integer, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._bury(bigint[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._stamp_commit_order() FROM PUBLIC;

REVOKE ALL ON FUNCTION lease_queue.create_queue(text, integer, integer, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.set_notify(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.drop_queue(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.grant_queue(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.revoke_queue(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue._check_grant_args(text, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.redrive(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease_queue.discard_dead_letters(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease_queue.create_queue(text, integer, integer, boolean) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION lease_queue.set_notify(text, boolean) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION lease_queue.drop_queue(text) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION lease_queue.redrive(text, text) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION lease_queue.discard_dead_letters(text, interval) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION lease_queue.grant_queue(text, text, text) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION lease_queue.revoke_queue(text, text, text) TO @extowner@ WITH GRANT OPTION;

-- Who may use the queues: every role, by default. The grant is made by the installing role (through a
-- function it owns, for the moment of this script), so that it can narrow it later:
--   REVOKE USAGE ON SCHEMA lease_queue FROM PUBLIC; GRANT USAGE ON SCHEMA lease_queue TO app_role;
CREATE FUNCTION lease_queue._grant_usage_as_installer()
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    GRANT USAGE ON SCHEMA lease_queue TO PUBLIC;
END
$$;
ALTER FUNCTION lease_queue._grant_usage_as_installer() OWNER TO @extowner@;
SELECT lease_queue._grant_usage_as_installer();
DROP FUNCTION lease_queue._grant_usage_as_installer();

-- ---------------------------------------------------------------------------------------------------
-- Last: nothing in the schema belongs to another role. (A role that could create in the schema
-- while this script ran, before the takeover committed, could have planted an object; the install
-- fails rather than keep it.)
-- ---------------------------------------------------------------------------------------------------
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                 JOIN pg_catalog.pg_shdepend AS s
                   ON s.classid OPERATOR(pg_catalog.=) d.classid AND s.objid OPERATOR(pg_catalog.=) d.objid
                WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                  AND d.refobjid OPERATOR(pg_catalog.=) 'lease_queue'::pg_catalog.regnamespace
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND s.dbid OPERATOR(pg_catalog.=) (SELECT db.oid FROM pg_catalog.pg_database AS db
                                                      WHERE db.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                  AND s.deptype OPERATOR(pg_catalog.=) 'o'
                  AND s.refobjid OPERATOR(pg_catalog.<>) (SELECT ro.oid FROM pg_catalog.pg_roles AS ro
                                                          WHERE ro.rolname OPERATOR(pg_catalog.=) CURRENT_USER))
    THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease_queue: schema "lease_queue" holds objects of another role',
            HINT    = 'Another role created objects in schema "lease_queue" during the installation; drop them and install again.';
    END IF;
END
$$;
