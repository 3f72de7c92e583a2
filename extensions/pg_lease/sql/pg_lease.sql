-- pg_lease: leases with fencing epochs, in pure SQL and PL/pgSQL. The whole current API.
--
-- This is the one source of the SQL API: `make` (extensions/pg_lease/Makefile) produces the
-- versioned install script of the current version, pg_lease--<default_version>.sql, from it, and
-- both are committed; a test checks they agree. Each release also adds an upgrade script
-- pg_lease--<previous>--<current>.sql holding only the changes, and the upgrade test checks that
-- a database upgraded along the chain equals a fresh install, function bodies included.
--
-- The authoritative contract is docs/SEMANTICS.md; the error codes are listed in docs/SQLSTATES.md.
-- In brief: a key is FREE, HELD(owner, epoch, expires_at) or LAPSED (held, but past its expiry by the
-- server clock). Expiry is lazy: every call reads clock_timestamp() and judges the stored row against
-- it; nothing runs in the background. Every call is one atomic statement that commits or rolls back
-- with the caller's transaction. Epochs never go back for a key, not even across lease.purge().
--
-- Privileges (ADR 0001). Under CREATE EXTENSION (a trusted extension) this script runs as the
-- bootstrap superuser, who owns every object and as whom the SECURITY DEFINER functions run. Nothing
-- such a function resolves may be created, renamed or replaced by another role: every function pins
-- `search_path = pg_catalog, pg_temp` and names every pg_lease object with its schema, and schema
-- `lease` itself, which PostgreSQL creates as the installing role, is taken over by the script (below)
-- so that the installing role can no longer rename it or create objects in it. The installing role
-- keeps what an extension owner needs: USAGE on the schema with the grant option (it decides who may
-- call the API), SELECT and INSERT on the state tables (pg_dump and restore), EXECUTE on purge.
--
-- The Rust installer runs the versioned script in databases that have no extension files: it drops
-- the `\echo` line and every statement that follows a `-- pglease:extension-only` marker line, and
-- substitutes @extowner@.

\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit

-- ---------------------------------------------------------------------------------------------------
-- The schema
--
-- Schema `lease` must be empty: an object planted in it before installation could be resolved by the
-- functions below. (This check names its operators with their schema: it runs before the schema is
-- known to be clean.) Then the role running this script takes the schema over. Without extension
-- files (the Rust installer) that role is the installing role, which owns the schema already.
-- ---------------------------------------------------------------------------------------------------
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                  AND d.refobjid OPERATOR(pg_catalog.=) 'lease'::pg_catalog.regnamespace
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_default_acl'::pg_catalog.regclass)
    THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease: schema "lease" is not empty',
            HINT    = 'pg_lease installs only into a new or empty schema "lease".';
    END IF;
END
$$;

ALTER SCHEMA lease OWNER TO CURRENT_USER;
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
         WHERE n.nspname OPERATOR(pg_catalog.=) 'lease'
           AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA lease FROM %s CASCADE',
            CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE r.grantee::pg_catalog.regrole::pg_catalog.text END);
    END LOOP;
END
$$;
GRANT USAGE ON SCHEMA lease TO @extowner@ WITH GRANT OPTION;

-- ---------------------------------------------------------------------------------------------------
-- State
-- ---------------------------------------------------------------------------------------------------

-- One row per key that was ever granted (and not purged since).
--   owner IS NULL                 FREE: released; epoch is the key's fencing counter (last epoch + 1)
--   owner IS NOT NULL             HELD while expires_at > clock_timestamp(), else LAPSED; epoch is the
--                                 epoch of that grant, which is also the key's fencing counter
-- A grant of a FREE or LAPSED key sets epoch = epoch + 1; a release stores epoch + 1. For a FREE row
-- expires_at is the moment of release, so for FREE and LAPSED rows alike it says since when the key has
-- been idle (lease.purge reads it).
--   waiting                       true once someone registered as waiting for the current grant
--                                 (lease.register_waiter); its release then notifies. Every grant
--                                 resets it.
--   prior_expires_at              the expiry before the last renew or release, written in the same
--                                 update: a renew or release that waited for the row lock judges the
--                                 lease as of the end of its wait with it.
--
-- Only `key` is indexed, and no call ever changes it: every renew, grant and release is a HOT update.
-- fillfactor 70 leaves room on each page for the new row versions that renewals create.
CREATE TABLE lease.leases (
    key              text COLLATE "C" NOT NULL,
    owner            text,
    epoch            bigint NOT NULL,
    expires_at       timestamptz NOT NULL,
    waiting          boolean NOT NULL DEFAULT false,
    prior_expires_at timestamptz,
    CONSTRAINT leases_pkey PRIMARY KEY (key)
) WITH (fillfactor = 70);

COMMENT ON TABLE lease.leases IS
    'pg_lease state, one row per key; internal: use the lease.* functions';

-- The database-wide epoch floor: every epoch that lease.purge() removed is <= max(floor), and a key
-- created anew starts at max(floor) + 1, so a purged and re-created key never reuses an epoch.
-- The sentinel row (floor 0) is created with the extension and serialises purge against the creation
-- of new keys: purge locks it FOR UPDATE, key creation FOR KEY SHARE. Purges record their floor in
-- non-sentinel rows, which pg_dump keeps (see pg_extension_config_dump below).
CREATE TABLE lease.epoch_floor (
    floor    bigint NOT NULL,
    sentinel boolean NOT NULL DEFAULT false
);
INSERT INTO lease.epoch_floor (floor, sentinel) VALUES (0, true);

COMMENT ON TABLE lease.epoch_floor IS
    'pg_lease epoch floor: keys created anew start above every purged epoch; internal';

-- pg_dump keeps lease state: a restored database must not hand out epochs again.
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.leases', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.epoch_floor', 'WHERE NOT sentinel');

REVOKE ALL ON TABLE lease.leases FROM PUBLIC;
REVOKE ALL ON TABLE lease.epoch_floor FROM PUBLIC;
-- The installing role may dump the state (pg_dump reads both tables) and restore it (COPY into them).
-- It can reset every epoch anyway (DROP EXTENSION); no other role can read or write the tables.
GRANT SELECT, INSERT ON TABLE lease.leases, lease.epoch_floor TO @extowner@;

-- ---------------------------------------------------------------------------------------------------
-- Input validation (error paths only)
--
-- The public functions check their arguments inline with one boolean expression; only when that
-- expression finds a problem do they call lease._raise_invalid_input, which names every violated
-- constraint in the DETAIL and raises 22023. Nothing is written before the checks pass.
-- Limits: keys and owners are 1..1024 bytes (far below the btree row limit of about 2700 bytes);
-- ttl is in (0, 365 days]; wait and older_than are in [0, 365 days].
-- ---------------------------------------------------------------------------------------------------

-- Violations of a key/owner/prefix-like text argument, as DETAIL fragments.
CREATE FUNCTION lease._text_violations(name text, value text, may_be_null boolean, may_be_empty boolean)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.array_remove(ARRAY[
        CASE WHEN value IS NULL AND NOT may_be_null
             THEN name || ' must not be NULL' END,
        CASE WHEN value = '' AND NOT may_be_empty
             THEN name || ' must not be empty' END,
        CASE WHEN pg_catalog.octet_length(value) > 1024
             THEN name || ' must be at most 1024 bytes (got '
                  || pg_catalog.octet_length(value) || ')' END
    ], NULL)
$$;

-- Violations of a duration argument. A duration's length is date_part('epoch', value) seconds, as
-- the public functions judge it. positive: ttl (> 0); otherwise wait/older_than (>= 0). All are at
-- most 365 days.
CREATE FUNCTION lease._interval_violations(name text, value interval, positive boolean)
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
        RETURN ARRAY[name || ' must be finite'];            -- infinite intervals exist since PostgreSQL 17
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

-- Raise 22023 (invalid_parameter_value) naming every violation. Never returns.
CREATE FUNCTION lease._raise_invalid_input(fn text, violations text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = '22023',
        MESSAGE = 'invalid input to ' || fn,
        DETAIL  = pg_catalog.array_to_string(violations, '; ') || '.',
        HINT    = 'Keys and owners are non-empty text of at most 1024 bytes; ttl is in (0, 365 days]; '
                  || 'wait and older_than are in [0, 365 days]; epoch is not NULL.';
END
$$;

-- Raise 22023 naming every violation if key, owner or epoch of a call about one grant (renew, release,
-- fence) is invalid; otherwise return. For slow paths only: the common paths check inline.
CREATE FUNCTION lease._check_grant_args(fn text, key text, owner text, epoch bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (key <> '' AND pg_catalog.octet_length(key) <= 1024
        AND owner <> '' AND pg_catalog.octet_length(owner) <= 1024
        AND epoch IS NOT NULL) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input(fn,
            lease._text_violations('key', key, false, false)
            || lease._text_violations('owner', owner, false, false)
            || CASE WHEN epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END);
    END IF;
END
$$;

-- Why a renew/release of (key, owner, epoch) cannot succeed now, in the documented precedence:
-- not_owner (no row, FREE, or another owner; a LAPSED row still names its last owner), then lapsed,
-- then epoch_mismatch. Returns 'ok' when the state would let the call succeed (the caller retries).
CREATE FUNCTION lease._refusal(key text, owner text, epoch bigint)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
BEGIN
    SELECT l.owner, l.epoch, l.expires_at INTO v_owner, v_epoch, v_expires_at
      FROM lease.leases AS l
     WHERE l.key = _refusal.key;
    IF NOT FOUND OR v_owner IS NULL OR v_owner <> _refusal.owner THEN
        RETURN 'not_owner';
    ELSIF v_expires_at <= pg_catalog.clock_timestamp() THEN
        RETURN 'lapsed';
    ELSIF v_epoch <> _refusal.epoch THEN
        RETURN 'epoch_mismatch';
    END IF;
    RETURN 'ok';
END
$$;

REVOKE ALL ON FUNCTION lease._text_violations(text, text, boolean, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._interval_violations(text, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._raise_invalid_input(text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._check_grant_args(text, text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._refusal(text, text, bigint) FROM PUBLIC;

-- ---------------------------------------------------------------------------------------------------
-- Result types of acquire and renew: named row types, whose row descriptor PostgreSQL takes from its
-- cache (it would rebuild the one of OUT parameters from the catalog on every call).
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.acquire_result AS (acquired boolean, epoch bigint, expires_at timestamptz);
CREATE TYPE lease.renew_result AS (status text, expires_at timestamptz);

-- ---------------------------------------------------------------------------------------------------
-- lease.acquire(key, owner, ttl, wait DEFAULT 0) -> (acquired, epoch, expires_at)
--
-- Contract: docs/SEMANTICS.md §3. Grants a FREE, LAPSED or unknown key with the next epoch; returns
-- the current grant unchanged to its owner; refuses (false, NULL, NULL) when another owner holds it
-- and wait = 0; with wait > 0 polls without holding a row lock and raises 57014 at the deadline.
-- 22023 on invalid input. A grant made after waiting for the key's row lock counts its ttl from the
-- end of that wait.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.acquire(
    key text, owner text, ttl interval, wait interval DEFAULT interval '0')
RETURNS lease.acquire_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.acquire_result;      -- the result
    v_done boolean;              -- the statement granted without waiting: nothing left to do
    v_locked_at timestamptz;     -- (about) when the granting statement held the row
    v_deadline timestamptz;
    v_now timestamptz;
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
BEGIN
    -- The common case first: an owner of 1..1024 bytes, a ttl in (0, 365 days] and no wait (lengths
    -- of durations in seconds, as everywhere: EXTRACT(epoch ...) is date_part's value, exact). The
    -- key needs no check here: an invalid key matches no row, and the path below validates every
    -- argument before it reads or creates a row for a key the UPDATE did not find. (Range tests keep
    -- the expression small: PL/pgSQL sets up each of its operators and functions in every
    -- transaction.)
    IF (pg_catalog.octet_length(acquire.owner) <@ '[1,1024]'::pg_catalog.int4range
        AND EXTRACT(epoch FROM acquire.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND EXTRACT(epoch FROM acquire.wait) = 0) IS NOT TRUE
    THEN
        -- Invalid input (22023, naming every violation), or a blocking acquire.
        IF (acquire.key <> '' AND pg_catalog.octet_length(acquire.key) <= 1024
            AND acquire.owner <> '' AND pg_catalog.octet_length(acquire.owner) <= 1024
            AND pg_catalog.date_part('epoch', acquire.ttl) > 0
            AND pg_catalog.date_part('epoch', acquire.ttl) <= 31536000
            AND pg_catalog.date_part('epoch', acquire.wait) > 0                 -- wait in [0, 365 days]
            AND pg_catalog.date_part('epoch', acquire.wait) <= 31536000) IS NOT TRUE
        THEN
            PERFORM lease._raise_invalid_input('lease.acquire',
                lease._text_violations('key', acquire.key, false, false)
                || lease._text_violations('owner', acquire.owner, false, false)
                || lease._interval_violations('ttl', acquire.ttl, true)
                || lease._interval_violations('wait', acquire.wait, false));
        END IF;

        -- Blocking: each attempt is a non-blocking acquire in a subtransaction. A refused attempt is
        -- rolled back, so the sleep below holds no row lock (PostgreSQL keeps the row lock of an
        -- UPDATE whose re-check failed after it raced a concurrent change of the row).
        v_deadline := pg_catalog.clock_timestamp()
                      + pg_catalog.date_part('epoch', acquire.wait) * interval '1 second';
        LOOP
            BEGIN
                SELECT a.acquired, a.epoch, a.expires_at
                  INTO r.acquired, r.epoch, r.expires_at
                  FROM lease.acquire(acquire.key, acquire.owner, acquire.ttl) AS a;
                IF r.acquired THEN
                    RETURN r;
                END IF;
                RAISE no_data_found;             -- roll back the refused attempt and its locks
            EXCEPTION WHEN no_data_found THEN
                NULL;
            END;
            -- Held by another owner (as of a moment ago): sleep to the next poll, but never past the
            -- holder's expiry or our deadline. A plain read, no lock. If the key is free by now
            -- (released or lapsed since the attempt), try again at once, deadline or not: the wait
            -- runs out (57014) only on a key that another owner held at the last attempt and still
            -- holds after the deadline.
            SELECT l.expires_at INTO v_expires_at
              FROM lease.leases AS l
             WHERE l.key = acquire.key AND l.owner IS NOT NULL;
            v_now := pg_catalog.clock_timestamp();
            IF (v_expires_at > v_now) IS NOT TRUE THEN
                CONTINUE;
            END IF;
            IF v_now >= v_deadline THEN
                RAISE EXCEPTION USING
                    ERRCODE = '57014',
                    MESSAGE = 'lease.acquire: wait bound exceeded for key ' || pg_catalog.quote_literal(acquire.key),
                    DETAIL  = 'The key is held by another owner until ' || v_expires_at || '.',
                    HINT    = 'Retry later, or wait longer than the holder''s remaining time.';
            END IF;
            PERFORM pg_catalog.pg_sleep(pg_catalog.date_part('epoch', LEAST(interval '50 milliseconds',
                COALESCE(v_expires_at - v_now, interval '0'), v_deadline - v_now)));
        END LOOP;
    END IF;

    LOOP
        -- A FREE or LAPSED key: grant it with the next epoch. The row lock taken here is the only one
        -- acquire ever takes; a concurrent grant makes this UPDATE re-check the row and skip it.
        -- The clock is read inline, so that PostgreSQL's re-check of a row changed by a concurrent
        -- commit re-reads it. v_done: the expiry was computed by a clock read no more than 1 ms before
        -- the statement held the row, so the statement did not wait for the row lock.
        UPDATE lease.leases AS l
           SET owner = acquire.owner,
               epoch = l.epoch + 1,
               expires_at = pg_catalog.clock_timestamp()
                            + pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second',
               waiting = false
         WHERE l.key = acquire.key
           AND (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
        RETURNING true, l.epoch, l.expires_at,
                  l.expires_at - pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second'
                      >= pg_catalog.clock_timestamp() - interval '1 millisecond'
             INTO r.acquired, r.epoch, r.expires_at, v_done;
        IF v_done THEN
            RETURN r;                        -- granted (the common case)
        END IF;
        IF FOUND THEN
            v_locked_at := pg_catalog.clock_timestamp();
            EXIT;                            -- granted after a wait for the row lock: see below
        END IF;

        -- Not granted. The key was not checked yet: an invalid one gets 22023 before anything is read.
        IF (acquire.key <> '' AND pg_catalog.octet_length(acquire.key) <= 1024) IS NOT TRUE THEN
            PERFORM lease._raise_invalid_input('lease.acquire',
                lease._text_violations('key', acquire.key, false, false));
        END IF;

        -- Held (by us or another owner), or no row at all. A plain read, no lock.
        SELECT l.owner, l.epoch, l.expires_at INTO v_owner, v_epoch, v_expires_at
          FROM lease.leases AS l
         WHERE l.key = acquire.key;

        IF FOUND THEN
            IF v_owner IS NULL OR v_expires_at <= pg_catalog.clock_timestamp() THEN
                CONTINUE;                    -- freed or lapsed since the UPDATE: try again
            ELSIF v_owner = acquire.owner THEN
                r.acquired := true;          -- already ours: idempotent, nothing changes
                r.epoch := v_epoch;
                r.expires_at := v_expires_at;
            ELSE
                r.acquired := false;         -- held by another owner
                r.epoch := NULL;
                r.expires_at := NULL;
            END IF;
            RETURN r;
        END IF;

        -- No row: the key is new (or was purged). Create it above the epoch floor. The KEY SHARE lock on
        -- the sentinel waits out a running purge, so the floor read below includes what it removed.
        PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR KEY SHARE;
        v_now := pg_catalog.clock_timestamp();
        INSERT INTO lease.leases AS l (key, owner, epoch, expires_at)
        SELECT acquire.key, acquire.owner, pg_catalog.max(f.floor) + 1,
               v_now + pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second'
          FROM lease.epoch_floor AS f
        ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING
        RETURNING true, l.epoch, l.expires_at, pg_catalog.clock_timestamp()
             INTO r.acquired, r.epoch, r.expires_at, v_locked_at;
        IF FOUND THEN
            -- Granted. An INSERT that waited (for a concurrent creator of the key that rolled back)
            -- counts the ttl from the end of that wait, below.
            EXIT WHEN v_locked_at - v_now > interval '1 millisecond';
            RETURN r;
        END IF;
        -- Another session created the key first: judge its row on the next turn.
    END LOOP;

    -- Granted after a wait for the row (a locker that changed nothing, or rolled back; a concurrent
    -- creator that rolled back): the grant stands — a FREE, LAPSED or absent key stays so — but its
    -- ttl counts from the end of the wait.
    UPDATE lease.leases AS l
       SET expires_at = v_locked_at + pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second'
     WHERE l.key = acquire.key
    RETURNING l.expires_at INTO r.expires_at;
    RETURN r;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.renew(key, owner, epoch, ttl) -> (status, expires_at)
--
-- Contract: docs/SEMANTICS.md §3. Extends the grant (key, owner, epoch) to server time + ttl if it is
-- still HELD; otherwise changes nothing and reports not_owner, lapsed or epoch_mismatch, in that
-- precedence. Judged as of the moment the call holds the key's row: if it waited for the row lock
-- and the lease lapsed meanwhile, it undoes its update and reports `lapsed`. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.renew(
    key text, owner text, epoch bigint, ttl interval)
RETURNS lease.renew_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.renew_result;        -- the result
    v_done boolean;              -- renewed without waiting, and the lease was HELD: nothing left to do
    v_locked_at timestamptz;     -- (about) when the statement held the row
    v_prior timestamptz;         -- the expiry the statement replaced
BEGIN
    -- The ttl is checked first (in (0, 365 days], as in acquire): the UPDATE below writes it. The other
    -- arguments need no check before it (an invalid key, owner or epoch matches no row); they are
    -- checked before any refusal.
    IF (EXTRACT(epoch FROM renew.ttl) <@ '(0,31536000]'::pg_catalog.numrange) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.renew',
            lease._text_violations('key', renew.key, false, false)
            || lease._text_violations('owner', renew.owner, false, false)
            || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || lease._interval_violations('ttl', renew.ttl, true));
    END IF;

    LOOP
        -- The clock is read inline, as in acquire. v_done: the lease was still HELD when the statement
        -- held the row, and the new expiry was computed no more than 1 ms before that.
        UPDATE lease.leases AS l
           SET expires_at = pg_catalog.clock_timestamp()
                            + pg_catalog.date_part('epoch', renew.ttl) * interval '1 second',
               prior_expires_at = l.expires_at
         WHERE l.key = renew.key
           AND l.owner = renew.owner
           AND l.epoch = renew.epoch
           AND l.expires_at > pg_catalog.clock_timestamp()
        RETURNING 'ok', l.expires_at, l.prior_expires_at,
                  l.prior_expires_at > pg_catalog.clock_timestamp()
                  AND l.expires_at - pg_catalog.date_part('epoch', renew.ttl) * interval '1 second'
                      >= pg_catalog.clock_timestamp() - interval '1 millisecond'
             INTO r.status, r.expires_at, v_prior, v_done;
        IF v_done THEN
            RETURN r;                        -- renewed (the common case)
        END IF;
        IF FOUND THEN
            v_locked_at := pg_catalog.clock_timestamp();
            IF v_prior <= v_locked_at THEN
                -- The lease lapsed while we waited for the row lock: undo, report it.
                UPDATE lease.leases AS l SET expires_at = v_prior WHERE l.key = renew.key;
                r.status := 'lapsed';
                r.expires_at := NULL;
            ELSE
                -- We waited, and the lease was still ours: count the ttl from the end of the wait.
                UPDATE lease.leases AS l
                   SET expires_at = v_locked_at
                                    + pg_catalog.date_part('epoch', renew.ttl) * interval '1 second'
                 WHERE l.key = renew.key
                RETURNING l.expires_at INTO r.expires_at;
            END IF;
            RETURN r;
        END IF;
        -- Nothing renewed: invalid input first (22023), then the refusal in its precedence.
        PERFORM lease._check_grant_args('lease.renew', renew.key, renew.owner, renew.epoch);
        r.status := lease._refusal(renew.key, renew.owner, renew.epoch);
        IF r.status <> 'ok' THEN
            r.expires_at := NULL;
            RETURN r;
        END IF;
        -- The row changed between the UPDATE and the read (a concurrent commit): judge it again.
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.release(key, owner, epoch) -> status
--
-- Contract: docs/SEMANTICS.md §3. Frees the grant (key, owner, epoch) if it is still HELD (the key's
-- counter moves to epoch + 1); otherwise changes nothing and reports not_owner, lapsed or
-- epoch_mismatch, in that precedence. Judged as of the moment the call holds the row, like renew;
-- a release that waited for the row lock frees the key as of the end of that wait.
-- When a waiter registered for the released grant, sends pg_notify('pg_lease_released', key),
-- delivered when the release commits; an uncontended release sends nothing. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.release(key text, owner text, epoch bigint, OUT status text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_waiting boolean;
    v_prior timestamptz;
    v_freed_at timestamptz;
BEGIN
    -- No argument needs a check before the UPDATE: an invalid key, owner or epoch matches no row, and
    -- they are checked before any refusal.
    LOOP
        -- The clock is read inline, as in acquire. The status is 'ok' right away when the release was
        -- stamped no more than 1 ms before the statement's end (it did not wait for the row lock),
        -- the lease was still HELD at the stamp (the moment the statement held the row), and no
        -- waiter needs a notification.
        UPDATE lease.leases AS l
           SET owner = NULL,
               epoch = l.epoch + 1,
               expires_at = pg_catalog.clock_timestamp(),
               prior_expires_at = l.expires_at
         WHERE l.key = release.key
           AND l.owner = release.owner
           AND l.epoch = release.epoch
           AND l.expires_at > pg_catalog.clock_timestamp()
        RETURNING CASE WHEN NOT l.waiting AND l.prior_expires_at > l.expires_at
                            AND l.expires_at >= pg_catalog.clock_timestamp() - interval '1 millisecond'
                       THEN 'ok' END,
                  l.waiting, l.prior_expires_at, l.expires_at
             INTO release.status, v_waiting, v_prior, v_freed_at;
        IF release.status IS NOT NULL THEN
            RETURN;                          -- released (the common case)
        END IF;
        IF FOUND THEN
            IF v_prior <= pg_catalog.clock_timestamp() THEN
                -- The lease lapsed while we waited for the row lock: undo, report it.
                UPDATE lease.leases AS l
                   SET owner = release.owner, epoch = release.epoch, expires_at = v_prior
                 WHERE l.key = release.key;
                release.status := 'lapsed';
                RETURN;
            END IF;
            IF v_freed_at < pg_catalog.clock_timestamp() - interval '1 millisecond' THEN
                -- We waited for the row lock: the key is free (idle, for purge) since the end of the
                -- wait, not since the statement began.
                UPDATE lease.leases AS l
                   SET expires_at = pg_catalog.clock_timestamp()
                 WHERE l.key = release.key;
            END IF;
            IF v_waiting THEN
                PERFORM pg_catalog.pg_notify('pg_lease_released', release.key);
            END IF;
            release.status := 'ok';
            RETURN;
        END IF;
        -- Nothing released: invalid input first (22023), then the refusal in its precedence.
        PERFORM lease._check_grant_args('lease.release', release.key, release.owner, release.epoch);
        release.status := lease._refusal(release.key, release.owner, release.epoch);
        IF release.status <> 'ok' THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.inspect(key) -> (held, owner, epoch, expires_at)
--
-- The key's state as of now by the server clock; advisory (it takes no lock). Zero rows for a key
-- never leased (or purged). held = false for FREE and LAPSED keys, with owner and expires_at NULL and
-- epoch the key's fencing counter: every epoch <= it is stale, the next grant is greater.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.inspect(key text)
RETURNS TABLE (held boolean, owner text, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
ROWS 1
AS $$
BEGIN
    IF inspect.key IS NULL OR inspect.key = '' OR pg_catalog.octet_length(inspect.key) > 1024 THEN
        PERFORM lease._raise_invalid_input('lease.inspect',
            lease._text_violations('key', inspect.key, false, false));
    END IF;
    RETURN QUERY
        SELECT s.held,
               CASE WHEN s.held THEN s.owner END,
               s.epoch,
               CASE WHEN s.held THEN s.expires_at END
          FROM (SELECT l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp() AS held,
                       l.owner, l.epoch, l.expires_at
                  FROM lease.leases AS l
                 WHERE l.key = inspect.key) AS s;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.list(prefix DEFAULT NULL) -> SETOF (key, held, owner, epoch, expires_at)
--
-- Every key (or every key starting with `prefix`, compared byte-wise), ordered by key, with the same
-- columns and meaning as lease.inspect. For operators; callable by the roles that can call inspect.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.list(prefix text DEFAULT NULL)
RETURNS TABLE (key text, held boolean, owner text, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.octet_length(list.prefix) > 1024 THEN
        PERFORM lease._raise_invalid_input('lease.list',
            lease._text_violations('prefix', list.prefix, true, true));
    END IF;
    RETURN QUERY
        SELECT s.key,
               s.held,
               CASE WHEN s.held THEN s.owner END,
               s.epoch,
               CASE WHEN s.held THEN s.expires_at END
          FROM (SELECT l.key,
                       l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp() AS held,
                       l.owner, l.epoch, l.expires_at
                  FROM lease.leases AS l
                 WHERE list.prefix IS NULL
                    OR l.key LIKE pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
                           list.prefix, E'\\', E'\\\\'), '%', E'\\%'), '_', E'\\_') || '%') AS s
         ORDER BY s.key;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.register_waiter(key) -> (held, owner, epoch, expires_at, lapses_in)
--
-- For clients that wait without polling. If the key is held, marks it as awaited (so the holder's
-- release will notify channel `pg_lease_released` with the key as payload) and returns the holder,
-- its epoch and expiry, and lapses_in = expires_at - now on the server clock: the waiter sleeps until
-- the notification or until lapses_in has passed, whichever comes first, then tries to acquire.
-- If the key is not held (FREE, LAPSED or unknown) returns held = false and NULLs: try to acquire now.
-- LISTEN before calling this, so a release right after it cannot be missed. Takes the row lock only
-- for the instant of setting the mark (in its own statement); the mark is cleared by the next grant.
-- 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.register_waiter(
    key text,
    OUT held boolean, OUT owner text, OUT epoch bigint, OUT expires_at timestamptz,
    OUT lapses_in interval)
RETURNS record
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF register_waiter.key IS NULL OR register_waiter.key = ''
       OR pg_catalog.octet_length(register_waiter.key) > 1024 THEN
        PERFORM lease._raise_invalid_input('lease.register_waiter',
            lease._text_violations('key', register_waiter.key, false, false));
    END IF;

    -- Set the mark if it is not set yet (the first waiter pays one HOT update; later ones only read).
    UPDATE lease.leases AS l
       SET waiting = true
     WHERE l.key = register_waiter.key
       AND l.owner IS NOT NULL
       AND l.expires_at > pg_catalog.clock_timestamp()
       AND NOT l.waiting
    RETURNING true, l.owner, l.epoch, l.expires_at,
              GREATEST(l.expires_at - pg_catalog.clock_timestamp(), interval '0')
         INTO register_waiter.held, register_waiter.owner, register_waiter.epoch,
              register_waiter.expires_at, register_waiter.lapses_in;
    IF FOUND THEN
        RETURN;
    END IF;

    -- Already marked, or not held. A marked row that is still held needs nothing more.
    SELECT true, l.owner, l.epoch, l.expires_at, l.expires_at - pg_catalog.clock_timestamp()
      INTO register_waiter.held, register_waiter.owner, register_waiter.epoch,
           register_waiter.expires_at, register_waiter.lapses_in
      FROM lease.leases AS l
     WHERE l.key = register_waiter.key
       AND l.owner IS NOT NULL
       AND l.expires_at > pg_catalog.clock_timestamp()
       AND l.waiting;
    IF NOT FOUND THEN
        -- Not held now (or it changed hands between the two statements): the caller tries to acquire.
        register_waiter.held := false;
        register_waiter.owner := NULL;
        register_waiter.epoch := NULL;
        register_waiter.expires_at := NULL;
        register_waiter.lapses_in := NULL;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.fence(key, owner, epoch) -> timestamptz
--
-- Guards writes in the caller's transaction: verifies that `owner` holds `key` at `epoch` now and
-- locks the key's row (FOR SHARE) until the transaction ends, so no takeover, release or renew of the
-- key can commit before the guarded writes do; returns the lease's expiry. Otherwise raises, with the
-- same precedence as renew's statuses: LE001 (not the owner: unknown, FREE, or another owner),
-- LE002 (the lease lapsed), LE003 (another epoch). Writes that follow a successful fence in the same
-- transaction are ordered before any later grant of the key. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.fence(key text, owner text, epoch bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
BEGIN
    IF fence.key IS NULL OR fence.key = '' OR pg_catalog.octet_length(fence.key) > 1024
       OR fence.owner IS NULL OR fence.owner = '' OR pg_catalog.octet_length(fence.owner) > 1024
       OR fence.epoch IS NULL
    THEN
        PERFORM lease._check_grant_args('lease.fence', fence.key, fence.owner, fence.epoch);
    END IF;

    -- FOR SHARE conflicts with the row locks of acquire, renew and release (FOR NO KEY UPDATE), and
    -- lets several guarded transactions of the same holder run at once. If a transition of the row is
    -- in flight, this waits for it and judges the committed result.
    SELECT l.owner, l.epoch, l.expires_at INTO v_owner, v_epoch, v_expires_at
      FROM lease.leases AS l
     WHERE l.key = fence.key
       FOR SHARE;

    IF NOT FOUND OR v_owner IS NULL OR v_owner <> fence.owner THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LE001',
            MESSAGE = 'lease.fence: ' || pg_catalog.quote_literal(fence.owner) || ' does not hold key '
                      || pg_catalog.quote_literal(fence.key),
            HINT    = 'Stop acting on this lease; acquire the key again to get a new epoch.';
    ELSIF v_expires_at <= pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LE002',
            MESSAGE = 'lease.fence: the lease on key ' || pg_catalog.quote_literal(fence.key) || ' lapsed',
            DETAIL  = 'It expired at ' || v_expires_at || '.',
            HINT    = 'Stop acting on this lease; acquire the key again to get a new epoch.';
    ELSIF v_epoch <> fence.epoch THEN
        RAISE EXCEPTION USING
            ERRCODE = 'LE003',
            MESSAGE = 'lease.fence: epoch ' || fence.epoch || ' is not the current epoch of key '
                      || pg_catalog.quote_literal(fence.key),
            DETAIL  = 'The current epoch is ' || v_epoch || '.',
            HINT    = 'Stop acting on this lease; acquire the key again to get a new epoch.';
    END IF;
    RETURN v_expires_at;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.purge(older_than) -> bigint
--
-- Deletes the rows of keys that have been FREE or LAPSED for longer than `older_than` (FREE: since the
-- release; LAPSED: since the expiry) and returns how many it deleted. HELD keys are never touched.
-- Before deleting, it raises the epoch floor to the largest epoch it removes, so a purged key that is
-- acquired again starts above every epoch it ever had: epochs never go back. Waits for transactions
-- that are creating new keys (and they for it). Executable by the role that installed the extension,
-- which may grant it on (WITH GRANT OPTION) to operator roles. 22023 on invalid input.
-- Rows that an in-flight transaction has locked are skipped (their state is about to change; the next
-- purge judges them): purge never waits on a lease row while it holds the epoch-floor lock, so it
-- cannot deadlock with a transaction that both holds a lease row and creates a new key.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.purge(older_than interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_older_s double precision := pg_catalog.date_part('epoch', purge.older_than);
    v_purged bigint;
    v_max_epoch bigint;
    v_floor bigint;
BEGIN
    IF v_older_s IS NULL OR NOT (v_older_s >= 0 AND v_older_s <= 31536000) THEN
        PERFORM lease._raise_invalid_input('lease.purge',
            lease._interval_violations('older_than', purge.older_than, false));
    END IF;

    -- Excludes key creation (FOR KEY SHARE on the sentinel) and other purges until we commit.
    PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR UPDATE;

    WITH idle AS (
        SELECT l.key
          FROM lease.leases AS l
         WHERE (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
           AND l.expires_at < pg_catalog.clock_timestamp() - v_older_s * interval '1 second'
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM lease.leases AS l
         USING idle
         WHERE l.key = idle.key
        RETURNING l.epoch
    )
    SELECT pg_catalog.count(*), pg_catalog.max(gone.epoch) INTO v_purged, v_max_epoch FROM gone;

    SELECT pg_catalog.max(f.floor) INTO v_floor FROM lease.epoch_floor AS f;
    IF v_max_epoch > v_floor THEN
        DELETE FROM lease.epoch_floor AS f WHERE NOT f.sentinel;
        INSERT INTO lease.epoch_floor (floor, sentinel) VALUES (v_max_epoch, false);
    END IF;
    RETURN v_purged;
END
$$;

REVOKE ALL ON FUNCTION lease.purge(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.purge(interval) TO @extowner@ WITH GRANT OPTION;

-- ---------------------------------------------------------------------------------------------------
-- lease.version() -> text: the version of the pg_lease SQL API installed in this database.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.5.0'::text $$;

-- ---------------------------------------------------------------------------------------------------
-- Who may call the API: every role, by default. The grant is made by the installing role (through a
-- function it owns, for the moment of this script), so that it can narrow it later:
--   REVOKE USAGE ON SCHEMA lease FROM PUBLIC; GRANT USAGE ON SCHEMA lease TO app_role;
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease._grant_usage_as_installer()
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    GRANT USAGE ON SCHEMA lease TO PUBLIC;
END
$$;
ALTER FUNCTION lease._grant_usage_as_installer() OWNER TO @extowner@;
SELECT lease._grant_usage_as_installer();
DROP FUNCTION lease._grant_usage_as_installer();

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
                  AND d.refobjid OPERATOR(pg_catalog.=) 'lease'::pg_catalog.regnamespace
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND s.dbid OPERATOR(pg_catalog.=) (SELECT db.oid FROM pg_catalog.pg_database AS db
                                                      WHERE db.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                  AND s.deptype OPERATOR(pg_catalog.=) 'o'
                  AND s.refobjid OPERATOR(pg_catalog.<>) (SELECT ro.oid FROM pg_catalog.pg_roles AS ro
                                                          WHERE ro.rolname OPERATOR(pg_catalog.=) CURRENT_USER))
    THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease: schema "lease" holds objects of another role',
            HINT    = 'Another role created objects in schema "lease" during the installation; drop them and install again.';
    END IF;
END
$$;
