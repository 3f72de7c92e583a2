-- pg_lease 0.8.0 -> 0.9.0: the history of grants and the handover of a lease (docs/SEMANTICS.md §15).
--
-- Added: lease.grant_history (one row per grant, internal), lease.history(key, ...), lease.transfer(key,
--        owner, epoch, to_owner, ttl), lease.configure_history(enabled, retention); lease.leases.prior_*
--        (how the grant before the current one ended); lease.settings.history and history_retention;
--        lease.configuration() also returns history and history_retention.
-- Changed: lease.acquire records each grant in the history; lease.force_release records 'forced';
--          lease.purge removes the history of grants that ended more than history_retention ago and
--          records the end of a purged key's last grant.
-- The history starts with the grants HELD at the upgrade (granted_at NULL: made before it began).
-- Signatures and privileges of existing functions are unchanged; lease._raise_invalid_input's hint
-- names the new limits; acquire, renew, renew_many and acquire_slot read the WAL timeline and the ttl
-- cap inline instead of through SQL helpers (re-planned on every call).

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.9.0'" to load this file. \quit

ALTER TABLE lease.leases
    ADD COLUMN prior_epoch bigint,
    ADD COLUMN prior_ended_at timestamptz,
    ADD COLUMN prior_ended_by text;
ALTER TABLE lease.settings
    ADD COLUMN history boolean,
    ADD COLUMN history_retention interval;

-- The history of grants (lease.history): one row per grant made while the history is on, written
-- by the grant in the same transaction, so a committed grant has its row and a rolled-back one has
-- none. Renewals and releases write nothing: how a grant ended is read from the next grant's row
-- (prior_*, copied from the key's row when that grant took it) or, for the current grant, from the
-- key's row itself. Only the ends that no later grant can tell are written where they happen: by
-- lease.force_release ('forced'), lease.transfer ('transferred') and lease.purge (the end of a key's
-- last grant, before its row goes). Rows of grants that ended more than history_retention ago are
-- removed by lease.purge.
--   granted_at        when the grant was made; NULL for the grants held when the history began
--                     (the upgrade to 0.9.0 records them)
--   data              the grant's data when it was granted
--   prior_*           the end of the key's grant before this one, as in lease.leases
--   ended_by,         the end of this grant, when written where it happened (see above)
--   ended_at,
--   final_expires_at
-- The primary key orders a key's grants by epoch; purge finds ended grants through it.
CREATE TABLE lease.grant_history (
    key              text COLLATE "C" NOT NULL,
    epoch            bigint NOT NULL,
    owner            text NOT NULL,
    holder_role      text,
    granted_at       timestamptz,
    data             text,
    prior_epoch      bigint,
    prior_ended_at   timestamptz,
    prior_expires_at timestamptz,
    prior_ended_by   text,
    ended_by         text,
    ended_at         timestamptz,
    final_expires_at timestamptz,
    CONSTRAINT grant_history_pkey PRIMARY KEY (key, epoch)
);

COMMENT ON TABLE lease.grant_history IS
    'pg_lease history of grants, one row per grant; internal: read it with lease.history';

-- The history begins with the grants held now; when they were made is not known.
INSERT INTO lease.grant_history (key, epoch, owner, holder_role, granted_at, data)
SELECT l.key, l.epoch, l.owner, l.holder_role, NULL, l.data
  FROM lease.leases AS l
 WHERE l.owner IS NOT NULL AND l.expires_at > pg_catalog.clock_timestamp();

-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.grant_history', '');
REVOKE ALL ON TABLE lease.grant_history FROM PUBLIC;
GRANT SELECT, INSERT ON TABLE lease.grant_history TO @extowner@;

ALTER TYPE lease.configuration_result
    ADD ATTRIBUTE history boolean,
    ADD ATTRIBUTE history_retention interval;


-- Its hint names the new arguments' limits.
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
                  || 'max_holders and slot are in [1, 10000]; renew_many takes at most 100000 distinct keys; '
                  || 'ttl is at most max_ttl when lease.configure set one; lease.history returns 1 to '
                  || '10000 rows; a history retention is in [1 second, 3650 days].';
END
$$;


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
    v_no_history boolean;        -- the history is off (lease.configure_history); NULL: on
    v_prior_epoch bigint;        -- how the grant before this one ended (lease.leases.prior_*)
    v_prior_ended_at timestamptz;
    v_prior_expires_at timestamptz;
    v_prior_ended_by text;
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
        -- (lease._timeline()'s expression, written out: a SQL function is parsed and planned anew
        -- on every call, where an expression of this function keeps its plan for the session.)
        v_timeline := ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(
                                  pg_catalog.pg_current_wal_lsn()), 1, 8))::pg_catalog.bit(32)::bigint;
        SELECT GREATEST((v_timeline - 1) * 1099511627776,
                        s.min_epoch + GREATEST(v_timeline - s.min_epoch_timeline, 0) * 1099511627776),
               s.max_ttl, s.failover_quarantine, s.history IS NOT DISTINCT FROM false
          INTO v_floor, v_max_ttl, v_quarantine, v_no_history
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
        -- The row keeps how the grant before ended (prior_*, for the history): a FREE row's was
        -- released (or forced) at expires_at with its last expiry in prior_expires_at, a LAPSED
        -- row's lapsed at its expiry.
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
               holder_role = SESSION_USER,
               prior_epoch = CASE WHEN l.owner IS NULL THEN l.epoch - 1 ELSE l.epoch END,
               prior_ended_at = l.expires_at,
               prior_expires_at = CASE WHEN l.owner IS NULL THEN l.prior_expires_at ELSE l.expires_at END,
               prior_ended_by = CASE WHEN l.owner IS NULL THEN 'released' ELSE 'lapsed' END
         WHERE l.key = acquire.key
           AND (l.owner IS NULL OR l.expires_at <= pg_catalog.clock_timestamp())
           AND v_quarantined IS NULL
        RETURNING true, l.epoch, l.expires_at,
                  l.expires_at - pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second'
                      >= pg_catalog.clock_timestamp() - interval '1 millisecond',
                  l.watched_until > pg_catalog.clock_timestamp(),
                  l.prior_epoch, l.prior_ended_at, l.prior_expires_at, l.prior_ended_by
             INTO r.acquired, r.epoch, r.expires_at, v_done, v_watched,
                  v_prior_epoch, v_prior_ended_at, v_prior_expires_at, v_prior_ended_by;
        IF FOUND THEN
            IF v_no_history IS NOT TRUE THEN
                INSERT INTO lease.grant_history (key, epoch, owner, holder_role, granted_at, data,
                    prior_epoch, prior_ended_at, prior_expires_at, prior_ended_by)
                VALUES (acquire.key, r.epoch, acquire.owner, SESSION_USER,
                        r.expires_at - pg_catalog.date_part('epoch', acquire.ttl) * interval '1 second',
                        acquire.data, v_prior_epoch, v_prior_ended_at, v_prior_expires_at, v_prior_ended_by);
            END IF;
            IF v_watched THEN
                PERFORM pg_catalog.pg_notify('pg_lease_changed', acquire.key);
            END IF;
            IF v_done THEN
                RETURN r;                    -- granted (the common case)
            END IF;
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
            IF v_no_history IS NOT TRUE THEN
                INSERT INTO lease.grant_history (key, epoch, owner, holder_role, granted_at, data)
                VALUES (acquire.key, r.epoch, acquire.owner, SESSION_USER, v_now, acquire.data);
            END IF;
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
    UPDATE lease.grant_history AS h
       SET granted_at = v_locked_at
     WHERE h.key = acquire.key AND h.epoch = r.epoch;
    RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION lease.force_release(key text, OUT epoch bigint)
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
    v_ended_at timestamptz;
    v_expired_at timestamptz;    -- the expiry the ended grant had
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
    RETURNING l.waiting, l.watched_until > pg_catalog.clock_timestamp(), l.expires_at, l.prior_expires_at
         INTO v_waiting, v_watched, v_ended_at, v_expired_at;
    -- The history: a release is told by the next grant, an operator's end only here.
    UPDATE lease.grant_history AS h
       SET ended_by = 'forced', ended_at = v_ended_at, final_expires_at = v_expired_at
     WHERE h.key = force_release.key AND h.epoch = force_release.epoch;
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
    v_cutoff timestamptz;        -- the history of grants that ended before it goes
BEGIN
    IF v_older_s IS NULL OR NOT (v_older_s >= 0 AND v_older_s <= 31536000) THEN
        PERFORM lease._raise_invalid_input('lease.purge',
            lease._interval_violations('older_than', purge.older_than, false));
    END IF;

    -- The history of grants that ended more than history_retention ago, first and without the
    -- epoch-floor lock (taken below and held to the commit): a long delete must not hold up the
    -- creation of new keys. A grant ended before a later grant of its key began, so every grant of
    -- a key below the latest one made before the cutoff is old enough (one pass over the table,
    -- whatever the number of grants per key); an end written where it happened (forced,
    -- transferred, a purged key's last grant) says it directly. Grants only add rows, and the rows
    -- that transfer and force_release complete are current ones, which this never deletes: it
    -- waits for none of them.
    SELECT pg_catalog.clock_timestamp()
           - COALESCE(pg_catalog.max(s.history_retention), interval '30 days')
      INTO v_cutoff
      FROM lease.settings AS s;
    DELETE FROM lease.grant_history AS h
     USING (SELECT g.key, pg_catalog.max(g.epoch) AS epoch
              FROM lease.grant_history AS g
             WHERE g.granted_at < v_cutoff
             GROUP BY g.key) AS later
     WHERE h.key = later.key AND h.epoch < later.epoch;
    DELETE FROM lease.grant_history AS h WHERE h.ended_at < v_cutoff;

    -- Excludes key creation (FOR KEY SHARE on the sentinel) and other purges until we commit.
    PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR UPDATE;

    -- The rows go, and with them what the history reads of their last grant's end: it is written
    -- into that grant's history row first.
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
        RETURNING l.key, l.owner IS NULL AS released, l.epoch, l.expires_at, l.prior_expires_at
    ), ended AS (
        UPDATE lease.grant_history AS h
           SET ended_by = CASE WHEN g.released THEN 'released' ELSE 'lapsed' END,
               ended_at = g.expires_at,
               final_expires_at = CASE WHEN g.released THEN g.prior_expires_at ELSE g.expires_at END
          FROM gone AS g
         WHERE h.key = g.key
           AND h.epoch = CASE WHEN g.released THEN g.epoch - 1 ELSE g.epoch END
           AND h.ended_by IS NULL
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

CREATE OR REPLACE FUNCTION lease.configuration()
RETURNS lease.configuration_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.configuration_result;
BEGIN
    SELECT s.max_ttl, s.failover_quarantine, t.t,
           GREATEST((t.t - 1) * 1099511627776,
                    s.min_epoch + GREATEST(t.t - s.min_epoch_timeline, 0) * 1099511627776),
           s.history IS DISTINCT FROM false, COALESCE(s.history_retention, interval '30 days')
      INTO r.max_ttl, r.failover_quarantine, r.timeline, r.min_epoch, r.history, r.history_retention
      FROM (SELECT lease._timeline() AS t) AS t
      LEFT JOIN lease.settings AS s ON true;
    r.quarantine_until := lease._quarantine_end(r.timeline, r.failover_quarantine, false);
    RETURN r;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.transfer(key, owner, epoch, to_owner, ttl) -> (status, epoch, expires_at)
--
-- Contract: docs/SEMANTICS.md §15. The holder of (key, owner, epoch) hands the key to `to_owner` in
-- one step: status 'ok' and to_owner holds it with the next epoch (the old one is fenced from this
-- instant) until server time + ttl, granted to the session's login role, without data. There is no
-- moment at which the key is FREE. Otherwise not_owner, lapsed or epoch_mismatch in renew's
-- precedence, epoch and expires_at NULL, nothing changed. A registered waiter is notified on
-- `pg_lease_released` (the successor, campaigning, finds itself the holder through acquire), a watcher
-- on `pg_lease_changed`. Recorded in the history as 'transferred'. Allowed during a failover
-- quarantine (the key is HELD here). 22023 on invalid input; 42501 as renew.
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.transfer_result AS (status text, epoch bigint, expires_at timestamptz);

CREATE FUNCTION lease.transfer(key text, owner text, epoch bigint, to_owner text, ttl interval)
RETURNS lease.transfer_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r lease.transfer_result;
    v_timeline bigint := lease._timeline();
    v_floor bigint;
    v_no_history boolean;
    v_owner text;
    v_epoch bigint;
    v_expires_at timestamptz;
    v_role text;
    v_waiting boolean;
    v_watched boolean;
    v_now timestamptz;
BEGIN
    -- Invalid input: 22023 naming every violation, of every argument (the ttl also within the
    -- installing role's cap), before anything is read or written.
    IF (transfer.key <> '' AND pg_catalog.octet_length(transfer.key) <= 1024
        AND transfer.owner <> '' AND pg_catalog.octet_length(transfer.owner) <= 1024
        AND transfer.epoch IS NOT NULL
        AND transfer.to_owner <> '' AND pg_catalog.octet_length(transfer.to_owner) <= 1024
        AND pg_catalog.date_part('epoch', transfer.ttl) > 0
        AND pg_catalog.date_part('epoch', transfer.ttl) <= 31536000
        AND pg_catalog.date_part('epoch', transfer.ttl) <= lease._ttl_cap_seconds()) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.transfer',
            lease._text_violations('key', transfer.key, false, false)
            || lease._text_violations('owner', transfer.owner, false, false)
            || CASE WHEN transfer.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || lease._text_violations('to_owner', transfer.to_owner, false, false)
            || lease._interval_violations('ttl', transfer.ttl, true)
            || lease._max_ttl_violations(transfer.ttl, (SELECT s.max_ttl FROM lease.settings AS s)));
    END IF;

    LOOP
        -- The row lock waits for a transition in flight; the grant is judged on its result.
        SELECT l.owner, l.epoch, l.expires_at, l.holder_role, l.waiting,
               l.watched_until > pg_catalog.clock_timestamp()
          INTO v_owner, v_epoch, v_expires_at, v_role, v_waiting, v_watched
          FROM lease.leases AS l
         WHERE l.key = transfer.key
           FOR NO KEY UPDATE;
        EXIT WHEN FOUND AND v_owner = transfer.owner AND v_epoch = transfer.epoch
                  AND v_expires_at > pg_catalog.clock_timestamp() AND lease._may_act_for(v_role);
        r.status := lease._refusal('lease.transfer', transfer.key, transfer.owner, transfer.epoch);
        IF r.status <> 'ok' THEN
            RETURN r;                        -- refused, nothing changed
        END IF;
        -- 'ok' only when no row was found, hence none locked, and a grant that matches created the
        -- key since (the refusal is judged in a later snapshot): judge that row under its lock.
    END LOOP;

    -- The next epoch, never below the floor (as acquire: the timeline band and the min epoch).
    SELECT GREATEST((v_timeline - 1) * 1099511627776,
                    s.min_epoch + GREATEST(v_timeline - s.min_epoch_timeline, 0) * 1099511627776),
           s.history IS NOT DISTINCT FROM false
      INTO v_floor, v_no_history
      FROM (SELECT) AS t
      LEFT JOIN lease.settings AS s ON true;
    v_now := pg_catalog.clock_timestamp();
    UPDATE lease.leases AS l
       SET owner = transfer.to_owner,
           epoch = GREATEST(l.epoch + 1, v_floor),
           expires_at = v_now + pg_catalog.date_part('epoch', transfer.ttl) * interval '1 second',
           waiting = false,
           data = NULL,
           holder_role = SESSION_USER,
           prior_epoch = l.epoch,
           prior_ended_at = v_now,
           prior_expires_at = l.expires_at,
           prior_ended_by = 'transferred'
     WHERE l.key = transfer.key
    RETURNING 'ok', l.epoch, l.expires_at INTO r.status, r.epoch, r.expires_at;

    UPDATE lease.grant_history AS h
       SET ended_by = 'transferred', ended_at = v_now, final_expires_at = v_expires_at
     WHERE h.key = transfer.key AND h.epoch = transfer.epoch;
    IF v_no_history IS NOT TRUE THEN
        INSERT INTO lease.grant_history (key, epoch, owner, holder_role, granted_at,
            prior_epoch, prior_ended_at, prior_expires_at, prior_ended_by)
        VALUES (transfer.key, r.epoch, transfer.to_owner, SESSION_USER, v_now,
                transfer.epoch, v_now, v_expires_at, 'transferred');
    END IF;
    IF v_waiting THEN
        PERFORM pg_catalog.pg_notify('pg_lease_released', transfer.key);
    END IF;
    IF v_watched THEN
        PERFORM pg_catalog.pg_notify('pg_lease_changed', transfer.key);
    END IF;
    RETURN r;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.history(key, since DEFAULT NULL, owner DEFAULT NULL, max_rows DEFAULT 100)
--   -> SETOF (epoch, owner, holder_role, granted_at, expires_at, ended_at, ended_by, data)
--
-- Contract: docs/SEMANTICS.md §15. The grants of `key` recorded in the history, in epoch order: the
-- latest max_rows (1..10000) of those still current `since` ago by the server clock or later (a
-- duration in [0, 3650 days]; NULL: all) and, when given, made to `owner`. (A duration, not a
-- timestamp: no call takes a time from the client's clock.) expires_at is the expiry a grant had
-- when it ended (the current one's now);
-- ended_by is NULL while the grant is HELD, else 'released', 'lapsed' (ended_at is its expiry,
-- shown as soon as it passes), 'forced', 'transferred', or 'unrecorded' (it ended while the history
-- was off; ended_at NULL). granted_at is NULL for a grant held when the history began. The current
-- grant is judged as of now by the server clock, as lease.inspect judges it (advisory: no lock); an
-- end read from a later grant or written where it happened is final. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.history_entry AS (
    epoch bigint, owner text, holder_role text, granted_at timestamptz, expires_at timestamptz,
    ended_at timestamptz, ended_by text, data text);

CREATE FUNCTION lease.history(
    key text, since interval DEFAULT NULL, owner text DEFAULT NULL, max_rows integer DEFAULT 100)
RETURNS SETOF lease.history_entry
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_since timestamptz;         -- the grants that ended before it are left out
BEGIN
    IF (history.key <> '' AND pg_catalog.octet_length(history.key) <= 1024
        AND (history.owner IS NULL OR (history.owner <> ''
                                       AND pg_catalog.octet_length(history.owner) <= 1024))
        AND (history.since IS NULL OR (pg_catalog.date_part('epoch', history.since) >= 0
                                       AND pg_catalog.date_part('epoch', history.since) <= 315360000))
        AND history.max_rows >= 1 AND history.max_rows <= 10000) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.history',
            lease._text_violations('key', history.key, false, false)
            || CASE WHEN pg_catalog.date_part('epoch', history.since) >= 0
                         AND pg_catalog.date_part('epoch', history.since) <= 315360000
                         OR history.since IS NULL
                    THEN '{}'::text[]
                    ELSE ARRAY['since must be in [0, 3650 days] (got ' || history.since || ')'] END
            || lease._text_violations('owner', history.owner, true, false)
            || lease._slot_count_violations('max_rows', history.max_rows));
    END IF;
    v_since := pg_catalog.clock_timestamp() - history.since;
    RETURN QUERY
    WITH cur AS (
        -- The key's row now: its current grant, or how its last one ended.
        SELECT l.owner IS NULL AS free, l.epoch, l.expires_at, l.prior_expires_at,
               l.expires_at > pg_catalog.clock_timestamp() AS unexpired
          FROM lease.leases AS l
         WHERE l.key = history.key
    ), recorded AS (
        -- Each grant with the next one's prior_* (how the next grant found it ended). Without an
        -- owner filter only the latest max_rows grants are read (a backward scan of the primary
        -- key): the grants still current at v_since are the latest ones, as a grant ends
        -- before the next begins. With one, every grant of the key (within the retention).
        SELECT h.*,
               pg_catalog.lead(h.prior_epoch) OVER w AS next_prior_epoch,
               pg_catalog.lead(h.prior_ended_at) OVER w AS next_prior_ended_at,
               pg_catalog.lead(h.prior_expires_at) OVER w AS next_prior_expires_at,
               pg_catalog.lead(h.prior_ended_by) OVER w AS next_prior_ended_by
          FROM (SELECT g.*
                  FROM lease.grant_history AS g
                 WHERE g.key = history.key
                 ORDER BY g.epoch DESC
                 LIMIT CASE WHEN history.owner IS NULL THEN history.max_rows END) AS h
        WINDOW w AS (ORDER BY h.epoch)
    ), judged AS (
        SELECT r.epoch, r.owner, r.holder_role, r.granted_at, r.data,
               CASE WHEN r.ended_by IS NOT NULL THEN r.ended_by
                    WHEN r.next_prior_epoch = r.epoch THEN r.next_prior_ended_by
                    WHEN NOT c.free AND c.epoch = r.epoch THEN
                         CASE WHEN c.unexpired THEN NULL ELSE 'lapsed' END
                    WHEN c.free AND c.epoch = r.epoch + 1 THEN 'released'
                    ELSE 'unrecorded' END AS ended_by,
               CASE WHEN r.ended_by IS NOT NULL THEN r.ended_at
                    WHEN r.next_prior_epoch = r.epoch THEN r.next_prior_ended_at
                    WHEN NOT c.free AND c.epoch = r.epoch THEN
                         CASE WHEN c.unexpired THEN NULL ELSE c.expires_at END
                    WHEN c.free AND c.epoch = r.epoch + 1 THEN c.expires_at
                    END AS ended_at,
               CASE WHEN r.ended_by IS NOT NULL THEN r.final_expires_at
                    WHEN r.next_prior_epoch = r.epoch THEN r.next_prior_expires_at
                    WHEN NOT c.free AND c.epoch = r.epoch THEN c.expires_at
                    WHEN c.free AND c.epoch = r.epoch + 1 THEN c.prior_expires_at
                    END AS expires_at
          FROM recorded AS r
          LEFT JOIN cur AS c ON true
    ), chosen AS (
        SELECT j.*
          FROM judged AS j
         WHERE (v_since IS NULL OR j.ended_by IS NULL OR j.ended_at >= v_since
                OR (j.ended_at IS NULL AND j.granted_at >= v_since))           -- unrecorded end
           AND (history.owner IS NULL OR j.owner = history.owner)
         ORDER BY j.epoch DESC
         LIMIT history.max_rows
    )
    SELECT c.epoch, c.owner, c.holder_role, c.granted_at, c.expires_at, c.ended_at, c.ended_by, c.data
      FROM chosen AS c
     ORDER BY c.epoch;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.configure_history(enabled DEFAULT NULL, retention DEFAULT NULL) -> lease.configuration()
--
-- Contract: docs/SEMANTICS.md §15. Turns the recording of grants in the history on or off (on by
-- default) and sets how long lease.purge keeps the history of a grant after it ended (30 days by
-- default; in [1 second, 3650 days]); NULL keeps the current value. Off: grants are no longer
-- recorded (acquire then reads the settings on every call); the grants already recorded are kept and
-- still completed where their end is written (forced, transferred, purge). Applies to every call
-- that starts after this commits. 22023 on invalid input, changing nothing. EXECUTE: the installing
-- role only (it may grant it on).
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.configure_history(enabled boolean DEFAULT NULL, retention interval DEFAULT NULL)
RETURNS lease.configuration_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF configure_history.retention IS NOT NULL
       AND (pg_catalog.date_part('epoch', configure_history.retention) >= 1
            AND pg_catalog.date_part('epoch', configure_history.retention) <= 315360000) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.configure_history',
            ARRAY['retention must be in [1 second, 3650 days] (got ' || configure_history.retention || ')']);
    END IF;
    IF configure_history.enabled IS NOT FALSE AND configure_history.retention IS NULL
       AND NOT EXISTS (SELECT FROM lease.settings AS s)
    THEN
        RETURN lease.configuration();        -- the defaults already: no settings row is created
    END IF;
    -- One configuration at a time, as lease.configure. A settings row that only says "on with the
    -- default retention" is still a row: acquire's common path needs lease.settings empty.
    INSERT INTO lease.settings AS s (singleton, history, history_retention)
    VALUES (true, NULLIF(configure_history.enabled, true), configure_history.retention)
    ON CONFLICT ON CONSTRAINT settings_pkey DO UPDATE
       SET history = CASE WHEN configure_history.enabled IS NULL THEN s.history
                          ELSE NULLIF(configure_history.enabled, true) END,
           history_retention = COALESCE(configure_history.retention, s.history_retention);
    RETURN lease.configuration();
END
$$;

REVOKE ALL ON FUNCTION lease.configure_history(boolean, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.configure_history(boolean, interval) TO @extowner@ WITH GRANT OPTION;

-- Their settings reads written out (a SQL helper is parsed and planned anew on every call).
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
            -- (lease._ttl_cap_seconds() written out, as v_timeline in acquire)
            AND EXTRACT(epoch FROM renew.ttl)
                <= COALESCE((SELECT pg_catalog.date_part('epoch', s.max_ttl)
                             FROM lease.settings AS s), 31536000)) IS NOT TRUE
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
            AND EXTRACT(epoch FROM renew_many.ttl)
                <= COALESCE((SELECT pg_catalog.date_part('epoch', s.max_ttl)
                             FROM lease.settings AS s), 31536000)     -- (as in renew)
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

CREATE OR REPLACE FUNCTION lease.acquire_slot(
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
        AND pg_catalog.octet_length(COALESCE(acquire_slot.data, '')) <= 8192
        AND (pg_catalog.pg_relation_size('lease.settings'::pg_catalog.regclass) = 0     -- see acquire
             OR pg_catalog.date_part('epoch', acquire_slot.ttl)
                <= COALESCE((SELECT pg_catalog.date_part('epoch', s.max_ttl)
                             FROM lease.settings AS s), 31536000))) IS NOT TRUE     -- (as in renew)
    THEN
        PERFORM lease._raise_invalid_input('lease.acquire_slot',
            lease._semaphore_violations(acquire_slot.semaphore)
            || lease._text_violations('owner', acquire_slot.owner, false, false)
            || lease._interval_violations('ttl', acquire_slot.ttl, true)
            || lease._max_ttl_violations(acquire_slot.ttl, (SELECT s.max_ttl FROM lease.settings AS s))
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
            EXCEPTION
                WHEN no_data_found THEN
                    NULL;
                WHEN SQLSTATE 'LE004' THEN
                    -- A free slot, but this server is in a failover quarantine.
                    PERFORM lease._pause_in_quarantine('lease.acquire_slot', acquire_slot.semaphore,
                                                       v_deadline);
                    CONTINUE;
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

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.9.0'::text $$;
