-- pg_lease 0.2.0 -> 0.3.0: the same contract at a lower cost per call.
--
-- No behaviour changes (docs/SEMANTICS.md §3-§6). PL/pgSQL sets up every expression it evaluates,
-- and every operator and function in it, anew in each transaction, so a call made once per
-- transaction paid for each small step. Now acquire, renew and release do their common case with
-- one small boolean expression and one statement:
--   * the expression checks only what the statement would write (acquire: owner, ttl, no wait;
--     renew: ttl; release: nothing). An invalid key, owner or epoch matches no row, and every
--     argument is checked (22023, naming each violation, as before) before a refusal is judged or a
--     key is created;
--   * the statement converts ttl inline, and its RETURNING clause says whether the call is done: it
--     did not wait for the row lock (the expiry counts from the clock the statement itself read),
--     the lease did not lapse meanwhile, and (release) no waiter needs a notification. Otherwise the
--     unchanged slower paths run: the lock-wait re-judgement (SEMANTICS §5, D1 in FAILURE-MODEL),
--     refusals, new keys, blocking waits;
--   * acquire and renew return named row types (below) instead of OUT parameters.
-- Measured in docs/BENCHMARKS.md ("What was optimised").

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.3.0'" to load this file. \quit

-- ---------------------------------------------------------------------------------------------------
-- Result types. acquire and renew return these named row types instead of OUT parameters: the
-- columns and their names are the same (SELECT ... FROM lease.acquire(...) reads as before), but
-- PostgreSQL takes a named type's row descriptor from its cache, where it rebuilds the one of OUT
-- parameters from the catalog on every call. A return type cannot change in place, so both
-- functions are dropped and created anew, and keep the privileges they had.
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.acquire_result AS (acquired boolean, epoch bigint, expires_at timestamptz);
CREATE TYPE lease.renew_result AS (status text, expires_at timestamptz);

-- The privileges of the two functions, as text ('' when they are the defaults), for the end of this
-- script (transaction-local settings).
SELECT pg_catalog.set_config('pg_lease.upgrade_acl_acquire', COALESCE(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc AS p
 WHERE p.oid = 'lease.acquire(text, text, interval, interval)'::pg_catalog.regprocedure;
SELECT pg_catalog.set_config('pg_lease.upgrade_acl_renew', COALESCE(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc AS p
 WHERE p.oid = 'lease.renew(text, text, bigint, interval)'::pg_catalog.regprocedure;

DROP FUNCTION lease.acquire(text, text, interval, interval);
DROP FUNCTION lease.renew(text, text, bigint, interval);

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
        IF (renew.key <> '' AND pg_catalog.octet_length(renew.key) <= 1024
            AND renew.owner <> '' AND pg_catalog.octet_length(renew.owner) <= 1024
            AND renew.epoch IS NOT NULL) IS NOT TRUE
        THEN
            PERFORM lease._raise_invalid_input('lease.renew',
                lease._text_violations('key', renew.key, false, false)
                || lease._text_violations('owner', renew.owner, false, false)
                || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END);
        END IF;
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
-- epoch_mismatch, in that precedence. Judged as of the moment the call holds the row, like renew.
-- When a waiter registered for the released grant, sends pg_notify('pg_lease_released', key),
-- delivered when the release commits; an uncontended release sends nothing. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease.release(key text, owner text, epoch bigint, OUT status text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_waiting boolean;
    v_prior timestamptz;
BEGIN
    -- No argument needs a check before the UPDATE: an invalid key, owner or epoch matches no row, and
    -- they are checked before any refusal.
    LOOP
        -- The clock is read inline, as in acquire. The status is 'ok' right away when the lease was
        -- still HELD as the statement held the row and no waiter needs a notification.
        UPDATE lease.leases AS l
           SET owner = NULL,
               epoch = l.epoch + 1,
               expires_at = pg_catalog.clock_timestamp(),
               prior_expires_at = l.expires_at
         WHERE l.key = release.key
           AND l.owner = release.owner
           AND l.epoch = release.epoch
           AND l.expires_at > pg_catalog.clock_timestamp()
        RETURNING CASE WHEN NOT l.waiting AND l.prior_expires_at > pg_catalog.clock_timestamp()
                       THEN 'ok' END,
                  l.waiting, l.prior_expires_at
             INTO release.status, v_waiting, v_prior;
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
            IF v_waiting THEN
                PERFORM pg_catalog.pg_notify('pg_lease_released', release.key);
            END IF;
            release.status := 'ok';
            RETURN;
        END IF;
        -- Nothing released: invalid input first (22023), then the refusal in its precedence.
        IF (release.key <> '' AND pg_catalog.octet_length(release.key) <= 1024
            AND release.owner <> '' AND pg_catalog.octet_length(release.owner) <= 1024
            AND release.epoch IS NOT NULL) IS NOT TRUE
        THEN
            PERFORM lease._raise_invalid_input('lease.release',
                lease._text_violations('key', release.key, false, false)
                || lease._text_violations('owner', release.owner, false, false)
                || CASE WHEN release.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END);
        END IF;
        release.status := lease._refusal(release.key, release.owner, release.epoch);
        IF release.status <> 'ok' THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- Restore the privileges of acquire and renew as they were before this script (see the result
-- types above): who may execute them, and with grant option.
-- ---------------------------------------------------------------------------------------------------
DO $$
DECLARE
    v_fn text;
    v_acl text;
    v_grant record;
BEGIN
    FOR v_fn, v_acl IN
        VALUES ('lease.acquire(text, text, interval, interval)',
                pg_catalog.current_setting('pg_lease.upgrade_acl_acquire')),
               ('lease.renew(text, text, bigint, interval)',
                pg_catalog.current_setting('pg_lease.upgrade_acl_renew'))
    LOOP
        CONTINUE WHEN v_acl = '';                    -- the defaults: the new function has them too
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_fn);
        FOR v_grant IN
            SELECT a.grantee, a.is_grantable
              FROM pg_catalog.aclexplode(v_acl::pg_catalog.aclitem[]) AS a
             WHERE a.privilege_type = 'EXECUTE'
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', v_fn,
                CASE WHEN v_grant.grantee = 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(v_grant.grantee)) END,
                CASE WHEN v_grant.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.3.0'::text $$;
