-- pg_lease 0.4.0 -> 0.5.0: a privilege fix (ADR 0001; found while hardening the queue extension).
--
-- Fixed: installing into a schema `lease` that existed already kept the privileges granted on it:
--        CREATE on it granted before the installation (by the role that created the schema) let
--        that grantee plant objects that the SECURITY DEFINER functions resolved and ran as the
--        bootstrap superuser. A fresh installation now revokes every privilege granted on the schema
--        before it, and fails (55000) if, at its end, the schema holds an object of another role.
--        This update revokes CREATE on schema `lease` from every role but its owner; USAGE grants
--        (who may call the API) are kept.

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.5.0'" to load this file. \quit

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee
          FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
         WHERE n.nspname OPERATOR(pg_catalog.=) 'lease'
           AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
           AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
    LOOP
        EXECUTE pg_catalog.format('REVOKE CREATE ON SCHEMA lease FROM %s CASCADE',
            CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE r.grantee::pg_catalog.regrole::pg_catalog.text END);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0.5.0'::text $$;
