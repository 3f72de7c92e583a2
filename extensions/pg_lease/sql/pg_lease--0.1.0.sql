-- pg_lease 0.1.0: leases with fencing epochs, in pure SQL and PL/pgSQL.
--
-- The authoritative contract is docs/SEMANTICS.md; the error codes are listed in docs/SQLSTATES.md.
-- In brief: a key is FREE, HELD(owner, epoch, expires_at) or LAPSED (held, but past its expiry by the
-- server clock). Expiry is lazy: every call reads clock_timestamp() and judges the stored row against
-- it; nothing runs in the background. Every call is one atomic statement that commits or rolls back
-- with the caller's transaction. Epochs never go back for a key, not even across lease.purge().
--
-- Every function pins `search_path = pg_catalog, pg_temp` and names every pg_lease object with its
-- schema: schema `lease` belongs to the role that ran CREATE EXTENSION (a trusted extension), while
-- the SECURITY DEFINER functions run as the bootstrap superuser, so they must never look up a name in
-- a schema another role can create objects in.
--
-- This file is installed by CREATE EXTENSION and, by the Rust installer, into databases that have no
-- extension files. For the latter, the installer drops the `\echo` line and every statement that
-- follows a `-- pglease:extension-only` marker line, and substitutes @extowner@.

\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit

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
--
-- Only `key` is indexed, and no call ever changes it: every renew, grant and release is a HOT update.
-- fillfactor 70 leaves room on each page for the new row versions that renewals create.
CREATE TABLE lease.leases (
    key        text COLLATE "C" NOT NULL,
    owner      text,
    epoch      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
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

-- Violations of an interval argument. positive: ttl (> 0); otherwise wait/older_than (>= 0).
-- A ttl whose calendar parts cancel out (e.g. '1 month -30 days') is judged by what it adds to the
-- current server time, so an accepted ttl always yields an expiry in the future.
CREATE FUNCTION lease._interval_violations(name text, value interval, positive boolean)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF value IS NULL THEN
        RETURN ARRAY[name || ' must not be NULL'];
    ELSIF NOT pg_catalog.isfinite(value) THEN
        RETURN ARRAY[name || ' must be finite'];            -- infinite intervals exist since PostgreSQL 17
    ELSIF value > interval '365 days' THEN
        RETURN ARRAY[name || ' must be at most 365 days'];
    ELSIF positive AND (value <= interval '0' OR v_now + value <= v_now) THEN
        RETURN ARRAY[name || ' must be positive'];
    ELSIF NOT positive AND value < interval '0' THEN
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
REVOKE ALL ON FUNCTION lease._refusal(text, text, bigint) FROM PUBLIC;

-- ---------------------------------------------------------------------------------------------------
-- lease.acquire(key, owner, ttl, wait DEFAULT 0) -> (acquired, epoch, expires_at)
--
-- Grants `key` to `owner` until server time + ttl if the key is FREE, LAPSED or unknown; the new
-- epoch is the key's counter + 1 (an unknown key: the epoch floor + 1, which is 1 unless keys were
-- purged). If `owner` already holds the key, returns its current epoch and expiry unchanged.
-- If another owner holds it: wait = 0 returns (false, NULL, NULL); wait > 0 polls without holding any
-- row lock, sleeping until the earliest of the next poll (50 ms), the holder's expiry and the deadline,
-- and raises 57014 when the deadline passes. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.acquire(
    key text, owner text, ttl interval, wait interval DEFAULT interval '0',
    OUT acquired boolean, OUT epoch bigint, OUT expires_at timestamptz)
RETURNS record
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_deadline timestamptz;
    v_now timestamptz;
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
BEGIN
    IF acquire.key IS NULL OR acquire.key = '' OR pg_catalog.octet_length(acquire.key) > 1024
       OR acquire.owner IS NULL OR acquire.owner = '' OR pg_catalog.octet_length(acquire.owner) > 1024
       OR acquire.ttl IS NULL OR acquire.ttl <= interval '0' OR acquire.ttl > interval '365 days'
       OR acquire.wait IS NULL OR acquire.wait < interval '0' OR acquire.wait > interval '365 days'
       OR (CASE WHEN acquire.ttl <= interval '365 days'         -- calendar parts that cancel out
                THEN pg_catalog.clock_timestamp() + acquire.ttl <= pg_catalog.clock_timestamp() END)
    THEN
        PERFORM lease._raise_invalid_input('lease.acquire',
            lease._text_violations('key', acquire.key, false, false)
            || lease._text_violations('owner', acquire.owner, false, false)
            || lease._interval_violations('ttl', acquire.ttl, true)
            || lease._interval_violations('wait', acquire.wait, false));
    END IF;
    IF acquire.wait > interval '0' THEN
        v_deadline := pg_catalog.clock_timestamp() + acquire.wait;
    END IF;

    LOOP
        -- A FREE or LAPSED key: grant it with the next epoch. The row lock taken here is the only one
        -- acquire ever takes; a concurrent grant makes this UPDATE re-check the row and skip it.
        UPDATE lease.leases AS l
           SET owner = acquire.owner,
               epoch = l.epoch + 1,
               expires_at = pg_catalog.clock_timestamp() + acquire.ttl
         WHERE l.key = acquire.key
           AND (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
        RETURNING true, l.epoch, l.expires_at
             INTO acquire.acquired, acquire.epoch, acquire.expires_at;
        IF FOUND THEN
            RETURN;
        END IF;

        -- Not grantable: held (by us or another owner), or no row at all. A plain read, no lock.
        SELECT l.owner, l.epoch, l.expires_at INTO v_owner, v_epoch, v_expires_at
          FROM lease.leases AS l
         WHERE l.key = acquire.key;

        IF FOUND THEN
            v_now := pg_catalog.clock_timestamp();
            IF v_owner IS NULL OR v_expires_at <= v_now THEN
                CONTINUE;                    -- freed or lapsed since the UPDATE: try again
            ELSIF v_owner = acquire.owner THEN
                acquire.acquired := true;    -- already ours: idempotent, nothing changes
                acquire.epoch := v_epoch;
                acquire.expires_at := v_expires_at;
                RETURN;
            ELSIF v_deadline IS NULL THEN
                acquire.acquired := false;   -- held by another owner, no waiting asked for
                acquire.epoch := NULL;
                acquire.expires_at := NULL;
                RETURN;
            ELSIF v_now >= v_deadline THEN
                RAISE EXCEPTION USING
                    ERRCODE = '57014',
                    MESSAGE = 'lease.acquire: wait bound exceeded for key ' || pg_catalog.quote_literal(acquire.key),
                    DETAIL  = 'The key is held by another owner until ' || v_expires_at || '.',
                    HINT    = 'Retry later, or wait longer than the holder''s remaining time.';
            END IF;
            -- Sleep to the next poll, but never past the holder's expiry or our deadline.
            PERFORM pg_catalog.pg_sleep(pg_catalog.date_part('epoch',
                LEAST(interval '50 milliseconds', v_expires_at - v_now, v_deadline - v_now)));
            CONTINUE;
        END IF;

        -- No row: the key is new (or was purged). Create it above the epoch floor. The KEY SHARE lock on
        -- the sentinel waits out a running purge, so the floor read below includes what it removed.
        PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR KEY SHARE;
        INSERT INTO lease.leases AS l (key, owner, epoch, expires_at)
        SELECT acquire.key, acquire.owner, pg_catalog.max(f.floor) + 1,
               pg_catalog.clock_timestamp() + acquire.ttl
          FROM lease.epoch_floor AS f
        ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING
        RETURNING true, l.epoch, l.expires_at
             INTO acquire.acquired, acquire.epoch, acquire.expires_at;
        IF FOUND THEN
            RETURN;
        END IF;
        -- Another session created the key first: judge its row on the next turn.
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.renew(key, owner, epoch, ttl) -> (status, expires_at)
--
-- Heartbeat: if `owner` holds `key` at `epoch` and it has not lapsed, sets expires_at = server time +
-- ttl (which may shorten the lease) and returns ('ok', expires_at). The epoch never changes.
-- Otherwise changes nothing and returns (status, NULL) with status, in this precedence:
-- not_owner (unknown key, FREE key, or another owner), lapsed, epoch_mismatch. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.renew(
    key text, owner text, epoch bigint, ttl interval,
    OUT status text, OUT expires_at timestamptz)
RETURNS record
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF renew.key IS NULL OR renew.key = '' OR pg_catalog.octet_length(renew.key) > 1024
       OR renew.owner IS NULL OR renew.owner = '' OR pg_catalog.octet_length(renew.owner) > 1024
       OR renew.epoch IS NULL
       OR renew.ttl IS NULL OR renew.ttl <= interval '0' OR renew.ttl > interval '365 days'
       OR (CASE WHEN renew.ttl <= interval '365 days'         -- calendar parts that cancel out
                THEN pg_catalog.clock_timestamp() + renew.ttl <= pg_catalog.clock_timestamp() END)
    THEN
        PERFORM lease._raise_invalid_input('lease.renew',
            lease._text_violations('key', renew.key, false, false)
            || lease._text_violations('owner', renew.owner, false, false)
            || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || lease._interval_violations('ttl', renew.ttl, true));
    END IF;

    LOOP
        UPDATE lease.leases AS l
           SET expires_at = pg_catalog.clock_timestamp() + renew.ttl
         WHERE l.key = renew.key
           AND l.owner = renew.owner
           AND l.epoch = renew.epoch
           AND l.expires_at > pg_catalog.clock_timestamp()
        RETURNING 'ok', l.expires_at INTO renew.status, renew.expires_at;
        IF FOUND THEN
            RETURN;
        END IF;
        renew.status := lease._refusal(renew.key, renew.owner, renew.epoch);
        IF renew.status <> 'ok' THEN
            renew.expires_at := NULL;
            RETURN;
        END IF;
        -- The row changed between the UPDATE and the read (a concurrent commit): judge it again.
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.release(key, owner, epoch) -> (status)
--
-- If `owner` holds `key` at `epoch` and it has not lapsed, frees the key and advances its fencing
-- counter to epoch + 1 (the next grant gets epoch + 2), returning 'ok'. Otherwise changes nothing and
-- returns not_owner, lapsed or epoch_mismatch, in that precedence (as renew). 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.release(key text, owner text, epoch bigint, OUT status text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF release.key IS NULL OR release.key = '' OR pg_catalog.octet_length(release.key) > 1024
       OR release.owner IS NULL OR release.owner = '' OR pg_catalog.octet_length(release.owner) > 1024
       OR release.epoch IS NULL
    THEN
        PERFORM lease._raise_invalid_input('lease.release',
            lease._text_violations('key', release.key, false, false)
            || lease._text_violations('owner', release.owner, false, false)
            || CASE WHEN release.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END);
    END IF;

    LOOP
        UPDATE lease.leases AS l
           SET owner = NULL,
               epoch = l.epoch + 1,
               expires_at = pg_catalog.clock_timestamp()
         WHERE l.key = release.key
           AND l.owner = release.owner
           AND l.epoch = release.epoch
           AND l.expires_at > pg_catalog.clock_timestamp();
        IF FOUND THEN
            release.status := 'ok';
            RETURN;
        END IF;
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
                           list.prefix, '\', '\\'), '%', '\%'), '_', '\_') || '%') AS s
         ORDER BY s.key;
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
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.purge(older_than interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_purged bigint;
    v_max_epoch bigint;
    v_floor bigint;
BEGIN
    IF purge.older_than IS NULL OR purge.older_than < interval '0'
       OR purge.older_than > interval '365 days'
    THEN
        PERFORM lease._raise_invalid_input('lease.purge',
            lease._interval_violations('older_than', purge.older_than, false));
    END IF;

    -- Excludes key creation (FOR KEY SHARE on the sentinel) and other purges until we commit.
    PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR UPDATE;

    WITH gone AS (
        DELETE FROM lease.leases AS l
         WHERE (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
           AND l.expires_at < pg_catalog.clock_timestamp() - purge.older_than
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
AS $$ SELECT '0.1.0'::text $$;

GRANT USAGE ON SCHEMA lease TO PUBLIC;
