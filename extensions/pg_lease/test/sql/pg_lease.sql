-- The smoke suite of `make installcheck`: pg_lease installs and its calls answer as documented.
-- The full suites are in Rust (tests/). Output holds no timestamps, owners' host names or ids: only
-- statuses, epochs, booleans and SQLSTATEs, so it is the same on every run and every version.
CREATE EXTENSION pg_lease;
SELECT lease.version() = extversion AS version_is_installed
  FROM pg_extension WHERE extname = 'pg_lease';
-- A grant, a refusal, a renewal and the refused renewals, in the documented order of precedence.
SELECT acquired, epoch, expires_at > clock_timestamp() AS expires_later
  FROM lease.acquire('smoke', 'worker-a', interval '30 seconds');
SELECT acquired, epoch IS NULL AS no_epoch
  FROM lease.acquire('smoke', 'worker-b', interval '30 seconds');
SELECT status, expires_at > clock_timestamp() AS expires_later
  FROM lease.renew('smoke', 'worker-a', 1, interval '30 seconds');
SELECT status FROM lease.renew('smoke', 'worker-b', 1, interval '30 seconds');
SELECT status FROM lease.renew('smoke', 'worker-a', 2, interval '30 seconds');
-- Fencing inside a transaction.
BEGIN;
SELECT lease.fence('smoke', 'worker-a', 1) > clock_timestamp() AS fenced_in;
COMMIT;
-- Release, and the next grant's higher epoch.
SELECT status FROM lease.release('smoke', 'worker-a', 1);
SELECT held, epoch FROM lease.inspect('smoke');
SELECT acquired, epoch FROM lease.acquire('smoke', 'worker-b', interval '30 seconds');
SELECT key, held, owner, epoch FROM lease.list('smo');
-- The operator console's view: a page of keys with their states, and the count of keys per state.
SELECT key, state, owner, epoch, expires_at > clock_timestamp() AS expires_later, waiting, last_owner
  FROM lease.browse('smo');
SELECT held, lapsed, free, expiring, waiting FROM lease.summary();
-- The history of grants, and a handover to a named successor with the next epoch.
SELECT epoch, owner, ended_by FROM lease.history('smoke');
SELECT status, epoch FROM lease.transfer('smoke', 'worker-b', 3, 'worker-c', interval '30 seconds');
SELECT epoch, owner, ended_by, ended_at = (SELECT granted_at FROM lease.history('smoke') WHERE epoch = 4)
       AS seamless
  FROM lease.history('smoke');
-- Refusals by SQLSTATE: invalid input (22023, nothing changed), a fenced-out former holder (LE001).
\set VERBOSITY sqlstate
SELECT * FROM lease.acquire('', 'worker-a', interval '0 seconds');
SELECT lease.fence('smoke', 'worker-a', 1);
\set VERBOSITY default
SELECT held, owner, epoch FROM lease.inspect('smoke');
DROP EXTENSION pg_lease;
