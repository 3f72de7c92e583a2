-- pg_lease: leases with fencing epochs, in pure SQL and PL/pgSQL. The whole current API.
--
-- This is the one source of the SQL API: `make` (extensions/pg_lease/Makefile) produces the
-- versioned install script of the current version, pg_lease--<default_version>.sql, from it, and
-- both are committed; a test checks they agree. Each release also adds an upgrade script
-- pg_lease--<previous>--<current>.sql holding only the changes, and the upgrade test checks that
-- a database upgraded along the chain equals a fresh install, function bodies included.
--
-- The authoritative contract is docs/SEMANTICS.md; the error codes are listed in docs/SQLSTATES.md.
-- In brief: a key is FREE, HELD(owner, epoch, expires_at) or LAPSED (held, but past its expiry by the
-- server clock). Expiry is lazy: every call reads clock_timestamp() and judges the stored row against
-- it; nothing runs in the background. Every call is one atomic statement that commits or rolls back
-- with the caller's transaction. Epochs never go back for a key, not even across lease.purge().
--
-- Privileges (ADR 0001). Under CREATE EXTENSION (a trusted extension) this script runs as the
-- bootstrap superuser, who owns every object and as whom the SECURITY DEFINER functions run. Nothing
-- such a function resolves may be created, renamed or replaced by another role: every function pins
-- `search_path = pg_catalog, pg_temp` and names every pg_lease object with its schema, and schema
-- `lease` itself, which PostgreSQL creates as the installing role, is taken over by the script (below)
-- so that the installing role can no longer rename it or create objects in it. The installing role
-- keeps what an extension owner needs: USAGE on the schema with the grant option (it decides who may
-- call the API), SELECT and INSERT on the state tables (pg_dump and restore), EXECUTE on purge and
-- force_release.
--
-- The Rust installer runs the versioned script in databases that have no extension files: it drops
-- the `\echo` line and every statement that follows a `-- pglease:extension-only` marker line, and
-- substitutes @extowner@.

\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit

-- ---------------------------------------------------------------------------------------------------
-- The schema
--
-- Schema `lease` must be empty: an object planted in it before installation could be resolved by the
-- functions below. (This check names its operators with their schema: it runs before the schema is
-- known to be clean.) Then the role running this script takes the schema over. Without extension
-- files (the Rust installer) that role is the installing role, which owns the schema already.
-- ---------------------------------------------------------------------------------------------------
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                  AND d.refobjid OPERATOR(pg_catalog.=) 'lease'::pg_catalog.regnamespace
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_default_acl'::pg_catalog.regclass)
    THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease: schema "lease" is not empty',
            HINT    = 'pg_lease installs only into a new or empty schema "lease".';
    END IF;
END
$$;

ALTER SCHEMA lease OWNER TO CURRENT_USER;
-- Privileges granted on the schema before the takeover do not survive it: a role that could create
-- objects in it could plant one that the functions below resolve. (ALTER SCHEMA ... OWNER keeps the
-- schema's grants.) What this extension grants follows.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee
          FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
         WHERE n.nspname OPERATOR(pg_catalog.=) 'lease'
           AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA lease FROM %s CASCADE',
            CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE r.grantee::pg_catalog.regrole::pg_catalog.text END);
    END LOOP;
END
$$;
GRANT USAGE ON SCHEMA lease TO @extowner@ WITH GRANT OPTION;

-- ---------------------------------------------------------------------------------------------------
-- State
-- ---------------------------------------------------------------------------------------------------

-- One row per key that was ever granted (and not purged since).
--   owner IS NULL                 FREE: released; epoch is the key's fencing counter (last epoch + 1)
--   owner IS NOT NULL             HELD while expires_at > clock_timestamp(), else LAPSED; epoch is the
--                                 epoch of that grant, which is also the key's fencing counter
-- A grant of a FREE or LAPSED key sets epoch = epoch + 1, but at least the band of the server's
-- current WAL timeline t, (t - 1) * 2^40; a release stores epoch + 1. On timeline 1 (a server never
-- promoted) the band is 0 and changes nothing; after a promotion every grant exceeds every grant the
-- old timeline made, also those the promoted standby never received (docs/SEMANTICS.md §8). For a FREE row
-- expires_at is the moment of release, so for FREE and LAPSED rows alike it says since when the key has
-- been idle (lease.purge reads it).
--   waiting                       true once someone registered as waiting for the current grant
--                                 (lease.register_waiter); its release then notifies. Every grant
--                                 resets it.
--   prior_expires_at              the expiry before the last renew or release, written in the same
--                                 update: a renew or release that waited for the row lock judges the
--                                 lease as of the end of its wait with it.
--   data                          the holder's value for the current grant (at most 8192 bytes of
--                                 text; set by acquire, replaced by renew, cleared by release and by
--                                 a grant without data). Never read by the lease logic.
--   watched_until                 someone watches the key's holder until then (lease.watch): every
--                                 grant, release and change of data notifies `pg_lease_changed`.
--
--   holder_role                   the login role (session_user) of the session that made the current
--                                 grant: only that role and its members may renew, release or fence
--                                 it (docs/SEMANTICS.md §11). NULL for a grant made before 0.8.0,
--                                 which keeps the rule of its time (the owner string suffices) until
--                                 it ends; a FREE row keeps the role of its last grant.
--   prior_epoch, prior_ended_at,  how the grant before the current one ended, as the grant that
--   prior_ended_by                followed found the row: its epoch, when it ended (its expiry for
--                                 a lapse) and 'released' or 'lapsed' ('transferred' after
--                                 lease.transfer); with prior_expires_at, its last expiry. Written
--                                 by every grant of a FREE or LAPSED key and copied into that
--                                 grant's history row (lease.grant_history): a lapse is recorded
--                                 without a write at the moment it happens. NULL for a new key.
-- Only `key` is indexed, and no call ever changes it: every renew, grant and release is a HOT update.
-- fillfactor 70 leaves room on each page for the new row versions that renewals create.
CREATE TABLE lease.leases (
    key              text COLLATE "C" NOT NULL,
    owner            text,
    epoch            bigint NOT NULL,
    expires_at       timestamptz NOT NULL,
    waiting          boolean NOT NULL DEFAULT false,
    prior_expires_at timestamptz,
    data             text,
    watched_until    timestamptz,
    holder_role      text,
    prior_epoch      bigint,
    prior_ended_at   timestamptz,
    prior_ended_by   text,
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

-- The installing role's settings (lease.configure, lease.raise_min_epoch): at most one row; no row
-- means the defaults (no ttl cap, no quarantine, no minimum epoch).
--   max_ttl              the longest ttl any call may give (22023 above it); NULL: 365 days
--   failover_quarantine  after a promotion, no new grant for this long from the first acquire on
--                        the new timeline (docs/SEMANTICS.md §8.4); NULL: off. At least max_ttl.
--   min_epoch            every grant's epoch is at least min_epoch, and 2^40 more for every
--   min_epoch_timeline   timeline after min_epoch_timeline (§8.5: moving keys between databases)
--   history              false: no grant is recorded in lease.grant_history (lease.configure_history);
--                        NULL or true: every grant is (the default)
--   history_retention    lease.purge removes the history of grants that ended longer ago; NULL: 30 days
CREATE TABLE lease.settings (
    singleton           boolean NOT NULL DEFAULT true CHECK (singleton),
    max_ttl             interval,
    failover_quarantine interval,
    min_epoch           bigint NOT NULL DEFAULT 0,
    min_epoch_timeline  bigint NOT NULL DEFAULT 1,
    history             boolean,
    history_retention   interval,
    CONSTRAINT settings_pkey PRIMARY KEY (singleton)
);

COMMENT ON TABLE lease.settings IS
    'pg_lease settings of the installing role (lease.configure, lease.raise_min_epoch); internal';

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

-- Where the failover quarantine of the current timeline began: t * 2^32 + s, t the WAL timeline and
-- s the start in Unix seconds. A sequence, because setval is not undone by a rollback: the call that
-- starts a quarantine refuses its grant with an error, and the start must outlive it.
CREATE SEQUENCE lease.quarantine_mark AS bigint MINVALUE 0 START WITH 0;

COMMENT ON SEQUENCE lease.quarantine_mark IS
    'pg_lease: the timeline and start of the current failover quarantine; internal';

-- pg_dump keeps lease state: a restored database must not hand out epochs again. (The quarantine
-- mark is not kept: a restored database with a quarantine configured starts one at its first acquire.)
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.leases', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.epoch_floor', 'WHERE NOT sentinel');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.settings', '');
-- pglease:extension-only
SELECT pg_catalog.pg_extension_config_dump('lease.grant_history', '');

REVOKE ALL ON TABLE lease.leases FROM PUBLIC;
REVOKE ALL ON TABLE lease.epoch_floor FROM PUBLIC;
REVOKE ALL ON TABLE lease.settings FROM PUBLIC;
REVOKE ALL ON TABLE lease.grant_history FROM PUBLIC;
REVOKE ALL ON SEQUENCE lease.quarantine_mark FROM PUBLIC;
-- The installing role may dump the state (pg_dump reads the tables) and restore it (COPY into them).
-- It can reset every epoch anyway (DROP EXTENSION); no other role can read or write the tables.
GRANT SELECT, INSERT ON TABLE lease.leases, lease.epoch_floor, lease.settings, lease.grant_history
    TO @extowner@;

-- ---------------------------------------------------------------------------------------------------
-- Input validation (error paths only)
--
-- The public functions check their arguments inline with one boolean expression; only when that
-- expression finds a problem do they call lease._raise_invalid_input, which names every violated
-- constraint in the DETAIL and raises 22023. Nothing is written before the checks pass.
-- Limits: keys and owners are 1..1024 bytes (far below the btree row limit of about 2700 bytes);
-- ttl is in (0, 365 days]; wait and older_than are in [0, 365 days]; data is at most 8192 bytes;
-- a semaphore's name is 1..1018 bytes and its max_holders in [1, 10000] (slot keys stay within
-- 1024 bytes); renew_many takes at most 100000 pairs; a page of lease.browse has 1..1000 rows.
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

-- Violations of a duration argument. A duration's length is date_part('epoch', value) seconds, as
-- the public functions judge it. positive: ttl (> 0); otherwise wait/older_than (>= 0). All are at
-- most 365 days.
CREATE FUNCTION lease._interval_violations(name text, value interval, positive boolean)
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

-- Violations of a data argument (NULL is allowed: no data, or keep the current data).
CREATE FUNCTION lease._data_violations(value text)
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN pg_catalog.octet_length(value) > 8192
                THEN ARRAY['data must be at most 8192 bytes (got ' || pg_catalog.octet_length(value) || ')']
                ELSE '{}'::text[] END
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
                  || 'wait and older_than are in [0, 365 days]; epoch is not NULL; '
                  || 'data is at most 8192 bytes; a semaphore name is at most 1018 bytes and '
                  || 'max_holders and slot are in [1, 10000]; renew_many takes at most 100000 distinct keys; '
                  || 'ttl is at most max_ttl when lease.configure set one; lease.history returns 1 to '
                  || '10000 rows; a history retention is in [1 second, 3650 days].';
END
$$;

-- Raise 22023 naming every violation if key, owner or epoch of a call about one grant (renew, release,
-- fence) is invalid; otherwise return. For slow paths only: the common paths check inline.
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

-- As above for a renewal, whose ttl must also be within the installing role's cap (lease.configure).
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
-- Violations of the installing role's ttl cap (lease.configure): none when max_ttl is NULL.
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

-- The installing role's ttl cap in seconds (lease.configure); 365 days when none is set.
CREATE FUNCTION lease._ttl_cap_seconds()
RETURNS double precision
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE((SELECT pg_catalog.date_part('epoch', s.max_ttl) FROM lease.settings AS s), 31536000)
$$;

-- The server's current WAL timeline: read from the name of the WAL file being written, which changes
-- at the moment of a promotion (the checkpoint's timeline changes only at the next checkpoint).
CREATE FUNCTION lease._timeline()
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
               ::pg_catalog.bit(32)::bigint
$$;

-- The end of the failover quarantine on `timeline`, given the configured length `quarantine` (NULL:
-- off, returns NULL). The quarantine starts at the first call that asks with start = true on a
-- timeline other than the one in lease.quarantine_mark; without start, a quarantine not begun yet is
-- NULL, and so is the timeline lease.configure turned the quarantine on in (start 0). Concurrent
-- first calls may each record a start: the last one counts, all are after the promotion. The end
-- may be in the past (over).
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

-- Raise LE004: no new grant during the failover quarantine. Never returns.
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

REVOKE ALL ON FUNCTION lease._text_violations(text, text, boolean, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._max_ttl_violations(interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._ttl_cap_seconds() FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._timeline() FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._quarantine_end(bigint, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._raise_quarantined(text, text, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._pause_in_quarantine(text, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._interval_violations(text, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._data_violations(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._raise_invalid_input(text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._check_grant_args(text, text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._check_grant_args(text, text, text, bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._refusal(text, text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._may_act_for(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION lease._raise_other_role(text, text, text) FROM PUBLIC;

-- ---------------------------------------------------------------------------------------------------
-- Result types of acquire and renew: named row types, whose row descriptor PostgreSQL takes from its
-- cache (it would rebuild the one of OUT parameters from the catalog on every call).
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.acquire_result AS (acquired boolean, epoch bigint, expires_at timestamptz);
CREATE TYPE lease.renew_result AS (status text, expires_at timestamptz);

-- ---------------------------------------------------------------------------------------------------
-- lease.acquire(key, owner, ttl, wait DEFAULT 0, data DEFAULT NULL) -> (acquired, epoch, expires_at)
--
-- Contract: docs/SEMANTICS.md §3. Grants a FREE, LAPSED or unknown key with the next epoch, carrying
-- `data`; returns the current grant unchanged to its owner (only its data is replaced, when `data`
-- is given); refuses (false, NULL, NULL) when another owner holds it and wait = 0; with wait > 0
-- polls without holding a row lock and raises 57014 at the deadline. 22023 on invalid input. A
-- grant made after waiting for the key's row lock counts its ttl from the end of that wait. A grant,
-- or a change of data, of a watched key notifies `pg_lease_changed` (payload: the key) at commit.
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- lease.renew(key, owner, epoch, ttl, data DEFAULT NULL) -> (status, expires_at)
--
-- Contract: docs/SEMANTICS.md §3. Extends the grant (key, owner, epoch) to server time + ttl if it is
-- still HELD, and replaces its data when `data` is given (NULL keeps it); otherwise changes nothing
-- and reports not_owner, lapsed or epoch_mismatch, in that precedence. Judged as of the moment the
-- call holds the key's row: if it waited for the row lock and the lease lapsed meanwhile, it undoes
-- its update and reports `lapsed`. A renewal that gives data to a watched key notifies
-- `pg_lease_changed`. 22023 on invalid input; 42501 (nothing changes) when the grant is HELD but was
-- made by a role the session's login role is neither nor a member of (§11).
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- lease.release(key, owner, epoch) -> status
--
-- Contract: docs/SEMANTICS.md §3. Frees the grant (key, owner, epoch) if it is still HELD (the key's
-- counter moves to epoch + 1); otherwise changes nothing and reports not_owner, lapsed or
-- epoch_mismatch, in that precedence. Judged as of the moment the call holds the row, like renew;
-- a release that waited for the row lock frees the key as of the end of that wait.
-- When a waiter registered for the released grant, sends pg_notify('pg_lease_released', key),
-- delivered when the release commits; an uncontended release sends nothing. The grant's data is
-- cleared; a watched key notifies `pg_lease_changed`. 22023 on invalid input; 42501 as renew.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.release(key text, owner text, epoch bigint, OUT status text)
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

-- ---------------------------------------------------------------------------------------------------
-- lease.force_release(key) -> epoch
--
-- An operator's end of whatever grant of `key` is HELD, whoever made it (a stuck holder): frees it
-- as release does — the key's counter moves to epoch + 1, a registered waiter and a watcher are
-- notified, the data is cleared — and returns the epoch it ended; NULL, changing nothing, when the
-- key is not HELD. The ended holder's next renew or release reports not_owner and its fence raises
-- LE001. Recorded in the history as 'forced'. Written to the server log. Waits for a transition of
-- the key in flight and judges its result. The installing role's (grantable: the admin right of
-- docs/SEMANTICS.md §11). 22023 on invalid input.
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

REVOKE ALL ON FUNCTION lease.force_release(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.force_release(text) TO @extowner@ WITH GRANT OPTION;

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
-- lease.inspect(key) -> (held, owner, epoch, expires_at, data)
--
-- The key's state as of now by the server clock; advisory (it takes no lock). Zero rows for a key
-- never leased (or purged). held = false for FREE and LAPSED keys, with owner, expires_at and data
-- NULL and epoch the key's fencing counter: every epoch <= it is stale, the next grant is greater.
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- lease.list(prefix DEFAULT NULL) -> SETOF (key, held, owner, epoch, expires_at, data)
--
-- Every key (or every key starting with `prefix`, compared byte-wise), ordered by key, with the same
-- columns and meaning as lease.inspect. For operators; callable by the roles that can call inspect.
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- lease.browse(prefix DEFAULT NULL, after DEFAULT NULL, state DEFAULT NULL, owner DEFAULT NULL,
--              max_rows DEFAULT 100)
--   -> SETOF (key, state, owner, epoch, expires_at, data, waiting, last_owner)
--
-- Contract: docs/SEMANTICS.md §16. One page of an operator console's view of the keys, in key order
-- (byte-wise): the first max_rows (1..1000) keys greater than `after` (keyset pagination: pass a
-- page's last key to get the next page; NULL or '' starts at the first key) that start with `prefix`
-- (byte-wise; `%`, `_` and `\` are ordinary characters; NULL or '' matches every key), and, when
-- given, are in `state` ('held', 'lapsed' or 'free') or are held by `owner` (exactly; a lapsed or
-- free key never matches an owner). Every row is judged at one reading of the server clock, taken
-- when the call starts, as lease.inspect judges a key:
--   state       'held' (an owner, expires_at > now), 'lapsed' (an owner, expires_at <= now: the
--               grant expired and was not released) or 'free' (no owner: released, forced)
--   owner, data the holder and its data while held, else NULL
--   epoch       the key's epoch: the current grant's, or for a free key its fencing counter
--   expires_at  the expiry while held, the moment it lapsed when lapsed, NULL when free
--   waiting     the key's waiter mark as stored (lease.register_waiter sets it for the current
--               grant, the next grant clears it) while the key is held or lapsed: someone waits
--               for the key; false for a free key
--   last_owner  for a lapsed key, the owner whose grant lapsed; else NULL
-- Advisory, like lease.list (no lock). The prefix and `after` bound a range of the primary key's
-- index, read from its start until max_rows rows qualify (a state or owner filter may read more
-- keys than it returns). 22023 naming every violation on invalid input. EXECUTE: every role with
-- USAGE on schema lease, as for lease.list. (A named row type rather than RETURNS TABLE: PL/pgSQL
-- allows no output column named like an argument, and `state` and `owner` are both.)
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.browse_entry AS (
    key text, state text, owner text, epoch bigint, expires_at timestamptz, data text,
    waiting boolean, last_owner text);

CREATE FUNCTION lease.browse(
    prefix text DEFAULT NULL, after text DEFAULT NULL, state text DEFAULT NULL,
    owner text DEFAULT NULL, max_rows integer DEFAULT 100)
RETURNS SETOF lease.browse_entry
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan        -- the arguments are constants to the planner: the
                                               -- prefix's LIKE pattern becomes a range of the index
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();   -- every row is judged at this instant
BEGIN
    IF ((browse.prefix IS NULL OR pg_catalog.octet_length(browse.prefix) <= 1024)
        AND (browse.after IS NULL OR pg_catalog.octet_length(browse.after) <= 1024)
        AND (browse.state IS NULL OR browse.state IN ('held', 'lapsed', 'free'))
        AND (browse.owner IS NULL OR (browse.owner <> ''
                                      AND pg_catalog.octet_length(browse.owner) <= 1024))
        AND browse.max_rows >= 1 AND browse.max_rows <= 1000) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.browse',
            lease._text_violations('prefix', browse.prefix, true, true)
            || lease._text_violations('after', browse.after, true, true)
            || CASE WHEN browse.state IS NULL OR browse.state IN ('held', 'lapsed', 'free')
                    THEN '{}'::text[]
                    ELSE ARRAY['state must be held, lapsed or free'] END
            || lease._text_violations('owner', browse.owner, true, false)
            || CASE WHEN browse.max_rows IS NULL THEN ARRAY['max_rows must not be NULL']
                    WHEN browse.max_rows < 1 OR browse.max_rows > 1000
                    THEN ARRAY['max_rows must be in [1, 1000] (got ' || browse.max_rows || ')']
                    ELSE '{}'::text[] END);
    END IF;
    RETURN QUERY
        SELECT s.key,
               CASE WHEN s.free THEN 'free' WHEN s.held THEN 'held' ELSE 'lapsed' END,
               CASE WHEN s.held THEN s.owner END,
               s.epoch,
               CASE WHEN NOT s.free THEN s.expires_at END,
               CASE WHEN s.held THEN s.data END,
               s.waiting AND NOT s.free,
               CASE WHEN NOT s.free AND NOT s.held THEN s.owner END
          FROM (SELECT l.key, l.owner IS NULL AS free,
                       l.owner IS NOT NULL AND l.expires_at > v_now AS held,
                       l.owner, l.epoch, l.expires_at, l.data, l.waiting
                  FROM lease.leases AS l
                 WHERE (browse.prefix IS NULL
                        OR l.key LIKE pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
                               browse.prefix, E'\\', E'\\\\'), '%', E'\\%'), '_', E'\\_') || '%')
                   AND (browse.after IS NULL OR l.key > browse.after)
                   AND (browse.state IS NULL
                        OR (browse.state = 'free' AND l.owner IS NULL)
                        OR (browse.state = 'held' AND l.owner IS NOT NULL AND l.expires_at > v_now)
                        OR (browse.state = 'lapsed' AND l.owner IS NOT NULL
                            AND l.expires_at <= v_now))
                   AND (browse.owner IS NULL
                        OR (l.owner = browse.owner AND l.expires_at > v_now))) AS s
         ORDER BY s.key
         LIMIT browse.max_rows;
END
$$;

-- ---------------------------------------------------------------------------------------------------
-- lease.summary(expiring_within DEFAULT interval '10 seconds')
--   -> (held, lapsed, free, expiring, waiting)
--
-- Contract: docs/SEMANTICS.md §16. How many keys are in each state, judged as lease.browse judges
-- them (at one reading of the server clock): held, lapsed and free; expiring: the held keys whose
-- expiry is at most expiring_within (a duration in [0, 365 days]) from now, the leases that lapse
-- that soon unless their holders renew; waiting: the held or lapsed keys whose waiter mark is set
-- (browse's `waiting`). One scan of lease.leases; advisory (no lock). 22023 on invalid input.
-- EXECUTE: every role with USAGE on schema lease, as for lease.browse.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.summary(expiring_within interval DEFAULT interval '10 seconds')
RETURNS TABLE (held bigint, lapsed bigint, free bigint, expiring bigint, waiting bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
ROWS 1
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();   -- every row is judged at this instant
BEGIN
    IF (pg_catalog.date_part('epoch', summary.expiring_within) >= 0
        AND pg_catalog.date_part('epoch', summary.expiring_within) <= 31536000) IS NOT TRUE
    THEN
        PERFORM lease._raise_invalid_input('lease.summary',
            lease._interval_violations('expiring_within', summary.expiring_within, false));
    END IF;
    RETURN QUERY
        SELECT pg_catalog.count(*) FILTER (WHERE l.owner IS NOT NULL AND l.expires_at > v_now),
               pg_catalog.count(*) FILTER (WHERE l.owner IS NOT NULL AND l.expires_at <= v_now),
               pg_catalog.count(*) FILTER (WHERE l.owner IS NULL),
               pg_catalog.count(*) FILTER (
                   WHERE l.owner IS NOT NULL AND l.expires_at > v_now
                     AND l.expires_at <= v_now + pg_catalog.date_part('epoch', summary.expiring_within)
                                                 * interval '1 second'),
               pg_catalog.count(*) FILTER (WHERE l.owner IS NOT NULL AND l.waiting)
          FROM lease.leases AS l;
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
-- LE002 (the lease lapsed), LE003 (another epoch), then 42501 (a grant of a role the session may not
-- act for, as renew). Writes that follow a successful fence in the same transaction are ordered
-- before any later grant of the key. 22023 on invalid input.
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

-- ---------------------------------------------------------------------------------------------------
-- lease.renew_many(owner, keys, epochs, ttl) -> SETOF (key, status, expires_at)
--
-- Contract: docs/SEMANTICS.md §3. One call renews many grants of one owner: for each pair
-- (keys[i], epochs[i]) the judgement of lease.renew(keys[i], owner, epochs[i], ttl) — `ok` with the
-- new expiry, or not_owner, lapsed, epoch_mismatch, in that precedence — one row per pair, in no
-- particular order. It never waits for a key's row lock: a key whose row another transaction holds
-- locked (a lease.fence in progress, a concurrent call on the key) is not judged and reports `busy`
-- (renew it on its own with lease.renew), so one long guarded transaction cannot delay the renewal
-- of the other keys. Data is left as it is. The keys must be distinct; at most 100000 pairs.
-- 22023 on invalid input, and nothing is renewed.
-- ---------------------------------------------------------------------------------------------------

-- Raise 22023 naming every violation if the arguments of renew_many are invalid; otherwise return.
CREATE FUNCTION lease._check_renew_many_args(owner text, keys text[], epochs bigint[], ttl interval)
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

-- Inside renew_many's single statement: give up on it and take the careful path (never escapes
-- renew_many).
CREATE FUNCTION lease._renew_many_recheck()
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'LE900', MESSAGE = 'lease.renew_many: recheck';
END
$$;

-- Inside renew_many's single statement: the refusal of a pair that was not renewed, or a recheck
-- when the pair is invalid (the careful path raises 22023) or the row changed since the statement
-- began (the careful path judges it again).
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
    v_status := lease._refusal('lease.renew_many', key, owner, epoch);
    IF v_status = 'ok' THEN
        PERFORM lease._renew_many_recheck();     -- (a member of the grant's role: lease.renew judges it)
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

-- ---------------------------------------------------------------------------------------------------
-- lease.watch(key) -> (held, owner, epoch, expires_at, data, lapses_in)
--
-- For observers of a key's holder (an election's followers). Marks the key as watched for the next
-- hour, so that every grant, release and change of data of it notifies channel `pg_lease_changed`
-- (payload: the key) when it commits, and returns the key's state as inspect does, with lapses_in =
-- expires_at - now on the server clock when held (a lapse sends nothing: wake up then). LISTEN before
-- calling it; call it again on every wake-up (it renews the mark when less than 30 minutes are left,
-- otherwise it only reads). A key without a row gets a FREE one at the epoch floor, so that its first
-- grant is seen (its epochs are those it would have had). 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- Semaphores: at most max_holders holders of a named semaphore at once.
--
-- Contract: docs/SEMANTICS.md §12. Slot i (1-based) of semaphore S is the ordinary lease key
-- lease.slot_key(S, i) = S || '#' || i: a holder renews, releases and fences its slot with the lease
-- functions, and its fencing token is (slot key, epoch). A grant is made only in a slot numbered
-- 1..max_holders and only while fewer than max_holders slots of S are held, so callers that agree
-- on max_holders never see more than max_holders holders. The limit is an argument of each call,
-- not stored: raising it takes effect at once; lowering it refuses new grants until the holders
-- left (including those in slots above the new limit, which keep their grants and may renew them)
-- are fewer than the new limit.
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.slot_result AS (acquired boolean, slot integer, key text, epoch bigint, expires_at timestamptz);

-- Violations of a semaphore name (slot keys must fit in 1024 bytes: 1018 + '#' + up to 5 digits).
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

-- Violations of a max_holders (or slot) argument: in [1, 10000].
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

-- lease.slot_key(semaphore, slot) -> text: the lease key of a slot. 22023 on invalid input.
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

-- ---------------------------------------------------------------------------------------------------
-- lease.acquire_slot(semaphore, owner, ttl, max_holders, wait DEFAULT 0, data DEFAULT NULL)
--   -> (acquired, slot, key, epoch, expires_at)
--
-- Contract: docs/SEMANTICS.md §12. Returns the owner's current slot of the semaphore if it holds one
-- (idempotent, as acquire; data replaced when given); otherwise grants the lowest free or lapsed
-- slot in 1..max_holders through lease.acquire (a new epoch for that slot) if fewer than
-- max_holders slots are held; otherwise refuses (false, NULLs) when wait = 0, and with wait > 0
-- polls without holding a row lock and raises 57014 at the deadline. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- lease.list_slots(semaphore) -> SETOF (slot, key, held, owner, epoch, expires_at, data)
--
-- Every slot of the semaphore that has a row, ordered by slot, with the columns and meaning of
-- lease.inspect. Advisory (no lock). 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
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

-- ---------------------------------------------------------------------------------------------------
-- lease.register_slot_waiter(semaphore) -> (holders, lapses_in)
--
-- For clients that wait for a slot without polling, as lease.register_waiter for a key: marks every
-- held slot of the semaphore as awaited (its release notifies `pg_lease_released` with the slot's
-- key) and returns how many slots are held and lapses_in = the time until the first of them lapses
-- by the server clock (NULL when none is held). LISTEN first; then try lease.acquire_slot on a
-- notification for one of the semaphore's slot keys, after lapses_in, or at once if holders is
-- below the limit. 22023 on invalid input.
-- ---------------------------------------------------------------------------------------------------
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
-- lease.purge(older_than) -> bigint
--
-- Deletes the rows of keys that have been FREE or LAPSED for longer than `older_than` (FREE: since the
-- release; LAPSED: since the expiry) and returns how many it deleted. HELD keys are never touched,
-- nor watched ones (lease.watch: the mark would go with the row). Also deletes the history of grants
-- that ended more than history_retention ago (lease.configure_history; 30 days by default).
-- Before deleting, it raises the epoch floor to the largest epoch it removes, so a purged key that is
-- acquired again starts above every epoch it ever had: epochs never go back. Waits for transactions
-- that are creating new keys (and they for it). Executable by the role that installed the extension,
-- which may grant it on (WITH GRANT OPTION) to operator roles. 22023 on invalid input.
-- Rows that an in-flight transaction has locked are skipped (their state is about to change; the next
-- purge judges them): purge never waits on a lease row while it holds the epoch-floor lock, so it
-- cannot deadlock with a transaction that both holds a lease row and creates a new key.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.purge(older_than interval)
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

REVOKE ALL ON FUNCTION lease.purge(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.purge(interval) TO @extowner@ WITH GRANT OPTION;

-- ---------------------------------------------------------------------------------------------------
-- lease.configuration() -> (max_ttl, failover_quarantine, timeline, quarantine_until, min_epoch,
--                          history, history_retention)
--
-- Contract: docs/SEMANTICS.md §8.4-8.5. The installing role's settings as they apply now: the ttl cap
-- and the quarantine length (NULL: none), the server's WAL timeline, the end of the current failover
-- quarantine (NULL when none is configured or none began on this timeline; in the past when over), and
-- the least epoch a grant gets now (the timeline band or the min epoch, whichever is higher), whether
-- grants are recorded in the history and for how long purge keeps an ended grant's. Reads only: it
-- never starts a quarantine.
-- ---------------------------------------------------------------------------------------------------
CREATE TYPE lease.configuration_result AS (
    max_ttl interval, failover_quarantine interval, timeline bigint,
    quarantine_until timestamptz, min_epoch bigint, history boolean, history_retention interval);

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
-- lease.configure(max_ttl, failover_quarantine DEFAULT NULL) -> lease.configuration()
--
-- Contract: docs/SEMANTICS.md §8.4. Sets the installing role's ttl cap (NULL: none; every acquire,
-- acquire_slot, renew and renew_many with a longer ttl gets 22023 once this commits) and the failover
-- quarantine: after a promotion, no new grant for that long from the first acquire on the new
-- timeline. failover_quarantine NULL (or omitted) keeps the current quarantine, '0' turns it off: a
-- call that only changes the cap never turns the quarantine off. A quarantine needs a cap and is at
-- least as long as it (judged with the quarantine that will apply). Enabling the quarantine does not
-- start one on the current timeline; changing its length moves the end of a running one. 22023 on
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

REVOKE ALL ON FUNCTION lease.configure(interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease.configure(interval, interval) TO @extowner@ WITH GRANT OPTION;

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

-- ---------------------------------------------------------------------------------------------------
-- lease.version() -> text: the version of the pg_lease SQL API installed in this database.
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.10.0'::text $$;

-- ---------------------------------------------------------------------------------------------------
-- Who may call the API: every role, by default. The grant is made by the installing role (through a
-- function it owns, for the moment of this script), so that it can narrow it later:
--   REVOKE USAGE ON SCHEMA lease FROM PUBLIC; GRANT USAGE ON SCHEMA lease TO app_role;
-- ---------------------------------------------------------------------------------------------------
CREATE FUNCTION lease._grant_usage_as_installer()
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    GRANT USAGE ON SCHEMA lease TO PUBLIC;
END
$$;
ALTER FUNCTION lease._grant_usage_as_installer() OWNER TO @extowner@;
SELECT lease._grant_usage_as_installer();
DROP FUNCTION lease._grant_usage_as_installer();

-- ---------------------------------------------------------------------------------------------------
-- Last: nothing in the schema belongs to another role. (A role that could create in the schema
-- while this script ran, before the takeover committed, could have planted an object; the install
-- fails rather than keep it.)
-- ---------------------------------------------------------------------------------------------------
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                 JOIN pg_catalog.pg_shdepend AS s
                   ON s.classid OPERATOR(pg_catalog.=) d.classid AND s.objid OPERATOR(pg_catalog.=) d.objid
                WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                  AND d.refobjid OPERATOR(pg_catalog.=) 'lease'::pg_catalog.regnamespace
                  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND s.dbid OPERATOR(pg_catalog.=) (SELECT db.oid FROM pg_catalog.pg_database AS db
                                                      WHERE db.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                  AND s.deptype OPERATOR(pg_catalog.=) 'o'
                  AND s.refobjid OPERATOR(pg_catalog.<>) (SELECT ro.oid FROM pg_catalog.pg_roles AS ro
                                                          WHERE ro.rolname OPERATOR(pg_catalog.=) CURRENT_USER))
    THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = 'pg_lease: schema "lease" holds objects of another role',
            HINT    = 'Another role created objects in schema "lease" during the installation; drop them and install again.';
    END IF;
END
$$;
