-- pg_lease 0.7.0 -> 0.7.1: the common path costs what it did before the failover work (docs/BENCHMARKS.md).
--
-- Changed: lease.acquire tests in its first expression that the server is on WAL timeline 1 and that
--          lease.settings is empty on disk, and reads the timeline's band and the settings only when
--          not (a server never promoted with nothing configured pays for neither); lease.renew,
--          lease.renew_many and lease.acquire_slot read the ttl cap only when lease.settings is not
--          empty. The blocking waits of lease.acquire and lease.acquire_slot share one pause in a
--          failover quarantine (lease._pause_in_quarantine): both sleep to the quarantine's end and
--          raise LE004, naming the key or the semaphore, when the wait runs out during it.
-- Signatures, results and privileges are unchanged (CREATE OR REPLACE). All state is kept.

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.7.1'" to load this file. \quit

-- The installing role's ttl cap in seconds (lease.configure); 365 days when none is set.
CREATE FUNCTION lease._ttl_cap_seconds()
RETURNS double precision
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE((SELECT pg_catalog.date_part('epoch', s.max_ttl) FROM lease.settings AS s), 31536000)
$$;

REVOKE ALL ON FUNCTION lease._ttl_cap_seconds() FROM PUBLIC;

-- The pause of a blocking acquire or acquire_slot whose attempt found the key (a slot) free but was
-- refused with LE004: sleeps to the quarantine's end, the next poll (at most 50 ms) or `deadline`,
-- whichever is first, and returns, so that the caller attempts again; at or after `deadline` raises
-- LE004 instead (naming `fn` and `key`, the key or the semaphore). Returns at once when the
-- quarantine is over by now: the next attempt is then granted or refused on its merits.
CREATE FUNCTION lease._pause_in_quarantine(fn text, key text, deadline timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_timeline bigint := lease._timeline();
    v_until timestamptz := lease._quarantine_end(
        v_timeline, (SELECT s.failover_quarantine FROM lease.settings AS s), true);
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF (v_until > v_now) IS NOT TRUE THEN
        RETURN;                              -- over (or turned off) since the attempt
    END IF;
    IF v_now >= deadline THEN
        PERFORM lease._raise_quarantined(fn, key, v_timeline, v_until);
    END IF;
    PERFORM pg_catalog.pg_sleep(pg_catalog.date_part('epoch',
        LEAST(interval '50 milliseconds', v_until - v_now, deadline - v_now)));
END
$$;

REVOKE ALL ON FUNCTION lease._pause_in_quarantine(text, text, timestamptz) FROM PUBLIC;

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
             OR pg_catalog.date_part('epoch', acquire_slot.ttl) <= lease._ttl_cap_seconds())) IS NOT TRUE
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
AS $$ SELECT '0.7.1'::text $$;
