-- pg_lease 0.3.0 -> 0.4.0: hardening (docs/SEMANTICS.md; ADR 0001 for the privilege model).
--
-- Fixed: the installing role owned schema `lease`, so it could rename it and plant look-alikes that
--        the SECURITY DEFINER functions resolved and ran as the bootstrap superuser. The schema now
--        belongs to the role that runs the extension scripts (the bootstrap superuser, for a trusted
--        extension); the installing role keeps USAGE with the grant option, so it still decides who
--        may call the API. This update refuses to run if schema `lease` is not the extension's, or
--        holds objects that are not pg_lease's (drop them first). Other roles' USAGE on the schema is
--        kept (re-granted by the installing role); CREATE on it is no longer granted to anyone.
-- Fixed: the installing role could neither pg_dump its database (no SELECT on the state tables) nor
--        restore a dump (no INSERT): it now has both.
-- Fixed: a blocking acquire whose last attempt was refused just before the key became free raised
--        SQLSTATE 22004 (a NULL DETAIL) instead of 57014, and gave up on a free key: it now tries
--        again whenever the key is free, and raises 57014 only on a key still held by another owner.
-- Fixed: lease.list failed to compile under standard_conforming_strings = off (its LIKE escapes).
-- Fixed: a release that waited for the key's row lock (behind a fence) counted the key as free from
--        the start of its wait, so lease.purge could delete it at once: now from the end of the wait.
-- Changed: renew, release and fence validate (key, owner, epoch) on their slow paths with one helper,
--        lease._check_grant_args.

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.4.0'" to load this file. \quit

-- ---------------------------------------------------------------------------------------------------
-- The schema. (The checks name their operators with their schema: they run before the schema is
-- known to be clean.) Under the Rust installer (no extension row) the installing role owns everything
-- and the functions run as it: there is nobody to escalate to, and nothing to move.
-- ---------------------------------------------------------------------------------------------------
DO $$
DECLARE
    v_extension oid;
    v_namespace oid;
    v_foreign text;
    v_grantees text[];
    v_grantee text;
BEGIN
    SELECT e.oid, e.extnamespace INTO v_extension, v_namespace
      FROM pg_catalog.pg_extension AS e
     WHERE e.extname OPERATOR(pg_catalog.=) 'pg_lease';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_namespace OPERATOR(pg_catalog.<>) 'lease'::pg_catalog.regnamespace::pg_catalog.oid THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease: schema "lease" is not the schema pg_lease was installed in',
            HINT    = 'Give the extension''s schema its name back before updating.';
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', ')
      INTO v_foreign
      FROM pg_catalog.pg_depend AS d
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) v_namespace
       AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_default_acl'::pg_catalog.regclass
       AND NOT EXISTS (
           SELECT FROM pg_catalog.pg_depend AS m
            WHERE m.classid OPERATOR(pg_catalog.=) d.classid
              AND m.objid OPERATOR(pg_catalog.=) d.objid
              AND m.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
              AND m.refobjid OPERATOR(pg_catalog.=) v_extension
              AND m.deptype OPERATOR(pg_catalog.=) 'e');
    IF v_foreign IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease: schema "lease" holds objects that are not pg_lease''s',
            DETAIL  = 'Found: ' || v_foreign || '.',
            HINT    = 'Drop them (or move them to another schema), then update again.';
    END IF;

    -- Who may use the schema besides its owner; the grants pass to the new owner with the schema, so
    -- they are revoked and made again by the installing role (below), which can then narrow them.
    SELECT pg_catalog.array_agg(DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                  ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END)
      INTO v_grantees
      FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
     WHERE n.oid OPERATOR(pg_catalog.=) v_namespace
       AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
       AND a.privilege_type OPERATOR(pg_catalog.=) 'USAGE';
    ALTER SCHEMA lease OWNER TO CURRENT_USER;
    FOREACH v_grantee IN ARRAY COALESCE(v_grantees, '{}') LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA lease FROM %s', v_grantee);
    END LOOP;
    PERFORM pg_catalog.set_config('pg_lease.upgrade_grantees', COALESCE(v_grantees, '{}')::text, true);
END
$$;

GRANT USAGE ON SCHEMA lease TO @extowner@ WITH GRANT OPTION;

-- The installing role may dump and restore the state.
GRANT SELECT, INSERT ON TABLE lease.leases, lease.epoch_floor TO @extowner@;

-- The roles that could use the schema before, again, granted by the installing role.
CREATE FUNCTION lease._regrant_usage_as_installer(grantees text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_grantee text;
BEGIN
    FOREACH v_grantee IN ARRAY grantees LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA lease TO %s', v_grantee);
    END LOOP;
END
$$;
ALTER FUNCTION lease._regrant_usage_as_installer(text[]) OWNER TO @extowner@;
SELECT lease._regrant_usage_as_installer(
    COALESCE(pg_catalog.current_setting('pg_lease.upgrade_grantees', true), '{}')::text[]);
DROP FUNCTION lease._regrant_usage_as_installer(text[]);

-- ---------------------------------------------------------------------------------------------------
-- Slow-path validation of (key, owner, epoch), shared by renew, release and fence.
-- ---------------------------------------------------------------------------------------------------
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

REVOKE ALL ON FUNCTION lease._check_grant_args(text, text, text, bigint) FROM PUBLIC;

-- ---------------------------------------------------------------------------------------------------
-- acquire: a blocking acquire retries at once whenever its read finds the key free.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease.acquire(
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
-- renew: the slow path's validation through lease._check_grant_args.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease.renew(
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
-- release: a release that waited for the row lock frees the key as of the end of the wait.
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
-- list: LIKE escapes written as escape strings, the same under every standard_conforming_strings.
-- ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION lease.list(prefix text DEFAULT NULL)
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
-- fence: invalid input raised through lease._check_grant_args.
-- ---------------------------------------------------------------------------------------------------
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

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.4.0'::text $$;
