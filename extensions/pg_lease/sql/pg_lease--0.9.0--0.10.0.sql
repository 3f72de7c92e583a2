-- pg_lease 0.9.0 -> 0.10.0: two read-only calls for an operator console (docs/SEMANTICS.md §16).
--
-- Added: lease.browse(prefix, after, state, owner, max_rows), one page of keys in key order with
--        their state judged by the server clock ('held', 'lapsed', 'free'), filtered and paginated
--        by key (a range of the primary key's index), and its row type lease.browse_entry;
--        lease.summary(expiring_within), the number of keys in each state, of held keys lapsing
--        within a duration, and of keys someone waits for, in one scan. Both are callable by every
--        role with USAGE on schema lease, as lease.list is.
-- Nothing else changes (no table; of the existing functions only lease.version(), re-created).

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.10.0'" to load this file. \quit

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

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.10.0'::text $$;
