-- pg_lease 0.6.0 -> 0.7.0: failover-safe fencing, part two (docs/SEMANTICS.md §8.4-8.5, ADR 0006).
--
-- Added: the installing role's settings (lease.configure, lease.configuration): a cap on every ttl
--        (22023 above it) and an opt-in failover quarantine (after a promotion no new grant, LE004,
--        for a configured time from the first acquire on the new timeline); lease.high_water and
--        lease.raise_min_epoch (moving keys between databases keeps their epochs above every earlier
--        grant).
-- Changed: lease.acquire, lease.acquire_slot, lease.renew and lease.renew_many check the ttl cap;
--          lease.acquire grants no epoch below the min epoch, and refuses new grants during a
--          quarantine. Signatures and privileges are unchanged (CREATE OR REPLACE).
-- Epochs, grants and every other state are kept.

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.7.0'" to load this file. \quit

-- The installing role's settings (lease.configure, lease.raise_min_epoch): at most one row; no row
-- means the defaults (no ttl cap, no quarantine, no minimum epoch).
--   max_ttl              the longest ttl any call may give (22023 above it); NULL: 365 days
--   failover_quarantine  after a promotion, no new grant for this long from the first acquire on
--                        the new timeline (docs/SEMANTICS.md §8.4); NULL: off. At least max_ttl.
--   min_epoch            every grant's epoch is at least min_epoch, and 2^40 more for every
--   min_epoch_timeline   timeline after min_epoch_timeline (§8.5: moving keys between databases)
CREATE TABLE lease.settings (
    singleton           boolean NOT NULL DEFAULT true CHECK (singleton),
    max_ttl             interval,
    failover_quarantine interval,
    min_epoch           bigint NOT NULL DEFAULT 0,
    min_epoch_timeline  bigint NOT NULL DEFAULT 1,
    CONSTRAINT settings_pkey PRIMARY KEY (singleton)
);

COMMENT ON TABLE lease.settings IS
    'pg_lease settings of the installing role (lease.configure, lease.raise_min_epoch); internal';

-- Where the failover quarantine of the current timeline began: t * 2^32 + s, t the WAL timeline and
-- s the start in Unix seconds. A sequence, because setval is not undone by a rollback: the call that
-- starts a quarantine refuses its grant with an error, and the start must outlive it.
CREATE SEQUENCE lease.quarantine_mark AS bigint MINVALUE 0 START WITH 0;

COMMENT ON SEQUENCE lease.quarantine_mark IS
    'pg_lease: the timeline and start of the current failover quarantine; internal';


-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.settings', '');
REVOKE ALL ON TABLE lease.settings FROM PUBLIC;
REVOKE ALL ON SEQUENCE lease.quarantine_mark FROM PUBLIC;
GRANT SELECT, INSERT ON TABLE lease.settings TO @extowner@;

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
                  || 'ttl is at most max_ttl when lease.configure set one.';
END
$$;

CREATE FUNCTION lease._check_grant_args(fn text, key text, owner text, epoch bigint, ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cap text[] := lease._max_ttl_violations(ttl, (SELECT s.max_ttl FROM lease.settings AS s));
BEGIN
    IF (key <> '' AND pg_catalog.octet_length(key) <= 1024
        AND owner <> '' AND pg_catalog.octet_length(owner) <= 1024
        AND epoch IS NOT NULL AND pg_catalog.cardinality(v_cap) = 0) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input(fn,
            lease._text_violations('key', key, false, false)
            || lease._text_violations('owner', owner, false, false)
            || CASE WHEN epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || v_cap);
    END IF;
END
$$;

CREATE FUNCTION lease._max_ttl_violations(ttl interval, max_ttl interval)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN pg_catalog.date_part('epoch', ttl) > pg_catalog.date_part('epoch', max_ttl)
                THEN ARRAY['ttl must be at most max_ttl, ' || max_ttl || ', set by lease.configure (got '
                           || ttl || ')']
                ELSE '{}'::text[] END
$$;

CREATE FUNCTION lease._timeline()
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
               ::pg_catalog.bit(32)::bigint
$$;

CREATE FUNCTION lease._quarantine_end(timeline bigint, quarantine interval, start boolean)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_mark bigint;
    v_start bigint;
BEGIN
    IF quarantine IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT m.last_value INTO v_mark FROM lease.quarantine_mark AS m;
    IF v_mark / 4294967296 = timeline THEN
        v_start := v_mark % 4294967296;
        IF v_start = 0 THEN
            RETURN NULL;                     -- configured on this timeline: not a promotion
        END IF;
    ELSIF start THEN
        v_start := pg_catalog.ceil(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()))::bigint;
        PERFORM pg_catalog.setval('lease.quarantine_mark'::pg_catalog.regclass,
                                  timeline * 4294967296 + v_start);
    ELSE
        RETURN NULL;
    END IF;
    RETURN pg_catalog.to_timestamp(v_start) + pg_catalog.date_part('epoch', quarantine) * interval '1 second';
END
$$;

CREATE FUNCTION lease._raise_quarantined(fn text, key text, timeline bigint, until timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_until text := COALESCE(until::text, 'the end of the quarantine');   -- never a NULL message
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'LE004',
        MESSAGE = fn || ': no new grant of ' || pg_catalog.quote_literal(key)
                  || ' during the failover quarantine',
        DETAIL  = 'This server is on WAL timeline ' || timeline || ' since a promotion; grants the old '
                  || 'primary made may have been lost, and their holders may act until ' || v_until || '.',
        HINT    = 'Retry after ' || v_until || '; leases visible here can still be renewed and released.';
END
$$;

REVOKE ALL ON FUNCTION lease._check_grant_args(text, text, text, bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._max_ttl_violations(interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._timeline() FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._quarantine_end(bigint, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._raise_quarantined(text, text, bigint, timestamptz) FROM PUBLIC;

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
BEGIN
    -- The timeline, the least epoch of a grant on it, and the installing role's settings, in one read.
    -- The band of timeline t is (t - 1) * 2^40; a min epoch set on timeline t0 rises by 2^40 on every
    -- later timeline, so that it stays above what the old timeline granted (§8.5).
    SELECT t.t, GREATEST((t.t - 1) * 1099511627776,
                         s.min_epoch + GREATEST(t.t - s.min_epoch_timeline, 0) * 1099511627776),
           s.max_ttl, s.failover_quarantine
      INTO v_timeline, v_floor, v_max_ttl, v_quarantine
      FROM (SELECT ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
                       ::pg_catalog.bit(32)::bigint AS t) AS t          -- lease._timeline(), inline
      LEFT JOIN lease.settings AS s ON true;
    IF v_quarantine IS NOT NULL THEN
        v_quarantined := lease._quarantine_end(v_timeline, v_quarantine, true);
        IF v_quarantined <= pg_catalog.clock_timestamp() THEN
            v_quarantined := NULL;           -- over
        END IF;
    END IF;

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
        AND pg_catalog.octet_length(COALESCE(acquire.data, '')) <= 8192
        AND (v_max_ttl IS NULL OR EXTRACT(epoch FROM acquire.ttl) <= EXTRACT(epoch FROM v_max_ttl))) IS NOT TRUE
    THEN
        -- Invalid input (22023, naming every violation), or a blocking acquire.
        IF (acquire.key <> '' AND pg_catalog.octet_length(acquire.key) <= 1024
            AND acquire.owner <> '' AND pg_catalog.octet_length(acquire.owner) <= 1024
            AND pg_catalog.date_part('epoch', acquire.ttl) > 0
            AND pg_catalog.date_part('epoch', acquire.ttl) <= 31536000
            AND pg_catalog.date_part('epoch', acquire.wait) > 0                 -- wait in [0, 365 days]
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
            EXCEPTION
                WHEN no_data_found THEN
                    NULL;
                WHEN SQLSTATE 'LE004' THEN
                    -- The key is free, but this server is in a failover quarantine: sleep to its end
                    -- (the next poll), never past our deadline; at the deadline, say so (LE004).
                    v_quarantined := lease._quarantine_end(v_timeline, v_quarantine, true);
                    v_now := pg_catalog.clock_timestamp();
                    IF v_now >= v_deadline THEN
                        PERFORM lease._raise_quarantined('lease.acquire', acquire.key, v_timeline, v_quarantined);
                    END IF;
                    PERFORM pg_catalog.pg_sleep(pg_catalog.date_part('epoch', LEAST(interval '50 milliseconds',
                        GREATEST(v_quarantined - v_now, interval '0'), v_deadline - v_now)));
                    CONTINUE;
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
               data = acquire.data
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
        SELECT l.owner, l.epoch, l.expires_at, acquire.data IS NULL OR l.data = acquire.data
          INTO v_owner, v_epoch, v_expires_at, v_same_data
          FROM lease.leases AS l
         WHERE l.key = acquire.key;

        IF FOUND THEN
            IF v_owner IS NULL OR v_expires_at <= pg_catalog.clock_timestamp() THEN
                IF v_quarantined IS NOT NULL THEN
                    PERFORM lease._raise_quarantined('lease.acquire', acquire.key, v_timeline, v_quarantined);
                END IF;
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
        IF v_quarantined IS NOT NULL THEN
            PERFORM lease._raise_quarantined('lease.acquire', acquire.key, v_timeline, v_quarantined);
        END IF;
        PERFORM FROM lease.epoch_floor AS f WHERE f.sentinel FOR KEY SHARE;
        v_now := pg_catalog.clock_timestamp();
        INSERT INTO lease.leases AS l (key, owner, epoch, expires_at, data)
        SELECT acquire.key, acquire.owner,
               GREATEST(pg_catalog.max(f.floor) + 1, v_floor),
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
           -- The installing role's ttl cap, if any (a one-time subplan): a renewal above it renews
           -- nothing and gets 22023 below.
           AND pg_catalog.date_part('epoch', renew.ttl)
               <= COALESCE((SELECT pg_catalog.date_part('epoch', s.max_ttl) FROM lease.settings AS s), 31536000)
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
        r.status := lease._refusal(renew.key, renew.owner, renew.epoch);
        IF r.status <> 'ok' THEN
            r.expires_at := NULL;
            RETURN r;
        END IF;
        -- The row changed between the UPDATE and the read (a concurrent commit): judge it again.
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lease._check_renew_many_args(owner text, keys text[], epochs bigint[], ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_violations text[] := lease._text_violations('owner', owner, false, false)
                           || lease._interval_violations('ttl', ttl, true)
                           || lease._max_ttl_violations(ttl, (SELECT s.max_ttl FROM lease.settings AS s));
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
    -- cap (it writes it) and two
    -- one-dimensional arrays of the same length (it pairs them up). The owner and each pair need no
    -- check before it (invalid ones match no row; they send the call down the careful path, which
    -- checks everything first).
    IF (EXTRACT(epoch FROM renew_many.ttl) <@ '(0,31536000]'::pg_catalog.numrange
        AND EXTRACT(epoch FROM renew_many.ttl)
            <= COALESCE((SELECT EXTRACT(epoch FROM s.max_ttl) FROM lease.settings AS s), 31536000)
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
    v_max_ttl interval := (SELECT s.max_ttl FROM lease.settings AS s);
BEGIN
    IF (acquire_slot.semaphore <> '' AND pg_catalog.octet_length(acquire_slot.semaphore) <= 1018
        AND acquire_slot.owner <> '' AND pg_catalog.octet_length(acquire_slot.owner) <= 1024
        AND pg_catalog.date_part('epoch', acquire_slot.ttl) > 0
        AND pg_catalog.date_part('epoch', acquire_slot.ttl) <= 31536000
        AND acquire_slot.max_holders >= 1 AND acquire_slot.max_holders <= 10000
        AND pg_catalog.date_part('epoch', acquire_slot.wait) >= 0
        AND pg_catalog.date_part('epoch', acquire_slot.wait) <= 31536000
        AND pg_catalog.octet_length(COALESCE(acquire_slot.data, '')) <= 8192
        AND (v_max_ttl IS NULL OR pg_catalog.date_part('epoch', acquire_slot.ttl)
                                  <= pg_catalog.date_part('epoch', v_max_ttl))) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.acquire_slot',
            lease._semaphore_violations(acquire_slot.semaphore)
            || lease._text_violations('owner', acquire_slot.owner, false, false)
            || lease._interval_violations('ttl', acquire_slot.ttl, true)
            || lease._max_ttl_violations(acquire_slot.ttl, v_max_ttl)
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
                    -- A free slot, but a failover quarantine: poll until it ends or the wait runs out
                    -- (then LE004 again, from the last attempt).
                    v_now := pg_catalog.clock_timestamp();
                    IF v_now >= v_deadline THEN
                        RETURN lease.acquire_slot(acquire_slot.semaphore, acquire_slot.owner, acquire_slot.ttl,
                                                  acquire_slot.max_holders, interval '0', acquire_slot.data);
                    END IF;
                    PERFORM pg_catalog.pg_sleep(pg_catalog.date_part('epoch',
                        LEAST(interval '50 milliseconds', v_deadline - v_now)));
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

CREATE TYPE lease.configuration_result AS (
    max_ttl interval, failover_quarantine interval, timeline bigint,
    quarantine_until timestamptz, min_epoch bigint);

CREATE FUNCTION lease.configuration()
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
                    s.min_epoch + GREATEST(t.t - s.min_epoch_timeline, 0) * 1099511627776)
      INTO r.max_ttl, r.failover_quarantine, r.timeline, r.min_epoch
      FROM (SELECT lease._timeline() AS t) AS t
      LEFT JOIN lease.settings AS s ON true;
    r.quarantine_until := lease._quarantine_end(r.timeline, r.failover_quarantine, false);
    RETURN r;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.configure(max_ttl, failover_quarantine DEFAULT NULL) -> lease.configuration()
--
-- Contract: docs/SEMANTICS.md §8.4. Sets the installing role's ttl cap (NULL: none; every acquire,
-- acquire_slot, renew and renew_many with a longer ttl gets 22023 once this commits) and the failover
-- quarantine (NULL: off): after a promotion, no new grant for that long from the first acquire on the
-- new timeline. A quarantine needs a cap and is at least as long as it. Enabling the quarantine does
-- not start one on the current timeline; changing its length moves the end of a running one. 22023 on
-- invalid input, changing nothing. EXECUTE: the installing role only (it may grant it on).
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.configure(max_ttl interval, failover_quarantine interval DEFAULT NULL)
RETURNS lease.configuration_result
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_violations text[] := '{}';
    v_timeline bigint := lease._timeline();
    v_was interval;
    v_mark bigint;
BEGIN
    IF configure.max_ttl IS NOT NULL THEN
        v_violations := v_violations || lease._interval_violations('max_ttl', configure.max_ttl, true);
    END IF;
    IF configure.failover_quarantine IS NOT NULL THEN
        v_violations := v_violations
            || lease._interval_violations('failover_quarantine', configure.failover_quarantine, true);
        IF configure.max_ttl IS NULL THEN
            v_violations := v_violations || 'failover_quarantine needs max_ttl (a cap on every ttl)'::text;
        ELSIF pg_catalog.date_part('epoch', configure.failover_quarantine)
              < pg_catalog.date_part('epoch', configure.max_ttl) THEN
            v_violations := v_violations || ('failover_quarantine must be at least max_ttl (got '
                || configure.failover_quarantine || ' < ' || configure.max_ttl || ')');
        END IF;
    END IF;
    IF pg_catalog.cardinality(v_violations) > 0 THEN
        PERFORM lease._raise_invalid_input('lease.configure', v_violations);
    END IF;

    -- One configuration at a time (the row lock; a first one waits on the INSERT's key).
    SELECT s.failover_quarantine INTO v_was FROM lease.settings AS s FOR UPDATE;
    IF configure.failover_quarantine IS NOT NULL THEN
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
    VALUES (true, configure.max_ttl, configure.failover_quarantine)
    ON CONFLICT ON CONSTRAINT settings_pkey DO UPDATE
       SET max_ttl = EXCLUDED.max_ttl, failover_quarantine = EXCLUDED.failover_quarantine;
    RETURN lease.configuration();
END
$$;

REVOKE ALL ON FUNCTION lease.configure(interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.configure(interval, interval) TO @extowner@ WITH GRANT OPTION;

-- ---------------------------------------------------------------------------------------------------
-- lease.high_water() -> bigint
--
-- Contract: docs/SEMANTICS.md §8.5. An epoch at least as high as every epoch this database granted or
-- holds in reserve: every key's epoch (a FREE key's is the next one it grants), the purge floor, and
-- the least epoch a grant gets now minus one. Moving keys to another database: raise that database's
-- min epoch above it (lease.raise_min_epoch). Reads every row: an operator's call, not a worker's.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.high_water()
RETURNS bigint
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT GREATEST((SELECT pg_catalog.max(l.epoch) FROM lease.leases AS l),
                    (SELECT pg_catalog.max(f.floor) FROM lease.epoch_floor AS f),
                    (SELECT c.min_epoch - 1 FROM lease.configuration() AS c))
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.raise_min_epoch(at_least) -> bigint
--
-- Contract: docs/SEMANTICS.md §8.5. Once this commits, every grant in this database has an epoch of at
-- least at_least (and 2^40 more for every later timeline). Never lowers the minimum; returns the least
-- epoch a grant gets now. For moving keys here from another database: at_least = its
-- lease.high_water() + 1. 22023 for NULL, a negative value or one above 2^62. EXECUTE: the installing
-- role only.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.raise_min_epoch(at_least bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_timeline bigint := lease._timeline();
BEGIN
    IF (raise_min_epoch.at_least >= 0 AND raise_min_epoch.at_least <= 4611686018427387904) IS NOT TRUE THEN
        PERFORM lease._raise_invalid_input('lease.raise_min_epoch',
            ARRAY[CASE WHEN raise_min_epoch.at_least IS NULL THEN 'at_least must not be NULL'
                       WHEN raise_min_epoch.at_least < 0 THEN 'at_least must not be negative'
                       ELSE 'at_least must be at most 2^62 (got ' || raise_min_epoch.at_least || ')' END]);
    END IF;
    -- The minimum as it applies on this timeline, raised, and counted from this timeline on.
    INSERT INTO lease.settings AS s (singleton, min_epoch, min_epoch_timeline)
    VALUES (true, raise_min_epoch.at_least, v_timeline)
    ON CONFLICT ON CONSTRAINT settings_pkey DO UPDATE
       SET min_epoch = GREATEST(s.min_epoch + GREATEST(v_timeline - s.min_epoch_timeline, 0) * 1099511627776,
                                EXCLUDED.min_epoch),
           min_epoch_timeline = v_timeline;
    RETURN (SELECT c.min_epoch FROM lease.configuration() AS c);
END
$$;

REVOKE ALL ON FUNCTION lease.raise_min_epoch(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.raise_min_epoch(bigint) TO @extowner@ WITH GRANT OPTION;

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.7.0'::text $$;
