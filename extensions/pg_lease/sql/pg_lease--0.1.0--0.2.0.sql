-- pg_lease 0.1.0 -> 0.2.0: waiting without polling, and fencing inside the database.
--
-- New: lease.register_waiter(key) and the release notification on channel `pg_lease_released`;
--      lease.fence(key, owner, epoch) with SQLSTATEs LE001 / LE002 / LE003.
-- Changed: acquire clears the waiter mark on every grant; release notifies when the mark is set.
-- Fixed: a call that waited for the key's row lock (held by a fenced or rolled-back transaction)
--        judged the lease as of the start of its wait, because PostgreSQL computes an UPDATE's new
--        row before waiting and keeps it when the locker did not change the row. Now acquire counts
--        the expiry from the end of the wait, and renew/release report `lapsed` (changing nothing)
--        if the lease lapsed while they waited.
-- Changed: ttl, wait and older_than are durations: their length is date_part('epoch', interval)
--        seconds (1 day = 24 h, 1 month = 30 days, 1 year = 365.25 days), bounded before any
--        timestamp arithmetic (no overflow from components that cancel out) and added to the clock
--        as seconds (independent of the session's TimeZone and DST). A call reads the clock once
--        for its checks. purge skips rows locked by in-flight transactions (it never waits on a row
--        while holding the epoch-floor lock, so it cannot deadlock with key creation).
-- CREATE EXTENSION pg_lease (default_version 0.2.0) installs 0.1.0 and applies this script; so does
-- the Rust installer. Contract: docs/SEMANTICS.md §3 and §11.

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.2.0'" to load this file. \quit

-- The waiter mark: true once someone registered as waiting for the current grant of the key.
-- Not indexed, so setting it is a HOT update; every grant resets it.
ALTER TABLE lease.leases ADD COLUMN waiting boolean NOT NULL DEFAULT false;

-- The expiry before the last renew or release, written in the same update. It lets a renew or
-- release that waited for the row lock judge the lease as of the end of its wait (see renew).
ALTER TABLE lease.leases ADD COLUMN prior_expires_at timestamptz;

-- ---------------------------------------------------------------------------------------------------
-- lease.acquire: as in 0.1.0, and a grant clears the waiter mark (waiters of the previous grant
-- re-register if they lose the race for the key). A blocking acquire (wait > 0) runs each attempt as a
-- non-blocking acquire in a subtransaction and rolls a refused attempt back before sleeping, so it
-- never sleeps holding a row lock.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease.acquire(
    key text, owner text, ttl interval, wait interval DEFAULT interval '0',
    OUT acquired boolean, OUT epoch bigint, OUT expires_at timestamptz)
RETURNS record
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ttl_s double precision := pg_catalog.date_part('epoch', acquire.ttl);    -- NULL, ±Infinity, or s
    v_wait_s double precision := pg_catalog.date_part('epoch', acquire.wait);
    v_ttl interval;
    v_deadline timestamptz;
    v_now timestamptz;
    v_locked_at timestamptz;
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
BEGIN
    IF acquire.key IS NULL OR acquire.key = '' OR pg_catalog.octet_length(acquire.key) > 1024
       OR acquire.owner IS NULL OR acquire.owner = '' OR pg_catalog.octet_length(acquire.owner) > 1024
       OR v_ttl_s IS NULL OR NOT (v_ttl_s > 0 AND v_ttl_s <= 31536000)           -- (0, 365 days]
       OR v_wait_s IS NULL OR NOT (v_wait_s >= 0 AND v_wait_s <= 31536000)       -- [0, 365 days]
    THEN
        PERFORM lease._raise_invalid_input('lease.acquire',
            lease._text_violations('key', acquire.key, false, false)
            || lease._text_violations('owner', acquire.owner, false, false)
            || lease._interval_violations('ttl', acquire.ttl, true)
            || lease._interval_violations('wait', acquire.wait, false));
    END IF;
    v_ttl := v_ttl_s * interval '1 second';
    IF v_wait_s > 0 THEN
        v_deadline := pg_catalog.clock_timestamp() + v_wait_s * interval '1 second';
    END IF;

    IF v_deadline IS NOT NULL THEN
        -- Blocking: each attempt is a non-blocking acquire in a subtransaction. A refused attempt is
        -- rolled back, so the sleep below holds no row lock (PostgreSQL keeps the row lock of an
        -- UPDATE whose re-check failed after it raced a concurrent change of the row).
        LOOP
            BEGIN
                SELECT a.acquired, a.epoch, a.expires_at
                  INTO acquire.acquired, acquire.epoch, acquire.expires_at
                  FROM lease.acquire(acquire.key, acquire.owner, acquire.ttl) AS a;
                IF acquire.acquired THEN
                    RETURN;
                END IF;
                RAISE no_data_found;             -- roll back the refused attempt and its locks
            EXCEPTION WHEN no_data_found THEN
                NULL;
            END;
            -- Held by another owner (as of a moment ago): sleep to the next poll, but never past the
            -- holder's expiry or our deadline. A plain read, no lock.
            SELECT l.expires_at INTO v_expires_at
              FROM lease.leases AS l
             WHERE l.key = acquire.key AND l.owner IS NOT NULL;
            v_now := pg_catalog.clock_timestamp();
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
        -- The clock is read inline (not from v_now) so that PostgreSQL's re-check of a row changed
        -- by a concurrent commit re-reads it; v_now marks when this statement began, for the test
        -- after the loop.
        v_now := pg_catalog.clock_timestamp();
        UPDATE lease.leases AS l
           SET owner = acquire.owner,
               epoch = l.epoch + 1,
               expires_at = pg_catalog.clock_timestamp() + v_ttl,
               waiting = false
         WHERE l.key = acquire.key
           AND (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
        RETURNING true, l.epoch, l.expires_at, pg_catalog.clock_timestamp()
             INTO acquire.acquired, acquire.epoch, acquire.expires_at, v_locked_at;
        EXIT WHEN FOUND;                     -- granted

        -- Not grantable: held (by us or another owner), or no row at all. A plain read, no lock.
        SELECT l.owner, l.epoch, l.expires_at INTO v_owner, v_epoch, v_expires_at
          FROM lease.leases AS l
         WHERE l.key = acquire.key;

        IF FOUND THEN
            IF v_owner IS NULL OR v_expires_at <= pg_catalog.clock_timestamp() THEN
                CONTINUE;                    -- freed or lapsed since the UPDATE: try again
            ELSIF v_owner = acquire.owner THEN
                acquire.acquired := true;    -- already ours: idempotent, nothing changes
                acquire.epoch := v_epoch;
                acquire.expires_at := v_expires_at;
            ELSE
                acquire.acquired := false;   -- held by another owner
                acquire.epoch := NULL;
                acquire.expires_at := NULL;
            END IF;
            RETURN;
        END IF;

        -- No row: the key is new (or was purged). Create it above the epoch floor. The KEY SHARE lock on
        -- the sentinel waits out a running purge, so the floor read below includes what it removed.
        PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR KEY SHARE;
        v_now := pg_catalog.clock_timestamp();
        INSERT INTO lease.leases AS l (key, owner, epoch, expires_at)
        SELECT acquire.key, acquire.owner, pg_catalog.max(f.floor) + 1, v_now + v_ttl
          FROM lease.epoch_floor AS f
        ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING
        RETURNING true, l.epoch, l.expires_at, pg_catalog.clock_timestamp()
             INTO acquire.acquired, acquire.epoch, acquire.expires_at, v_locked_at;
        EXIT WHEN FOUND;                     -- granted
        -- Another session created the key first: judge its row on the next turn.
    END LOOP;

    -- Granted, by the UPDATE or the INSERT. If the statement waited for the row (a locker that
    -- changed nothing, or rolled back; a concurrent creator that rolled back), the grant stands — a
    -- FREE, LAPSED or absent key stays so — but its ttl counts from the end of the wait.
    IF v_locked_at - v_now > interval '1 millisecond' THEN
        UPDATE lease.leases AS l
           SET expires_at = v_locked_at + v_ttl
         WHERE l.key = acquire.key
        RETURNING l.expires_at INTO acquire.expires_at;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.renew: as in 0.1.0, judged as of the moment the call holds the key's row. If it had to wait
-- for the row lock and the lease lapsed meanwhile, it undoes its update and reports `lapsed`.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease.renew(
    key text, owner text, epoch bigint, ttl interval,
    OUT status text, OUT expires_at timestamptz)
RETURNS record
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ttl_s double precision := pg_catalog.date_part('epoch', renew.ttl);      -- NULL, ±Infinity, or s
    v_ttl interval;
    v_now timestamptz;
    v_locked_at timestamptz;
    v_prior timestamptz;
BEGIN
    IF renew.key IS NULL OR renew.key = '' OR pg_catalog.octet_length(renew.key) > 1024
       OR renew.owner IS NULL OR renew.owner = '' OR pg_catalog.octet_length(renew.owner) > 1024
       OR renew.epoch IS NULL
       OR v_ttl_s IS NULL OR NOT (v_ttl_s > 0 AND v_ttl_s <= 31536000)           -- (0, 365 days]
    THEN
        PERFORM lease._raise_invalid_input('lease.renew',
            lease._text_violations('key', renew.key, false, false)
            || lease._text_violations('owner', renew.owner, false, false)
            || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || lease._interval_violations('ttl', renew.ttl, true));
    END IF;
    v_ttl := v_ttl_s * interval '1 second';

    LOOP
        -- Clock inline, as in acquire: a re-check after a concurrent commit re-reads it.
        v_now := pg_catalog.clock_timestamp();
        UPDATE lease.leases AS l
           SET expires_at = pg_catalog.clock_timestamp() + v_ttl,
               prior_expires_at = l.expires_at
         WHERE l.key = renew.key
           AND l.owner = renew.owner
           AND l.epoch = renew.epoch
           AND l.expires_at > pg_catalog.clock_timestamp()
        RETURNING 'ok', l.expires_at, l.prior_expires_at, pg_catalog.clock_timestamp()
             INTO renew.status, renew.expires_at, v_prior, v_locked_at;
        IF FOUND THEN
            IF v_prior <= v_locked_at THEN
                -- The lease lapsed while we waited for the row lock: undo, report it.
                UPDATE lease.leases AS l SET expires_at = v_prior WHERE l.key = renew.key;
                renew.status := 'lapsed';
                renew.expires_at := NULL;
            ELSIF v_locked_at - v_now > interval '1 millisecond' THEN
                -- We waited, and the lease was still ours: count the ttl from now.
                UPDATE lease.leases AS l
                   SET expires_at = v_locked_at + v_ttl
                 WHERE l.key = renew.key
                RETURNING l.expires_at INTO renew.expires_at;
            END IF;
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
-- lease.release: as in 0.1.0 (judged as of the moment the call holds the row, like renew), and when
-- a waiter is registered for the released grant, sends
-- pg_notify('pg_lease_released', key), delivered when the release commits. An uncontended release
-- sends nothing.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease.release(key text, owner text, epoch bigint, OUT status text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_waiting boolean;
    v_locked_at timestamptz;
    v_prior timestamptz;
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
        -- Clock inline, as in acquire: a re-check after a concurrent commit re-reads it.
        UPDATE lease.leases AS l
           SET owner = NULL,
               epoch = l.epoch + 1,
               expires_at = pg_catalog.clock_timestamp(),
               prior_expires_at = l.expires_at
         WHERE l.key = release.key
           AND l.owner = release.owner
           AND l.epoch = release.epoch
           AND l.expires_at > pg_catalog.clock_timestamp()
        RETURNING l.waiting, l.prior_expires_at, pg_catalog.clock_timestamp()
             INTO v_waiting, v_prior, v_locked_at;
        IF FOUND THEN
            IF v_prior <= v_locked_at THEN
                -- The lease lapsed while we waited for the row lock: undo, report it.
                UPDATE lease.leases AS l
                   SET owner = release.owner, epoch = release.epoch, expires_at = v_prior
                 WHERE l.key = release.key;
                release.status := 'lapsed';
                RETURN;
            END IF;
            IF v_waiting THEN
                PERFORM pg_catalog.pg_notify('pg_lease_released', release.key);
            END IF;
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
        PERFORM lease._raise_invalid_input('lease.fence',
            lease._text_violations('key', fence.key, false, false)
            || lease._text_violations('owner', fence.owner, false, false)
            || CASE WHEN fence.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END);
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
-- Violations of a duration argument (error paths only). A duration's length is
-- date_part('epoch', value) seconds, as the public functions judge it. positive: ttl (> 0);
-- otherwise wait/older_than (>= 0). All are at most 365 days.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease._interval_violations(name text, value interval, positive boolean)
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

-- ---------------------------------------------------------------------------------------------------
-- lease.purge: as in 0.1.0, with older_than a duration, and skipping rows that an in-flight
-- transaction has locked (their state is about to change; the next purge judges them). purge never
-- waits on a lease row while it holds the epoch-floor lock, so it cannot deadlock with a transaction
-- that both holds a lease row and creates a new key.
-- ---------------------------------------------------------------------------------------------------
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
AS $$ SELECT '0.2.0'::text $$;
