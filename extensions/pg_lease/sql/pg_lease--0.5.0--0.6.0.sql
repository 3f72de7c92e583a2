-- pg_lease 0.5.0 -> 0.6.0: features for fleets, and epochs that survive failover (docs/SEMANTICS.md
-- §3, §8, §12, §13; ADR 0006).
--
-- Added: lease data (acquire and renew take `data`, at most 8192 bytes of text; inspect and list
--        return it; release clears it); lease.renew_many (one renewal for many grants of one owner,
--        never waiting for a row lock: `busy`); lease.watch and the `pg_lease_changed` notification
--        (observers of a key's holder are woken by its grants, releases and changes of data);
--        semaphores (lease.acquire_slot, lease.slot_key, lease.list_slots,
--        lease.register_slot_waiter: at most max_holders holders, each slot an ordinary lease).
-- Changed: every new grant's epoch is at least (t - 1) * 2^40 on WAL timeline t (unchanged on
--          timeline 1, a server never promoted): after a promotion no epoch goes back. An acquire
--          that returns the caller's existing grant writes its row (a no-op update), so that its
--          commit waits for a synchronous standby. purge keeps watched keys.
--          lease.acquire, lease.renew, lease.inspect and lease.list are dropped and created again
--          (a new parameter with a default, or a new result column): calls keep working and their
--          EXECUTE privileges are kept, but objects of yours that depend on them (views, SQL
--          functions with bodies) must be recreated.
-- Epochs, grants and every other state are kept.

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.6.0'" to load this file. \quit

ALTER TABLE lease.leases ADD COLUMN data text, ADD COLUMN watched_until timestamptz;

-- acquire, renew, inspect and list are dropped and created anew (a new parameter, a new result
-- column) and keep the privileges they had (as in 0.3.0): their ACLs, as text ('' for the defaults),
-- for the end of this script (transaction-local settings).
SELECT pg_catalog.set_config('pg_lease.upgrade_acl_' OPERATOR(pg_catalog.||) f.name,
                             COALESCE(p.proacl::pg_catalog.text, ''), true)
  FROM (VALUES ('acquire', 'lease.acquire(text, text, interval, interval)'),
               ('renew', 'lease.renew(text, text, bigint, interval)'),
               ('inspect', 'lease.inspect(text)'),
               ('list', 'lease.list(text)')) AS f(name, signature),
       pg_catalog.pg_proc AS p
 WHERE p.oid OPERATOR(pg_catalog.=) f.signature::pg_catalog.regprocedure;

CREATE FUNCTION lease._data_violations(value text)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN pg_catalog.octet_length(value) > 8192
                THEN ARRAY['data must be at most 8192 bytes (got ' || pg_catalog.octet_length(value) || ')']
                ELSE '{}'::text[] END
$$;
REVOKE ALL ON FUNCTION lease._data_violations(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION lease._raise_invalid_input(fn text, violations text[])
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
                  || 'wait and older_than are in [0, 365 days]; epoch is not NULL; '
                  || 'data is at most 8192 bytes; a semaphore name is at most 1018 bytes and '
                  || 'max_holders and slot are in [1, 10000]; renew_many takes at most 100000 distinct keys.';
END
$$;
DROP FUNCTION lease.acquire(text, text, interval, interval);
CREATE FUNCTION lease.acquire(
    key text, owner text, ttl interval, wait interval DEFAULT interval '0', data text DEFAULT NULL)
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
    v_same_data boolean;         -- the current grant's data is already `data`
    v_watched boolean;           -- someone watches the key: notify pg_lease_changed
BEGIN
    -- The common case first: an owner of 1..1024 bytes, a ttl in (0, 365 days], no wait and data of
    -- at most 8192 bytes (lengths
    -- of durations in seconds, as everywhere: EXTRACT(epoch ...) is date_part's value, exact). The
    -- key needs no check here: an invalid key matches no row, and the path below validates every
    -- argument before it reads or creates a row for a key the UPDATE did not find. (Range tests keep
    -- the expression small: PL/pgSQL sets up each of its operators and functions in every
    -- transaction.)
    IF (pg_catalog.octet_length(acquire.owner) <@ '[1,1024]'::pg_catalog.int4range
        AND EXTRACT(epoch FROM acquire.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND EXTRACT(epoch FROM acquire.wait) = 0
        AND pg_catalog.octet_length(COALESCE(acquire.data, '')) <= 8192) IS NOT TRUE
    THEN
        -- Invalid input (22023, naming every violation), or a blocking acquire.
        IF (acquire.key <> '' AND pg_catalog.octet_length(acquire.key) <= 1024
            AND acquire.owner <> '' AND pg_catalog.octet_length(acquire.owner) <= 1024
            AND pg_catalog.date_part('epoch', acquire.ttl) > 0
            AND pg_catalog.date_part('epoch', acquire.ttl) <= 31536000
            AND pg_catalog.date_part('epoch', acquire.wait) > 0                 -- wait in [0, 365 days]
            AND pg_catalog.date_part('epoch', acquire.wait) <= 31536000
            AND pg_catalog.octet_length(COALESCE(acquire.data, '')) <= 8192) IS NOT TRUE
        THEN
            PERFORM lease._raise_invalid_input('lease.acquire',
                lease._text_violations('key', acquire.key, false, false)
                || lease._text_violations('owner', acquire.owner, false, false)
                || lease._interval_violations('ttl', acquire.ttl, true)
                || lease._interval_violations('wait', acquire.wait, false)
                || lease._data_violations(acquire.data));
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
                  FROM lease.acquire(acquire.key, acquire.owner, acquire.ttl, interval '0', acquire.data) AS a;
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
               -- The next epoch, and never below the current WAL timeline's band (§8: failover).
               epoch = GREATEST(l.epoch + 1,
                   (('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
                        ::pg_catalog.bit(32)::bigint - 1) * 1099511627776),
               expires_at = pg_catalog.clock_timestamp()
                            + pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second',
               waiting = false,
               data = acquire.data
         WHERE l.key = acquire.key
           AND (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
        RETURNING true, l.epoch, l.expires_at,
                  l.expires_at - pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second'
                      >= pg_catalog.clock_timestamp() - interval '1 millisecond',
                  l.watched_until > pg_catalog.clock_timestamp()
             INTO r.acquired, r.epoch, r.expires_at, v_done, v_watched;
        IF v_watched THEN
            PERFORM pg_catalog.pg_notify('pg_lease_changed', acquire.key);
        END IF;
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
        SELECT l.owner, l.epoch, l.expires_at, acquire.data IS NULL OR l.data = acquire.data
          INTO v_owner, v_epoch, v_expires_at, v_same_data
          FROM lease.leases AS l
         WHERE l.key = acquire.key;

        IF FOUND THEN
            IF v_owner IS NULL OR v_expires_at <= pg_catalog.clock_timestamp() THEN
                CONTINUE;                    -- freed or lapsed since the UPDATE: try again
            ELSIF v_owner = acquire.owner THEN
                -- Already ours: idempotent, nothing changes but the data (when given and other).
                -- Still one update of the row, judged again under its lock (if the grant changed
                -- meanwhile, start over): the grant being returned may not be durable yet where
                -- durability is the caller's promise (a synchronous standby) — the call that made
                -- it may have been cancelled or terminated while its commit waited for the standby.
                -- A transaction that wrote WAL waits for the standby at commit (a transaction id
                -- alone would not: PostgreSQL commits those asynchronously), and everything earlier
                -- in the WAL, the grant included, is replicated before the caller hears yes.
                UPDATE lease.leases AS l
                   SET data = COALESCE(acquire.data, l.data)
                 WHERE l.key = acquire.key
                   AND l.owner = acquire.owner
                   AND l.epoch = v_epoch
                   AND l.expires_at > pg_catalog.clock_timestamp()
                RETURNING v_same_data IS NOT TRUE AND l.watched_until > pg_catalog.clock_timestamp(),
                          l.expires_at > pg_catalog.clock_timestamp()
                     INTO v_watched, v_done;
                CONTINUE WHEN NOT FOUND OR NOT v_done;     -- (lapsed while we waited for the row)
                IF v_watched THEN
                    PERFORM pg_catalog.pg_notify('pg_lease_changed', acquire.key);
                END IF;
                r.acquired := true;
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
        INSERT INTO lease.leases AS l (key, owner, epoch, expires_at, data)
        SELECT acquire.key, acquire.owner,
               GREATEST(pg_catalog.max(f.floor) + 1,
                   (('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
                        ::pg_catalog.bit(32)::bigint - 1) * 1099511627776),
               v_now + pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second', acquire.data
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
DROP FUNCTION lease.renew(text, text, bigint, interval);
CREATE FUNCTION lease.renew(
    key text, owner text, epoch bigint, ttl interval, data text DEFAULT NULL)
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
    v_watched boolean;
BEGIN
    -- The ttl and the data are checked first (ttl in (0, 365 days], as in acquire): the UPDATE below
    -- writes them. The other arguments need no check before it (an invalid key, owner or epoch
    -- matches no row); they are checked before any refusal.
    IF (EXTRACT(epoch FROM renew.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND pg_catalog.octet_length(COALESCE(renew.data, '')) <= 8192) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.renew',
            lease._text_violations('key', renew.key, false, false)
            || lease._text_violations('owner', renew.owner, false, false)
            || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || lease._interval_violations('ttl', renew.ttl, true)
            || lease._data_violations(renew.data));
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
        IF v_done AND renew.data IS NULL THEN
            RETURN r;                        -- renewed (the common case)
        END IF;
        IF FOUND THEN
            IF NOT v_done THEN
                v_locked_at := pg_catalog.clock_timestamp();
                IF v_prior <= v_locked_at THEN
                    -- The lease lapsed while we waited for the row lock: undo, report it.
                    UPDATE lease.leases AS l SET expires_at = v_prior WHERE l.key = renew.key;
                    r.status := 'lapsed';
                    r.expires_at := NULL;
                    RETURN r;
                END IF;
                -- We waited, and the lease was still ours: count the ttl from the end of the wait.
                UPDATE lease.leases AS l
                   SET expires_at = v_locked_at
                                    + pg_catalog.date_part('epoch', renew.ttl) * interval '1 second'
                 WHERE l.key = renew.key
                RETURNING l.expires_at INTO r.expires_at;
            END IF;
            IF renew.data IS NOT NULL THEN
                -- Renewed, with new data (we hold the row: no wait).
                UPDATE lease.leases AS l
                   SET data = renew.data
                 WHERE l.key = renew.key
                RETURNING l.watched_until > pg_catalog.clock_timestamp() INTO v_watched;
                IF v_watched THEN
                    PERFORM pg_catalog.pg_notify('pg_lease_changed', renew.key);
                END IF;
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
CREATE OR REPLACE FUNCTION lease.release(key text, owner text, epoch bigint, OUT status text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_waiting boolean;
    v_prior timestamptz;
    v_freed_at timestamptz;
    v_has_data boolean;
    v_watched boolean;
BEGIN
    -- No argument needs a check before the UPDATE: an invalid key, owner or epoch matches no row, and
    -- they are checked before any refusal.
    LOOP
        -- The clock is read inline, as in acquire. The status is 'ok' right away when the release was
        -- stamped no more than 1 ms before the statement's end (it did not wait for the row lock),
        -- the lease was still HELD at the stamp (the moment the statement held the row), no waiter
        -- or watcher needs a notification and there is no data to clear.
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
                            AND l.data IS NULL
                            AND (l.watched_until > pg_catalog.clock_timestamp()) IS NOT TRUE
                       THEN 'ok' END,
                  l.waiting, l.prior_expires_at, l.expires_at, l.data IS NOT NULL,
                  l.watched_until > pg_catalog.clock_timestamp()
             INTO release.status, v_waiting, v_prior, v_freed_at, v_has_data, v_watched;
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
            IF v_has_data THEN
                UPDATE lease.leases AS l SET data = NULL WHERE l.key = release.key;
            END IF;
            IF v_waiting THEN
                PERFORM pg_catalog.pg_notify('pg_lease_released', release.key);
            END IF;
            IF v_watched THEN
                PERFORM pg_catalog.pg_notify('pg_lease_changed', release.key);
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
DROP FUNCTION lease.inspect(text);
CREATE FUNCTION lease.inspect(key text)
RETURNS TABLE (held boolean, owner text, epoch bigint, expires_at timestamptz, data text)
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
               CASE WHEN s.held THEN s.expires_at END,
               CASE WHEN s.held THEN s.data END
          FROM (SELECT l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp() AS held,
                       l.owner, l.epoch, l.expires_at, l.data
                  FROM lease.leases AS l
                 WHERE l.key = inspect.key) AS s;
END
$$;
DROP FUNCTION lease.list(text);
CREATE FUNCTION lease.list(prefix text DEFAULT NULL)
RETURNS TABLE (key text, held boolean, owner text, epoch bigint, expires_at timestamptz, data text)
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
               CASE WHEN s.held THEN s.expires_at END,
               CASE WHEN s.held THEN s.data END
          FROM (SELECT l.key,
                       l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp() AS held,
                       l.owner, l.epoch, l.expires_at, l.data
                  FROM lease.leases AS l
                 WHERE list.prefix IS NULL
                    OR l.key LIKE pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
                           list.prefix, E'\\', E'\\\\'), '%', E'\\%'), '_', E'\\_') || '%') AS s
         ORDER BY s.key;
END
$$;
CREATE FUNCTION lease._check_renew_many_args(owner text, keys text[], epochs bigint[], ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_violations text[] := lease._text_violations('owner', owner, false, false)
                           || lease._interval_violations('ttl', ttl, true);
    v_first integer;
    v_dup text;
BEGIN
    IF keys IS NULL THEN
        v_violations := v_violations || 'keys must not be NULL'::text;
    END IF;
    IF epochs IS NULL THEN
        v_violations := v_violations || 'epochs must not be NULL'::text;
    END IF;
    IF pg_catalog.array_ndims(keys) > 1 OR pg_catalog.array_ndims(epochs) > 1 THEN
        v_violations := v_violations || 'keys and epochs must be one-dimensional arrays'::text;
    END IF;
    IF pg_catalog.cardinality(keys) <> pg_catalog.cardinality(epochs) THEN
        v_violations := v_violations || ('keys and epochs must have the same length (got '
            || pg_catalog.cardinality(keys) || ' and ' || pg_catalog.cardinality(epochs) || ')');
    END IF;
    IF pg_catalog.cardinality(keys) > 100000 THEN
        v_violations := v_violations || ('at most 100000 keys (got ' || pg_catalog.cardinality(keys) || ')');
    END IF;
    SELECT pg_catalog.min(u.i) INTO v_first
      FROM pg_catalog.unnest(keys) WITH ORDINALITY AS u(k, i)
     WHERE u.k IS NULL OR u.k = '' OR pg_catalog.octet_length(u.k) > 1024;
    IF v_first IS NOT NULL THEN
        v_violations := v_violations || lease._text_violations('keys[' || v_first || ']', keys[v_first], false, false);
    END IF;
    SELECT pg_catalog.min(u.i) INTO v_first
      FROM pg_catalog.unnest(epochs) WITH ORDINALITY AS u(e, i)
     WHERE u.e IS NULL;
    IF v_first IS NOT NULL THEN
        v_violations := v_violations || ('epochs[' || v_first || '] must not be NULL');
    END IF;
    SELECT u.k INTO v_dup
      FROM pg_catalog.unnest(keys) AS u(k)
     WHERE u.k IS NOT NULL
     GROUP BY u.k
    HAVING pg_catalog.count(*) > 1
     LIMIT 1;
    IF v_dup IS NOT NULL THEN
        v_violations := v_violations || ('keys must be distinct (' || pg_catalog.quote_literal(v_dup)
                                         || ' appears more than once)');
    END IF;
    IF pg_catalog.cardinality(v_violations) > 0 THEN
        PERFORM lease._raise_invalid_input('lease.renew_many', v_violations);
    END IF;
END
$$;
CREATE FUNCTION lease._renew_many_recheck()
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'LE900', MESSAGE = 'lease.renew_many: recheck';
END
$$;
CREATE FUNCTION lease._renew_many_refusal(key text, owner text, epoch bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_status text;
BEGIN
    IF (key <> '' AND pg_catalog.octet_length(key) <= 1024
        AND owner <> '' AND pg_catalog.octet_length(owner) <= 1024
        AND epoch IS NOT NULL) IS NOT TRUE
    THEN
        PERFORM lease._renew_many_recheck();
    END IF;
    v_status := lease._refusal(key, owner, epoch);
    IF v_status = 'ok' THEN
        PERFORM lease._renew_many_recheck();
    END IF;
    RETURN v_status;
END
$$;
REVOKE ALL ON FUNCTION lease._check_renew_many_args(text, text[], bigint[], interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._renew_many_recheck() FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._renew_many_refusal(text, text, bigint) FROM PUBLIC;

CREATE FUNCTION lease.renew_many(owner text, keys text[], epochs bigint[], ttl interval)
RETURNS TABLE (key text, status text, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan        -- plans for the arrays at hand: their length decides the join
AS $$
DECLARE
    v_n integer := pg_catalog.cardinality(renew_many.keys);
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
    v_rows bigint;
    v_key text;
    v_epoch bigint;
    v_locked boolean;
    r lease.renew_result;
BEGIN
    -- What the statement below relies on: a ttl in (0, 365 days] (it writes it) and two
    -- one-dimensional arrays of the same length (it pairs them up). The owner and each pair need no
    -- check before it (invalid ones match no row; they send the call down the careful path, which
    -- checks everything first).
    IF (EXTRACT(epoch FROM renew_many.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND v_n <= 100000
        AND v_n = pg_catalog.cardinality(renew_many.epochs)
        AND COALESCE(pg_catalog.array_ndims(renew_many.keys), 1) = 1
        AND COALESCE(pg_catalog.array_ndims(renew_many.epochs), 1) = 1) IS NOT TRUE
    THEN
        PERFORM lease._check_renew_many_args(renew_many.owner, renew_many.keys, renew_many.epochs,
                                             renew_many.ttl);
    END IF;

    -- The fast path: one statement renews every pair whose grant is HELD and reports the others'
    -- refusals. Each row is judged as of the moment the statement holds it: its grant was still HELD
    -- then (prior_expires_at, the expiry it replaced, is later than the clock read after the update).
    -- The new expiry is the clock read when the statement reached the row plus ttl: never later than
    -- ttl after the moment it held the row (earlier by a wait for the row lock, which lasts at most
    -- lock_timeout = 10 ms here). A row whose lock it would wait for longer, a grant that lapsed
    -- during such a wait, an invalid pair or a row that changed under the statement abandons the
    -- statement (LE900, rolled back with its subtransaction) for the careful path. The gate on
    -- `checked` makes the statement finish all its work, and so raise whatever it raises, before it
    -- returns its first row.
    BEGIN
        PERFORM pg_catalog.set_config('lock_timeout', '10ms', true);
        RETURN QUERY
            WITH renewed AS (
                UPDATE lease.leases AS l
                   SET expires_at = pg_catalog.clock_timestamp()
                                    + pg_catalog.date_part('epoch', renew_many.ttl) * interval '1 second',
                       prior_expires_at = l.expires_at
                  FROM ROWS FROM (pg_catalog.unnest(renew_many.keys),
                                  pg_catalog.unnest(renew_many.epochs)) AS p(key, epoch)
                 WHERE l.key = p.key
                   AND l.owner = renew_many.owner
                   AND l.epoch = p.epoch
                   AND l.expires_at > pg_catalog.clock_timestamp()
                RETURNING l.key, l.expires_at,
                          CASE WHEN l.prior_expires_at > pg_catalog.clock_timestamp()
                               THEN true
                               ELSE lease._renew_many_recheck() END AS judged
            ), checked AS MATERIALIZED (
                SELECT q.key,
                       CASE WHEN q.copies > 1 THEN lease._renew_many_recheck()::text    -- a key twice
                            ELSE lease._renew_many_refusal(q.key, renew_many.owner, q.epoch) END AS status
                  FROM (SELECT p.key, p.epoch, pg_catalog.count(*) OVER (PARTITION BY p.key) AS copies
                          FROM ROWS FROM (pg_catalog.unnest(renew_many.keys),
                                          pg_catalog.unnest(renew_many.epochs)) AS p(key, epoch)
                         WHERE (SELECT pg_catalog.count(*) FROM renewed) < v_n
                           AND NOT EXISTS (SELECT FROM renewed AS n WHERE n.key = p.key)) AS q
            )
            SELECT n.key, 'ok'::text, n.expires_at
              FROM renewed AS n
             WHERE n.judged AND (SELECT pg_catalog.count(*) FROM checked) >= 0
            UNION ALL
            SELECT c.key, c.status, NULL::timestamptz
              FROM checked AS c;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
        IF v_rows = v_n THEN
            RETURN;                          -- the common case
        END IF;
        -- Fewer rows than pairs: a key appears twice, once renewed. 22023 (the whole call is undone).
        PERFORM lease._check_renew_many_args(renew_many.owner, renew_many.keys, renew_many.epochs,
                                             renew_many.ttl);
        RAISE EXCEPTION 'lease.renew_many: % rows for % pairs', v_rows, v_n;   -- unreachable
    EXCEPTION WHEN SQLSTATE 'LE900' OR lock_not_available THEN
        NULL;                                -- everything the statement did is undone: go on
    END;

    -- The careful path: check everything (22023 before any change), then judge one pair at a time,
    -- taking each row's lock without waiting; lease.renew then judges it under that lock.
    PERFORM lease._check_renew_many_args(renew_many.owner, renew_many.keys, renew_many.epochs,
                                         renew_many.ttl);
    FOR i IN 1 .. COALESCE(v_n, 0) LOOP
        v_key := renew_many.keys[i];
        v_epoch := renew_many.epochs[i];
        SELECT true INTO v_locked
          FROM lease.leases AS l
         WHERE l.key = v_key
           FOR NO KEY UPDATE SKIP LOCKED;
        renew_many.key := v_key;
        IF v_locked THEN
            SELECT n.status, n.expires_at INTO r.status, r.expires_at
              FROM lease.renew(v_key, renew_many.owner, v_epoch, renew_many.ttl) AS n;
            renew_many.status := r.status;
            renew_many.expires_at := r.expires_at;
        ELSIF EXISTS (SELECT FROM lease.leases AS l WHERE l.key = v_key) THEN
            renew_many.status := 'busy';     -- locked by another transaction: not judged
            renew_many.expires_at := NULL;
        ELSE
            renew_many.status := 'not_owner';
            renew_many.expires_at := NULL;
        END IF;
        v_locked := NULL;
        RETURN NEXT;
    END LOOP;
END
$$;
CREATE FUNCTION lease.watch(
    key text,
    OUT held boolean, OUT owner text, OUT epoch bigint, OUT expires_at timestamptz, OUT data text,
    OUT lapses_in interval)
RETURNS record
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF watch.key IS NULL OR watch.key = '' OR pg_catalog.octet_length(watch.key) > 1024 THEN
        PERFORM lease._raise_invalid_input('lease.watch',
            lease._text_violations('key', watch.key, false, false));
    END IF;
    LOOP
        UPDATE lease.leases AS l
           SET watched_until = pg_catalog.clock_timestamp() + interval '1 hour'
         WHERE l.key = watch.key
           AND (l.watched_until IS NULL
                OR l.watched_until < pg_catalog.clock_timestamp() + interval '30 minutes');
        SELECT s.held,
               CASE WHEN s.held THEN s.owner END,
               s.epoch,
               CASE WHEN s.held THEN s.expires_at END,
               CASE WHEN s.held THEN s.data END,
               CASE WHEN s.held THEN GREATEST(s.expires_at - pg_catalog.clock_timestamp(), interval '0') END
          INTO watch.held, watch.owner, watch.epoch, watch.expires_at, watch.data, watch.lapses_in
          FROM (SELECT l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp() AS held,
                       l.owner, l.epoch, l.expires_at, l.data
                  FROM lease.leases AS l
                 WHERE l.key = watch.key) AS s;
        IF FOUND THEN
            RETURN;
        END IF;
        -- No row: create a FREE one (as acquire creates keys: above every purged epoch).
        PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR KEY SHARE;
        INSERT INTO lease.leases AS l (key, owner, epoch, expires_at, watched_until)
        SELECT watch.key, NULL, pg_catalog.max(f.floor), pg_catalog.clock_timestamp(),
               pg_catalog.clock_timestamp() + interval '1 hour'
          FROM lease.epoch_floor AS f
        ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
    END LOOP;
END
$$;
CREATE TYPE lease.slot_result AS (acquired boolean, slot integer, key text, epoch bigint, expires_at timestamptz);

CREATE FUNCTION lease._semaphore_violations(semaphore text)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.array_remove(ARRAY[
        CASE WHEN semaphore IS NULL THEN 'semaphore must not be NULL' END,
        CASE WHEN semaphore = '' THEN 'semaphore must not be empty' END,
        CASE WHEN pg_catalog.octet_length(semaphore) > 1018
             THEN 'semaphore must be at most 1018 bytes (got ' || pg_catalog.octet_length(semaphore) || ')' END
    ], NULL)
$$;
CREATE FUNCTION lease._slot_count_violations(name text, value integer)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN value IS NULL THEN ARRAY[name || ' must not be NULL']
                WHEN value < 1 OR value > 10000 THEN ARRAY[name || ' must be in [1, 10000] (got ' || value || ')']
                ELSE '{}'::text[] END
$$;
REVOKE ALL ON FUNCTION lease._semaphore_violations(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._slot_count_violations(text, integer) FROM PUBLIC;

CREATE FUNCTION lease.slot_key(semaphore text, slot integer)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SECURITY DEFINER                 -- its 22023 goes through the lease._* helpers, closed to callers
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (semaphore <> '' AND pg_catalog.octet_length(semaphore) <= 1018
        AND slot >= 1 AND slot <= 10000) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.slot_key',
            lease._semaphore_violations(semaphore) || lease._slot_count_violations('slot', slot));
    END IF;
    RETURN semaphore || '#' || slot;
END
$$;
CREATE FUNCTION lease.acquire_slot(
    semaphore text, owner text, ttl interval, max_holders integer,
    wait interval DEFAULT interval '0', data text DEFAULT NULL)
RETURNS lease.slot_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.slot_result;
    v_prefix text := acquire_slot.semaphore || '#';
    v_len integer := pg_catalog.length(acquire_slot.semaphore) + 1;     -- characters, for substr
    v_held integer;
    v_mine integer;
    v_taken integer[];
    v_slot integer;
    v_next timestamptz;
    v_now timestamptz;
    v_deadline timestamptz;
BEGIN
    IF (acquire_slot.semaphore <> '' AND pg_catalog.octet_length(acquire_slot.semaphore) <= 1018
        AND acquire_slot.owner <> '' AND pg_catalog.octet_length(acquire_slot.owner) <= 1024
        AND pg_catalog.date_part('epoch', acquire_slot.ttl) > 0
        AND pg_catalog.date_part('epoch', acquire_slot.ttl) <= 31536000
        AND acquire_slot.max_holders >= 1 AND acquire_slot.max_holders <= 10000
        AND pg_catalog.date_part('epoch', acquire_slot.wait) >= 0
        AND pg_catalog.date_part('epoch', acquire_slot.wait) <= 31536000
        AND pg_catalog.octet_length(COALESCE(acquire_slot.data, '')) <= 8192) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.acquire_slot',
            lease._semaphore_violations(acquire_slot.semaphore)
            || lease._text_violations('owner', acquire_slot.owner, false, false)
            || lease._interval_violations('ttl', acquire_slot.ttl, true)
            || lease._slot_count_violations('max_holders', acquire_slot.max_holders)
            || lease._interval_violations('wait', acquire_slot.wait, false)
            || lease._data_violations(acquire_slot.data));
    END IF;

    IF pg_catalog.date_part('epoch', acquire_slot.wait) > 0 THEN
        -- Blocking, as acquire: each attempt in a subtransaction, rolled back when refused.
        v_deadline := pg_catalog.clock_timestamp()
                      + pg_catalog.date_part('epoch', acquire_slot.wait) * interval '1 second';
        LOOP
            BEGIN
                r := lease.acquire_slot(acquire_slot.semaphore, acquire_slot.owner, acquire_slot.ttl,
                                        acquire_slot.max_holders, interval '0', acquire_slot.data);
                IF r.acquired THEN
                    RETURN r;
                END IF;
                RAISE no_data_found;
            EXCEPTION WHEN no_data_found THEN
                NULL;
            END;
            SELECT pg_catalog.count(*), pg_catalog.min(l.expires_at) INTO v_held, v_next
              FROM lease.leases AS l
             WHERE l.key >= v_prefix AND l.key < acquire_slot.semaphore || '$'
               AND pg_catalog.substr(l.key, v_len + 1) ~ '^[1-9][0-9]{0,4}$'
               AND l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp();
            v_now := pg_catalog.clock_timestamp();
            CONTINUE WHEN v_held < acquire_slot.max_holders;     -- a slot freed since the attempt
            IF v_now >= v_deadline THEN
                RAISE EXCEPTION USING
                    ERRCODE = '57014',
                    MESSAGE = 'lease.acquire_slot: wait bound exceeded for semaphore '
                              || pg_catalog.quote_literal(acquire_slot.semaphore),
                    DETAIL  = v_held || ' holders; the first grant lapses at ' || v_next || '.',
                    HINT    = 'Retry later, or wait longer.';
            END IF;
            PERFORM pg_catalog.pg_sleep(pg_catalog.date_part('epoch', LEAST(interval '50 milliseconds',
                COALESCE(v_next - v_now, interval '0'), v_deadline - v_now)));
        END LOOP;
    END IF;

    -- The semaphore's slots now: how many are held, the owner's, and which are taken. A plain read.
    SELECT pg_catalog.count(*) FILTER (WHERE s.held),
           pg_catalog.min(s.slot) FILTER (WHERE s.held AND s.owner = acquire_slot.owner),
           pg_catalog.array_agg(s.slot) FILTER (WHERE s.held)
      INTO v_held, v_mine, v_taken
      FROM (SELECT pg_catalog.substr(l.key, v_len + 1)::integer AS slot, l.owner,
                   l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp() AS held
              FROM lease.leases AS l
             WHERE l.key >= v_prefix AND l.key < acquire_slot.semaphore || '$'
               AND pg_catalog.substr(l.key, v_len + 1) ~ '^[1-9][0-9]{0,4}$') AS s;

    IF v_mine IS NOT NULL THEN
        -- Ours already: the idempotent path of acquire (or a new grant, if it lapsed just now).
        r.slot := v_mine;
        r.key := v_prefix || v_mine;
        SELECT a.acquired, a.epoch, a.expires_at INTO r.acquired, r.epoch, r.expires_at
          FROM lease.acquire(r.key, acquire_slot.owner, acquire_slot.ttl, interval '0', acquire_slot.data) AS a;
        IF r.acquired THEN
            RETURN r;
        END IF;
    ELSIF v_held < acquire_slot.max_holders THEN
        FOR v_slot IN
            SELECT g.g FROM pg_catalog.generate_series(1, acquire_slot.max_holders) AS g(g)
             WHERE g.g <> ALL (COALESCE(v_taken, '{}'::integer[]))
             ORDER BY g.g
        LOOP
            r.slot := v_slot;
            r.key := v_prefix || v_slot;
            SELECT a.acquired, a.epoch, a.expires_at INTO r.acquired, r.epoch, r.expires_at
              FROM lease.acquire(r.key, acquire_slot.owner, acquire_slot.ttl, interval '0', acquire_slot.data) AS a;
            IF r.acquired THEN
                RETURN r;
            END IF;
        END LOOP;
    END IF;
    RETURN (false, NULL, NULL, NULL, NULL)::lease.slot_result;
END
$$;
CREATE FUNCTION lease.list_slots(semaphore text)
RETURNS TABLE (slot integer, key text, held boolean, owner text, epoch bigint, expires_at timestamptz, data text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (list_slots.semaphore <> '' AND pg_catalog.octet_length(list_slots.semaphore) <= 1018) IS NOT TRUE THEN
        PERFORM lease._raise_invalid_input('lease.list_slots', lease._semaphore_violations(list_slots.semaphore));
    END IF;
    RETURN QUERY
        SELECT s.slot, s.key, s.held,
               CASE WHEN s.held THEN s.owner END,
               s.epoch,
               CASE WHEN s.held THEN s.expires_at END,
               CASE WHEN s.held THEN s.data END
          FROM (SELECT pg_catalog.substr(l.key, pg_catalog.length(list_slots.semaphore) + 2)::integer AS slot,
                       l.key,
                       l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp() AS held,
                       l.owner, l.epoch, l.expires_at, l.data
                  FROM lease.leases AS l
                 WHERE l.key >= list_slots.semaphore || '#' AND l.key < list_slots.semaphore || '$'
                   AND pg_catalog.substr(l.key, pg_catalog.length(list_slots.semaphore) + 2)
                       ~ '^[1-9][0-9]{0,4}$') AS s
         ORDER BY s.slot;
END
$$;
CREATE FUNCTION lease.register_slot_waiter(semaphore text, OUT holders integer, OUT lapses_in interval)
RETURNS record
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_len integer := pg_catalog.length(register_slot_waiter.semaphore) + 1;      -- characters, for substr
BEGIN
    IF (register_slot_waiter.semaphore <> ''
        AND pg_catalog.octet_length(register_slot_waiter.semaphore) <= 1018) IS NOT TRUE THEN
        PERFORM lease._raise_invalid_input('lease.register_slot_waiter',
            lease._semaphore_violations(register_slot_waiter.semaphore));
    END IF;
    UPDATE lease.leases AS l
       SET waiting = true
     WHERE l.key >= register_slot_waiter.semaphore || '#' AND l.key < register_slot_waiter.semaphore || '$'
       AND pg_catalog.substr(l.key, v_len + 1) ~ '^[1-9][0-9]{0,4}$'
       AND l.owner IS NOT NULL
       AND l.expires_at > pg_catalog.clock_timestamp()
       AND NOT l.waiting;
    SELECT pg_catalog.count(*)::integer,
           CASE WHEN pg_catalog.count(*) > 0
                THEN GREATEST(pg_catalog.min(l.expires_at) - pg_catalog.clock_timestamp(), interval '0') END
      INTO register_slot_waiter.holders, register_slot_waiter.lapses_in
      FROM lease.leases AS l
     WHERE l.key >= register_slot_waiter.semaphore || '#' AND l.key < register_slot_waiter.semaphore || '$'
       AND pg_catalog.substr(l.key, v_len + 1) ~ '^[1-9][0-9]{0,4}$'
       AND l.owner IS NOT NULL
       AND l.expires_at > pg_catalog.clock_timestamp();
END
$$;
-- ---------------------------------------------------------------------------------------------------
-- Restore the privileges of acquire, renew, inspect and list as they were before this script (see
-- the top): who may execute them, and with grant option.
-- ---------------------------------------------------------------------------------------------------
DO $$
DECLARE
    v_fn text;
    v_acl text;
    v_grant record;
BEGIN
    FOR v_fn, v_acl IN
        VALUES ('lease.acquire(text, text, interval, interval, text)',
                pg_catalog.current_setting('pg_lease.upgrade_acl_acquire')),
               ('lease.renew(text, text, bigint, interval, text)',
                pg_catalog.current_setting('pg_lease.upgrade_acl_renew')),
               ('lease.inspect(text)', pg_catalog.current_setting('pg_lease.upgrade_acl_inspect')),
               ('lease.list(text)', pg_catalog.current_setting('pg_lease.upgrade_acl_list'))
    LOOP
        CONTINUE WHEN v_acl OPERATOR(pg_catalog.=) '';   -- the defaults: the new function has them too
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_fn);
        FOR v_grant IN
            SELECT a.grantee, a.is_grantable
              FROM pg_catalog.aclexplode(v_acl::pg_catalog.aclitem[]) AS a
             WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', v_fn,
                CASE WHEN v_grant.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(v_grant.grantee)) END,
                CASE WHEN v_grant.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lease.purge(older_than interval)
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
           AND (l.watched_until IS NULL OR l.watched_until <= pg_catalog.clock_timestamp())
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

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.6.0'::text $$;

