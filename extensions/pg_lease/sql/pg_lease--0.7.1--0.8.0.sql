-- pg_lease 0.7.1 -> 0.8.0: a grant belongs to the role that took it (docs/SEMANTICS.md §10.3).
--
-- Added: lease.leases.holder_role, the login role (session_user) of the session that made the
--        current grant; lease.force_release(key), the installing role's (grantable) end of any HELD
--        grant.
-- Changed: lease.renew, lease.renew_many, lease.release and lease.fence refuse with 42501, changing
--          nothing, a HELD grant made by a role the session's login role is neither nor a member
--          of; lease.acquire records the role and returns a grant to its owner only under a role
--          that may act for it (otherwise it is another holder's: not acquired). lease.configure
--          keeps the failover quarantine when its argument is NULL or left out ('0' turns it off).
-- Grants made before the upgrade have no role and keep the rule of 0.7 (the owner string and epoch
-- suffice) until they end. Signatures and privileges of existing functions are unchanged.

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.8.0'" to load this file. \quit

ALTER TABLE lease.leases ADD COLUMN holder_role text;

-- Whether the calling session may act on a grant made by `holder_role`: the grant has no role (made
-- before 0.8.0), or the session's login role is that role or a member of it (superusers are members
-- of every role). A role that no longer exists has no members.
CREATE FUNCTION lease._may_act_for(holder_role text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT holder_role IS NULL
        OR holder_role = SESSION_USER
        OR COALESCE((SELECT pg_catalog.pg_has_role(SESSION_USER, r.oid, 'MEMBER')
                       FROM pg_catalog.pg_roles AS r
                      WHERE r.rolname = holder_role), false)
$$;

-- Raise 42501: the grant (key, its owner and epoch) was made by another role. Never returns.
CREATE FUNCTION lease._raise_other_role(fn text, key text, holder_role text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = '42501',
        MESSAGE = fn || ': the lease on key ' || pg_catalog.quote_literal(key) || ' was granted to role '
                  || pg_catalog.quote_ident(holder_role),
        DETAIL  = 'The session''s role ' || pg_catalog.quote_ident(SESSION_USER)
                  || ' is neither that role nor a member of it.',
        HINT    = 'Renew, release and fence a lease as the role that acquired it (or a member of it); '
                  || 'an operator can end it with lease.force_release.';
END
$$;

DROP FUNCTION lease._refusal(text, text, bigint);

-- Why a renew/release of (key, owner, epoch) cannot succeed now, in the documented precedence:
-- not_owner (no row, FREE, or another owner; a LAPSED row still names its last owner), then lapsed,
-- then epoch_mismatch; raises 42501 (naming `fn`) when the grant is current but was made by a role
-- the session may not act for. Returns 'ok' when the state would let the call succeed: the caller
-- retries, the session's role being allowed.
CREATE FUNCTION lease._refusal(fn text, key text, owner text, epoch bigint)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
    v_role text;
BEGIN
    SELECT l.owner, l.epoch, l.expires_at, l.holder_role INTO v_owner, v_epoch, v_expires_at, v_role
      FROM lease.leases AS l
     WHERE l.key = _refusal.key;
    IF NOT FOUND OR v_owner IS NULL OR v_owner <> _refusal.owner THEN
        RETURN 'not_owner';
    ELSIF v_expires_at <= pg_catalog.clock_timestamp() THEN
        RETURN 'lapsed';
    ELSIF v_epoch <> _refusal.epoch THEN
        RETURN 'epoch_mismatch';
    ELSIF NOT lease._may_act_for(v_role) THEN
        PERFORM lease._raise_other_role(fn, _refusal.key, v_role);
    END IF;
    RETURN 'ok';
END
$$;

REVOKE ALL ON FUNCTION lease._refusal(text, text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._may_act_for(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._raise_other_role(text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION lease.acquire(
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
    v_timeline bigint;           -- the server's WAL timeline
    v_floor bigint;              -- no grant's epoch is below it: the timeline band and the min epoch (§8)
    v_max_ttl interval;          -- the installing role's ttl cap (lease.configure); NULL: none
    v_quarantine interval;       -- the failover quarantine's length (lease.configure); NULL: off
    v_quarantined timestamptz;   -- in a failover quarantine until then: no new grant (§8.4)
    v_role text;                 -- the role of the current grant
BEGIN
    -- The common case first, in one expression: an owner of 1..1024 bytes, a ttl in (0, 365 days], no
    -- wait, data of at most 8192 bytes (lengths of durations in seconds, as everywhere: EXTRACT(epoch
    -- ...) is date_part's value, exact), WAL timeline 1 and nothing configured. The key needs no
    -- check here: an invalid key matches no row, and the path below validates every argument before
    -- it reads or creates a row for a key the UPDATE did not find. (Range tests keep the expression
    -- small: PL/pgSQL sets up each of its operators and functions in every transaction.)
    -- The timeline is in the name of the WAL file being written (8 hex digits), which changes at the
    -- moment of a promotion. On timeline 1 (a server never promoted) the band is 0; with nothing
    -- configured there is no min epoch, ttl cap or quarantine: the floor is the key's own counter.
    -- "Nothing configured" is an empty lease.settings on disk, read without a scan: a settings row,
    -- committed or not, occupies a page, so a size of 0 means no row, and any other size (a row, or
    -- a page a deleted row left behind) takes the path below, which reads the settings.
    IF (pg_catalog.octet_length(acquire.owner) <@ '[1,1024]'::pg_catalog.int4range
        AND EXTRACT(epoch FROM acquire.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND EXTRACT(epoch FROM acquire.wait) = 0
        AND pg_catalog.octet_length(COALESCE(acquire.data, '')) <= 8192
        AND pg_catalog.starts_with(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), '00000001')
        AND pg_catalog.pg_relation_size('lease.settings'::pg_catalog.regclass) = 0) IS NOT TRUE
    THEN
        -- The timeline, the least epoch of a grant on it, and the installing role's settings. The
        -- band of timeline t is (t - 1) * 2^40; a min epoch set on timeline t0 rises by 2^40 on
        -- every later timeline, so that it stays above what the old timeline granted (§8.5).
        v_timeline := lease._timeline();
        SELECT GREATEST((v_timeline - 1) * 1099511627776,
                        s.min_epoch + GREATEST(v_timeline - s.min_epoch_timeline, 0) * 1099511627776),
               s.max_ttl, s.failover_quarantine
          INTO v_floor, v_max_ttl, v_quarantine
          FROM (SELECT) AS t
          LEFT JOIN lease.settings AS s ON true;
        IF v_quarantine IS NOT NULL THEN
            v_quarantined := lease._quarantine_end(v_timeline, v_quarantine, true);
            IF v_quarantined <= pg_catalog.clock_timestamp() THEN
                v_quarantined := NULL;       -- over
            END IF;
        END IF;

        -- Invalid input: 22023, naming every violation, before anything is read or written.
        IF (acquire.key <> '' AND pg_catalog.octet_length(acquire.key) <= 1024
            AND acquire.owner <> '' AND pg_catalog.octet_length(acquire.owner) <= 1024
            AND pg_catalog.date_part('epoch', acquire.ttl) > 0
            AND pg_catalog.date_part('epoch', acquire.ttl) <= 31536000
            AND pg_catalog.date_part('epoch', acquire.wait) >= 0                -- wait in [0, 365 days]
            AND pg_catalog.date_part('epoch', acquire.wait) <= 31536000
            AND pg_catalog.octet_length(COALESCE(acquire.data, '')) <= 8192
            AND (v_max_ttl IS NULL OR pg_catalog.date_part('epoch', acquire.ttl)
                                      <= pg_catalog.date_part('epoch', v_max_ttl))) IS NOT TRUE
        THEN
            PERFORM lease._raise_invalid_input('lease.acquire',
                lease._text_violations('key', acquire.key, false, false)
                || lease._text_violations('owner', acquire.owner, false, false)
                || lease._interval_violations('ttl', acquire.ttl, true)
                || lease._max_ttl_violations(acquire.ttl, v_max_ttl)
                || lease._interval_violations('wait', acquire.wait, false)
                || lease._data_violations(acquire.data));
        END IF;

        IF pg_catalog.date_part('epoch', acquire.wait) > 0 THEN
            -- Blocking: each attempt is a non-blocking acquire in a subtransaction. A refused attempt
            -- is rolled back, so the sleep below holds no row lock (PostgreSQL keeps the row lock of
            -- an UPDATE whose re-check failed after it raced a concurrent change of the row).
            v_deadline := pg_catalog.clock_timestamp()
                          + pg_catalog.date_part('epoch', acquire.wait) * interval '1 second';
            LOOP
                BEGIN
                    SELECT a.acquired, a.epoch, a.expires_at
                      INTO r.acquired, r.epoch, r.expires_at
                      FROM lease.acquire(acquire.key, acquire.owner, acquire.ttl, interval '0',
                                         acquire.data) AS a;
                    IF r.acquired THEN
                        RETURN r;
                    END IF;
                    RAISE no_data_found;             -- roll back the refused attempt and its locks
                EXCEPTION
                    WHEN no_data_found THEN
                        NULL;
                    WHEN SQLSTATE 'LE004' THEN
                        -- The key is free, but this server is in a failover quarantine.
                        PERFORM lease._pause_in_quarantine('lease.acquire', acquire.key, v_deadline);
                        CONTINUE;
                END;
                -- Held by another owner (as of a moment ago): sleep to the next poll, but never past
                -- the holder's expiry or our deadline. A plain read, no lock. If the key is free by
                -- now (released or lapsed since the attempt), try again at once, deadline or not: the
                -- wait runs out (57014) only on a key that another owner held at the last attempt and
                -- still holds after the deadline.
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
                        MESSAGE = 'lease.acquire: wait bound exceeded for key '
                                  || pg_catalog.quote_literal(acquire.key),
                        DETAIL  = 'The key is held by another owner until ' || v_expires_at || '.',
                        HINT    = 'Retry later, or wait longer than the holder''s remaining time.';
                END IF;
                PERFORM pg_catalog.pg_sleep(pg_catalog.date_part('epoch', LEAST(interval '50 milliseconds',
                    COALESCE(v_expires_at - v_now, interval '0'), v_deadline - v_now)));
            END LOOP;
        END IF;
    END IF;

    LOOP
        -- A FREE or LAPSED key: grant it with the next epoch. The row lock taken here is the only one
        -- acquire ever takes; a concurrent grant makes this UPDATE re-check the row and skip it.
        -- (Not during a failover quarantine: then only the caller's own grant is returned, below.)
        -- The clock is read inline, so that PostgreSQL's re-check of a row changed by a concurrent
        -- commit re-reads it. v_done: the expiry was computed by a clock read no more than 1 ms before
        -- the statement held the row, so the statement did not wait for the row lock.
        UPDATE lease.leases AS l
           SET owner = acquire.owner,
               -- The next epoch, and never below the floor (§8: the timeline band, the min epoch).
               epoch = GREATEST(l.epoch + 1, v_floor),
               expires_at = pg_catalog.clock_timestamp()
                            + pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second',
               waiting = false,
               data = acquire.data,
               holder_role = SESSION_USER
         WHERE l.key = acquire.key
           AND (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
           AND v_quarantined IS NULL
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
        SELECT l.owner, l.epoch, l.expires_at, acquire.data IS NULL OR l.data = acquire.data, l.holder_role
          INTO v_owner, v_epoch, v_expires_at, v_same_data, v_role
          FROM lease.leases AS l
         WHERE l.key = acquire.key;

        IF FOUND THEN
            IF v_owner IS NULL OR v_expires_at <= pg_catalog.clock_timestamp() THEN
                IF v_quarantined IS NOT NULL THEN
                    PERFORM lease._raise_quarantined('lease.acquire', acquire.key, v_timeline, v_quarantined);
                END IF;
                CONTINUE;                    -- freed or lapsed since the UPDATE: try again
            ELSIF v_owner = acquire.owner AND lease._may_act_for(v_role) THEN
                -- Already ours: idempotent, nothing changes but the data (when given and other).
                -- (The same owner string under a role the session may not act for is another
                -- holder: refused below.)
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
                   AND l.holder_role IS NOT DISTINCT FROM v_role
                   AND l.expires_at > pg_catalog.clock_timestamp()
                -- The expiry returned is the row's under that lock: a renewal that committed while
                -- this call waited for the row has extended it since the read above.
                RETURNING v_same_data IS NOT TRUE AND l.watched_until > pg_catalog.clock_timestamp(),
                          l.expires_at > pg_catalog.clock_timestamp(), l.expires_at
                     INTO v_watched, v_done, v_expires_at;
                CONTINUE WHEN NOT FOUND OR NOT v_done;     -- (lapsed while we waited for the row)
                IF v_watched THEN
                    PERFORM pg_catalog.pg_notify('pg_lease_changed', acquire.key);
                END IF;
                r.acquired := true;
                r.epoch := v_epoch;
                r.expires_at := v_expires_at;
            ELSE
                r.acquired := false;         -- held by another owner (or role)
                r.epoch := NULL;
                r.expires_at := NULL;
            END IF;
            RETURN r;
        END IF;

        -- No row: the key is new (or was purged). Create it above the epoch floor. The KEY SHARE lock on
        -- the sentinel waits out a running purge, so the floor read below includes what it removed.
        IF v_quarantined IS NOT NULL THEN
            PERFORM lease._raise_quarantined('lease.acquire', acquire.key, v_timeline, v_quarantined);
        END IF;
        PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR KEY SHARE;
        v_now := pg_catalog.clock_timestamp();
        INSERT INTO lease.leases AS l (key, owner, epoch, expires_at, data, holder_role)
        SELECT acquire.key, acquire.owner,
               GREATEST(pg_catalog.max(f.floor) + 1, v_floor),
               v_now + pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second', acquire.data,
               SESSION_USER
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

CREATE OR REPLACE FUNCTION lease.renew(
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
    v_member boolean;            -- the session's role is a member of the grant's role (known after a refusal)
BEGIN
    -- The ttl and the data are checked first (ttl in (0, 365 days], as in acquire, and within the
    -- installing role's cap when one is set): the UPDATE below writes them. The cap is read only when
    -- lease.settings is not empty on disk (see acquire). The other arguments need no check before
    -- the UPDATE (an invalid key, owner or epoch matches no row); they are checked before any refusal.
    IF (EXTRACT(epoch FROM renew.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND pg_catalog.octet_length(COALESCE(renew.data, '')) <= 8192
        AND pg_catalog.pg_relation_size('lease.settings'::pg_catalog.regclass) = 0) IS NOT TRUE
    THEN
        -- Invalid input, or settings to read. (The cap is read in a statement of its own: a function
        -- named in the expression above would be set up in every transaction, called or not.)
        IF (EXTRACT(epoch FROM renew.ttl) <@ '(0,31536000]'::pg_catalog.numrange
            AND pg_catalog.octet_length(COALESCE(renew.data, '')) <= 8192
            AND EXTRACT(epoch FROM renew.ttl) <= lease._ttl_cap_seconds()) IS NOT TRUE
        THEN
            PERFORM lease._raise_invalid_input('lease.renew',
                lease._text_violations('key', renew.key, false, false)
                || lease._text_violations('owner', renew.owner, false, false)
                || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
                || lease._interval_violations('ttl', renew.ttl, true)
                || lease._max_ttl_violations(renew.ttl, (SELECT s.max_ttl FROM lease.settings AS s))
                || lease._data_violations(renew.data));
        END IF;
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
           -- The grant's own role, a grant from before roles, or (found below) a role we are a member of.
           AND (l.holder_role = SESSION_USER OR l.holder_role IS NULL OR v_member)
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
        PERFORM lease._check_grant_args('lease.renew', renew.key, renew.owner, renew.epoch, renew.ttl);
        r.status := lease._refusal('lease.renew', renew.key, renew.owner, renew.epoch);
        IF r.status <> 'ok' THEN
            r.expires_at := NULL;
            RETURN r;
        END IF;
        -- The grant is current and the session may act for its role (a member of it), or the row
        -- changed between the UPDATE and the read (a concurrent commit): judge it again.
        v_member := true;
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
    v_member boolean;            -- as in renew
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
           AND (l.holder_role = SESSION_USER OR l.holder_role IS NULL OR v_member)       -- as in renew
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
        release.status := lease._refusal('lease.release', release.key, release.owner, release.epoch);
        IF release.status <> 'ok' THEN
            RETURN;
        END IF;
        v_member := true;                    -- as in renew
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lease.fence(key text, owner text, epoch bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
    v_role text;
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
    SELECT l.owner, l.epoch, l.expires_at, l.holder_role INTO v_owner, v_epoch, v_expires_at, v_role
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
    ELSIF v_role <> SESSION_USER THEN
        -- Granted to another role: allowed to its members only (42501). (A function is named only
        -- here, so that the common case does not set it up.)
        IF NOT lease._may_act_for(v_role) THEN
            PERFORM lease._raise_other_role('lease.fence', fence.key, v_role);
        END IF;
    END IF;
    RETURN v_expires_at;
END
$$;

CREATE OR REPLACE FUNCTION lease._renew_many_refusal(key text, owner text, epoch bigint)
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
    v_status := lease._refusal('lease.renew_many', key, owner, epoch);
    IF v_status = 'ok' THEN
        PERFORM lease._renew_many_recheck();     -- (a member of the grant's role: lease.renew judges it)
    END IF;
    RETURN v_status;
END
$$;

CREATE OR REPLACE FUNCTION lease.renew_many(owner text, keys text[], epochs bigint[], ttl interval)
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
    -- What the statement below relies on: a ttl in (0, 365 days] and within the installing role's
    -- cap (it writes it) and two one-dimensional arrays of the same length (it pairs them up). The
    -- owner and each pair need no check before it (invalid ones match no row; they send the call down
    -- the careful path, which checks everything first).
    IF (EXTRACT(epoch FROM renew_many.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND pg_catalog.pg_relation_size('lease.settings'::pg_catalog.regclass) = 0      -- see acquire
        AND v_n <= 100000
        AND v_n = pg_catalog.cardinality(renew_many.epochs)
        AND COALESCE(pg_catalog.array_ndims(renew_many.keys), 1) = 1
        AND COALESCE(pg_catalog.array_ndims(renew_many.epochs), 1) = 1) IS NOT TRUE
    THEN
        -- Invalid input (the careful check raises 22023), or settings to read: the cap.
        IF (EXTRACT(epoch FROM renew_many.ttl) <@ '(0,31536000]'::pg_catalog.numrange
            AND EXTRACT(epoch FROM renew_many.ttl) <= lease._ttl_cap_seconds()
            AND v_n <= 100000
            AND v_n = pg_catalog.cardinality(renew_many.epochs)
            AND COALESCE(pg_catalog.array_ndims(renew_many.keys), 1) = 1
            AND COALESCE(pg_catalog.array_ndims(renew_many.epochs), 1) = 1) IS NOT TRUE
        THEN
            PERFORM lease._check_renew_many_args(renew_many.owner, renew_many.keys, renew_many.epochs,
                                                 renew_many.ttl);
        END IF;
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
                   AND (l.holder_role = SESSION_USER OR l.holder_role IS NULL)       -- members: below
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

CREATE OR REPLACE FUNCTION lease.configure(max_ttl interval, failover_quarantine interval DEFAULT NULL)
RETURNS lease.configuration_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_violations text[] := '{}';
    v_timeline bigint := lease._timeline();
    v_was interval;              -- the quarantine before this call
    v_quarantine interval;       -- the quarantine after it
    v_mark bigint;
BEGIN
    -- One configuration at a time (the row lock; a first one waits on the INSERT's key). A read:
    -- nothing is written before the checks below pass.
    SELECT s.failover_quarantine INTO v_was FROM lease.settings AS s FOR UPDATE;
    v_quarantine := CASE WHEN configure.failover_quarantine IS NULL THEN v_was
                         WHEN pg_catalog.date_part('epoch', configure.failover_quarantine) = 0 THEN NULL
                         ELSE configure.failover_quarantine END;

    IF configure.max_ttl IS NOT NULL THEN
        v_violations := v_violations || lease._interval_violations('max_ttl', configure.max_ttl, true);
    END IF;
    IF pg_catalog.date_part('epoch', configure.failover_quarantine) <> 0 THEN
        v_violations := v_violations
            || lease._interval_violations('failover_quarantine', configure.failover_quarantine, true);
    END IF;
    IF v_quarantine IS NOT NULL THEN
        IF configure.max_ttl IS NULL THEN
            v_violations := v_violations || ('failover_quarantine needs max_ttl (a cap on every ttl)'
                || CASE WHEN configure.failover_quarantine IS NULL
                        THEN '; turn the quarantine off with failover_quarantine => ''0'' first' ELSE '' END);
        ELSIF pg_catalog.date_part('epoch', v_quarantine)
              < pg_catalog.date_part('epoch', configure.max_ttl) THEN
            v_violations := v_violations || ('failover_quarantine must be at least max_ttl (got '
                || v_quarantine || ' < ' || configure.max_ttl || ')');
        END IF;
    END IF;
    IF pg_catalog.cardinality(v_violations) > 0 THEN
        PERFORM lease._raise_invalid_input('lease.configure', v_violations);
    END IF;

    IF v_quarantine IS NOT NULL THEN
        IF v_was IS NOT NULL THEN
            -- A quarantine was on: a promotion not yet seen by an acquire starts its quarantine now.
            PERFORM lease._quarantine_end(v_timeline, v_was, true);
        ELSE
            -- Turned on: the current timeline is not a promotion it has to answer for.
            SELECT m.last_value INTO v_mark FROM lease.quarantine_mark AS m;
            IF v_mark / 4294967296 <> v_timeline THEN
                PERFORM pg_catalog.setval('lease.quarantine_mark'::pg_catalog.regclass,
                                          v_timeline * 4294967296);
            END IF;
        END IF;
    END IF;
    INSERT INTO lease.settings AS s (singleton, max_ttl, failover_quarantine)
    VALUES (true, configure.max_ttl, v_quarantine)
    ON CONFLICT ON CONSTRAINT settings_pkey DO UPDATE
       SET max_ttl = EXCLUDED.max_ttl, failover_quarantine = EXCLUDED.failover_quarantine;
    RETURN lease.configuration();
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.force_release(key) -> epoch
--
-- An operator's end of whatever grant of `key` is HELD, whoever made it (a stuck holder): frees it
-- as release does — the key's counter moves to epoch + 1, a registered waiter and a watcher are
-- notified, the data is cleared — and returns the epoch it ended; NULL, changing nothing, when the
-- key is not HELD. The ended holder's next renew or release reports not_owner and its fence raises
-- LE001. Written to the server log. Waits for a transition of the key in flight and judges its
-- result. The installing role's (grantable: the admin right of docs/SEMANTICS.md §11).
-- 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.force_release(key text, OUT epoch bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner text;
    v_role text;
    v_waiting boolean;
    v_watched boolean;
BEGIN
    IF (force_release.key <> '' AND pg_catalog.octet_length(force_release.key) <= 1024) IS NOT TRUE THEN
        PERFORM lease._raise_invalid_input('lease.force_release',
            lease._text_violations('key', force_release.key, false, false));
    END IF;
    -- The row lock waits for a transition in flight; the conditions are judged again on its result.
    SELECT l.owner, l.epoch, l.holder_role INTO v_owner, force_release.epoch, v_role
      FROM lease.leases AS l
     WHERE l.key = force_release.key
       AND l.owner IS NOT NULL
       AND l.expires_at > pg_catalog.clock_timestamp()
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        force_release.epoch := NULL;         -- not HELD: nothing to end
        RETURN;
    END IF;
    UPDATE lease.leases AS l
       SET owner = NULL,
           epoch = l.epoch + 1,
           expires_at = pg_catalog.clock_timestamp(),
           prior_expires_at = l.expires_at,
           data = NULL
     WHERE l.key = force_release.key
    RETURNING l.waiting, l.watched_until > pg_catalog.clock_timestamp() INTO v_waiting, v_watched;
    IF v_waiting THEN
        PERFORM pg_catalog.pg_notify('pg_lease_released', force_release.key);
    END IF;
    IF v_watched THEN
        PERFORM pg_catalog.pg_notify('pg_lease_changed', force_release.key);
    END IF;
    RAISE LOG 'lease.force_release: role % ended the grant of key % at epoch % (owner %, role %)',
        pg_catalog.quote_ident(SESSION_USER), pg_catalog.quote_literal(force_release.key),
        force_release.epoch, pg_catalog.quote_literal(v_owner), COALESCE(pg_catalog.quote_ident(v_role), 'none');
END
$$;

REVOKE ALL ON FUNCTION lease.force_release(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.force_release(text) TO @extowner@ WITH GRANT OPTION;

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.8.0'::text $$;
