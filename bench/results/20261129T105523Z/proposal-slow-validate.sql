CREATE OR REPLACE FUNCTION pglease_scratch_slow_validate.acquire(key text, owner text, ttl interval, wait interval DEFAULT '00:00:00'::interval, OUT acquired boolean, OUT epoch bigint, OUT expires_at timestamp with time zone)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
        PERFORM pglease_scratch_slow_validate._raise_invalid_input('lease.acquire',
            pglease_scratch_slow_validate._text_violations('key', acquire.key, false, false)
            || pglease_scratch_slow_validate._text_violations('owner', acquire.owner, false, false)
            || pglease_scratch_slow_validate._interval_violations('ttl', acquire.ttl, true)
            || pglease_scratch_slow_validate._interval_violations('wait', acquire.wait, false));
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
              FROM pglease_scratch_slow_validate.leases AS l
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
        v_now := pg_catalog.clock_timestamp();
        UPDATE pglease_scratch_slow_validate.leases AS l
           SET owner = acquire.owner,
               epoch = l.epoch + 1,
               expires_at = v_now + v_ttl,
               waiting = false
         WHERE l.key = acquire.key
           AND (l.owner IS NULL OR l.expires_at <= v_now)
        RETURNING true, l.epoch, l.expires_at, pg_catalog.clock_timestamp()
             INTO acquire.acquired, acquire.epoch, acquire.expires_at, v_locked_at;
        IF FOUND THEN
            IF v_locked_at - v_now > interval '1 millisecond' THEN
                -- We waited for the row (a locker that changed nothing, or rolled back): the grant
                -- stands, since a FREE or LAPSED key stays so, but its ttl counts from now.
                UPDATE pglease_scratch_slow_validate.leases AS l
                   SET expires_at = v_locked_at + v_ttl
                 WHERE l.key = acquire.key
                RETURNING l.expires_at INTO acquire.expires_at;
            END IF;
            RETURN;
        END IF;

        -- Not grantable: held (by us or another owner), or no row at all. A plain read, no lock.
        SELECT l.owner, l.epoch, l.expires_at INTO v_owner, v_epoch, v_expires_at
          FROM pglease_scratch_slow_validate.leases AS l
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
        PERFORM FROM pglease_scratch_slow_validate.epoch_floor AS f WHERE f.sentinel FOR KEY SHARE;
        v_now := pg_catalog.clock_timestamp();
        INSERT INTO pglease_scratch_slow_validate.leases AS l (key, owner, epoch, expires_at)
        SELECT acquire.key, acquire.owner, pg_catalog.max(f.floor) + 1, v_now + v_ttl
          FROM pglease_scratch_slow_validate.epoch_floor AS f
        ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING
        RETURNING true, l.epoch, l.expires_at, pg_catalog.clock_timestamp()
             INTO acquire.acquired, acquire.epoch, acquire.expires_at, v_locked_at;
        IF FOUND THEN
            IF v_locked_at - v_now > interval '1 millisecond' THEN
                -- We waited for a concurrent creator that rolled back: count the ttl from now.
                UPDATE pglease_scratch_slow_validate.leases AS l
                   SET expires_at = v_locked_at + v_ttl
                 WHERE l.key = acquire.key
                RETURNING l.expires_at INTO acquire.expires_at;
            END IF;
            RETURN;
        END IF;
        -- Another session created the key first: judge its row on the next turn.
    END LOOP;
END
$function$
;

CREATE OR REPLACE FUNCTION pglease_scratch_slow_validate.renew(key text, owner text, epoch bigint, ttl interval, OUT status text, OUT expires_at timestamp with time zone)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_ttl_s double precision := pg_catalog.date_part('epoch', renew.ttl);      -- NULL, ±Infinity, or s
    v_ttl interval;
    v_now timestamptz;
    v_locked_at timestamptz;
    v_prior timestamptz;
BEGIN
    IF renew.ttl IS NULL OR renew.ttl <= interval '0' OR renew.ttl > interval '365 days'
       OR (CASE WHEN renew.ttl <= interval '365 days'
                THEN pg_catalog.clock_timestamp() + renew.ttl <= pg_catalog.clock_timestamp() END)
    THEN
        PERFORM pglease_scratch_slow_validate._raise_invalid_input('lease.renew',
            pglease_scratch_slow_validate._text_violations('key', renew.key, false, false)
            || pglease_scratch_slow_validate._text_violations('owner', renew.owner, false, false)
            || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || pglease_scratch_slow_validate._interval_violations('ttl', renew.ttl, true));
    END IF;
    v_ttl := v_ttl_s * interval '1 second';

    LOOP
        v_now := pg_catalog.clock_timestamp();
        UPDATE pglease_scratch_slow_validate.leases AS l
           SET expires_at = v_now + v_ttl,
               prior_expires_at = l.expires_at
         WHERE l.key = renew.key
           AND l.owner = renew.owner
           AND l.epoch = renew.epoch
           AND l.expires_at > v_now
        RETURNING 'ok', l.expires_at, l.prior_expires_at, pg_catalog.clock_timestamp()
             INTO renew.status, renew.expires_at, v_prior, v_locked_at;
        IF FOUND THEN
            IF v_prior <= v_locked_at THEN
                -- The lease lapsed while we waited for the row lock: undo, report it.
                UPDATE pglease_scratch_slow_validate.leases AS l SET expires_at = v_prior WHERE l.key = renew.key;
                renew.status := 'lapsed';
                renew.expires_at := NULL;
            ELSIF v_locked_at - v_now > interval '1 millisecond' THEN
                -- We waited, and the lease was still ours: count the ttl from now.
                UPDATE pglease_scratch_slow_validate.leases AS l
                   SET expires_at = v_locked_at + v_ttl
                 WHERE l.key = renew.key
                RETURNING l.expires_at INTO renew.expires_at;
            END IF;
            RETURN;
        END IF;
    IF renew.key IS NULL OR renew.key = '' OR pg_catalog.octet_length(renew.key) > 1024
       OR renew.owner IS NULL OR renew.owner = '' OR pg_catalog.octet_length(renew.owner) > 1024
       OR renew.epoch IS NULL
       OR v_ttl_s IS NULL OR NOT (v_ttl_s > 0 AND v_ttl_s <= 31536000)           -- (0, 365 days]
    THEN
        PERFORM pglease_scratch_slow_validate._raise_invalid_input('lease.renew',
            pglease_scratch_slow_validate._text_violations('key', renew.key, false, false)
            || pglease_scratch_slow_validate._text_violations('owner', renew.owner, false, false)
            || CASE WHEN renew.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END
            || pglease_scratch_slow_validate._interval_violations('ttl', renew.ttl, true));
    END IF;
        renew.status := pglease_scratch_slow_validate._refusal(renew.key, renew.owner, renew.epoch);
        IF renew.status <> 'ok' THEN
            renew.expires_at := NULL;
            RETURN;
        END IF;
        -- The row changed between the UPDATE and the read (a concurrent commit): judge it again.
    END LOOP;
END
$function$
;

CREATE OR REPLACE FUNCTION pglease_scratch_slow_validate.release(key text, owner text, epoch bigint, OUT status text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_waiting boolean;
    v_now timestamptz;
    v_locked_at timestamptz;
    v_prior timestamptz;
BEGIN

    LOOP
        v_now := pg_catalog.clock_timestamp();
        UPDATE pglease_scratch_slow_validate.leases AS l
           SET owner = NULL,
               epoch = l.epoch + 1,
               expires_at = v_now,
               prior_expires_at = l.expires_at
         WHERE l.key = release.key
           AND l.owner = release.owner
           AND l.epoch = release.epoch
           AND l.expires_at > v_now
        RETURNING l.waiting, l.prior_expires_at, pg_catalog.clock_timestamp()
             INTO v_waiting, v_prior, v_locked_at;
        IF FOUND THEN
            IF v_prior <= v_locked_at THEN
                -- The lease lapsed while we waited for the row lock: undo, report it.
                UPDATE pglease_scratch_slow_validate.leases AS l
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
    IF release.key IS NULL OR release.key = '' OR pg_catalog.octet_length(release.key) > 1024
       OR release.owner IS NULL OR release.owner = '' OR pg_catalog.octet_length(release.owner) > 1024
       OR release.epoch IS NULL
    THEN
        PERFORM pglease_scratch_slow_validate._raise_invalid_input('lease.release',
            pglease_scratch_slow_validate._text_violations('key', release.key, false, false)
            || pglease_scratch_slow_validate._text_violations('owner', release.owner, false, false)
            || CASE WHEN release.epoch IS NULL THEN ARRAY['epoch must not be NULL'] ELSE '{}' END);
    END IF;
        release.status := pglease_scratch_slow_validate._refusal(release.key, release.owner, release.epoch);
        IF release.status <> 'ok' THEN
            RETURN;
        END IF;
    END LOOP;
END
$function$
;

