//! A grant belongs to the login role that took it (SEMANTICS §11, 0.8.0): knowing a lease's key,
//! owner string and epoch — which `inspect` and `list` show to every role — is not enough to renew,
//! release or fence it. The granting role and its members may; every other role gets 42501 and
//! changes nothing, while a call on a grant that is no longer current keeps its status. The
//! installing role, and roles it grants the right to, end any grant with `lease.force_release`.

use pglease_tests::{ADMIN, APP, APP_MEMBER, OTHER_APP, expect_error, server, state_of};

use crate::{grant, inspect, release, renew};

/// A fresh database with pg_lease and connections as the application role, a member of it,
/// another application's role, the installing role and the superuser.
struct Roles {
    app: tokio_postgres::Client,
    member: tokio_postgres::Client,
    other: tokio_postgres::Client,
    admin: tokio_postgres::Client,
    su: tokio_postgres::Client,
}

async fn roles(label: &str) -> Roles {
    let s = server();
    let db = s.fresh_db_with_extension(label);
    Roles {
        app: s.connect_as(&db, APP).await,
        member: s.connect_as(&db, APP_MEMBER).await,
        other: s.connect_as(&db, OTHER_APP).await,
        admin: s.connect_as(&db, ADMIN).await,
        su: s.connect_super(&db).await,
    }
}

/// Every call that acts on the grant (key, owner, epoch), with the ttl it gives.
fn acting_calls(key: &str, owner: &str, epoch: i64) -> Vec<String> {
    vec![
        format!("SELECT lease.renew('{key}', '{owner}', {epoch}, '1 hour')"),
        format!("SELECT lease.renew('{key}', '{owner}', {epoch}, '1 hour', 'data')"),
        format!(
            "SELECT * FROM lease.renew_many('{owner}', ARRAY['{key}'], ARRAY[{epoch}::bigint], '1 hour')"
        ),
        format!("SELECT lease.release('{key}', '{owner}', {epoch})"),
        format!("BEGIN; SELECT lease.fence('{key}', '{owner}', {epoch}); COMMIT"),
    ]
}

#[tokio::test]
async fn another_role_that_knows_the_owner_and_epoch_can_neither_renew_release_nor_fence() {
    let r = roles("roles_other").await;
    let epoch = grant(&r.app, "k", "w", "1 hour").await;
    let before = state_of(&r.su, "").await;
    for sql in acting_calls("k", "w", epoch) {
        let e = expect_error(&r.other, &sql).await;
        assert_eq!(e.code, "42501", "{sql}");
        r.other.batch_execute("ROLLBACK").await.ok();
        assert_eq!(state_of(&r.su, "").await, before, "{sql} changed nothing");
    }
    // The same owner string under another role is another holder: not the grant back, no new data.
    let (acquired, got_epoch): (bool, Option<i64>) = {
        let row = r
            .other
            .query_one(
                "SELECT acquired, epoch FROM lease.acquire('k', 'w', '1 hour', '0', 'theirs')",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((acquired, got_epoch), (false, None));
    assert_eq!(state_of(&r.su, "").await, before, "acquire changed nothing");
    // The lease is still the application's.
    assert_eq!(renew(&r.app, "k", "w", epoch, "1 hour").await.0, "ok");
    assert_eq!(release(&r.app, "k", "w", epoch).await, "ok");
}

#[tokio::test]
async fn a_call_on_a_grant_that_is_not_current_keeps_its_status_under_any_role() {
    let r = roles("roles_statuses").await;
    let epoch = grant(&r.app, "k", "w", "1 hour").await;
    // Another epoch, another owner, an unknown key: the statuses of every role, as before.
    assert_eq!(
        renew(&r.other, "k", "w", epoch + 1, "1 hour").await.0,
        "epoch_mismatch"
    );
    assert_eq!(release(&r.other, "k", "someone", epoch).await, "not_owner");
    assert_eq!(
        renew(&r.other, "unknown", "w", 1, "1 hour").await.0,
        "not_owner"
    );
    for (sql, code) in [
        (
            format!("SELECT lease.fence('k', 'w', {})", epoch + 1),
            "LE003",
        ),
        (format!("SELECT lease.fence('k', 'x', {epoch})"), "LE001"),
    ] {
        assert_eq!(expect_error(&r.other, &sql).await.code, code, "{sql}");
    }
    // Invalid input is 22023 before anything, for every role.
    assert_eq!(
        expect_error(
            &r.other,
            &format!("SELECT lease.renew('k', '', {epoch}, '1 hour')")
        )
        .await
        .code,
        "22023"
    );
}

#[tokio::test]
async fn a_member_of_the_granting_role_acts_on_its_leases_and_the_grant_keeps_its_role() {
    let r = roles("roles_member").await;
    let epoch = grant(&r.app, "k", "w", "1 hour").await;
    assert_eq!(renew(&r.member, "k", "w", epoch, "1 hour").await.0, "ok");
    let row = r
        .member
        .query_one(
            "SELECT status FROM lease.renew_many('w', ARRAY['k'], ARRAY[$1::bigint], '1 hour')",
            &[&epoch],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ok");
    r.member
        .batch_execute(&format!(
            "BEGIN; SELECT lease.fence('k', 'w', {epoch}); COMMIT"
        ))
        .await
        .unwrap();
    // The member's acquire returns the grant (idempotent), still the application role's.
    let row = r
        .member
        .query_one(
            "SELECT acquired, epoch FROM lease.acquire('k', 'w', '1 hour')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, bool>(0), row.get::<_, Option<i64>>(1)),
        (true, Some(epoch))
    );
    let role: Option<String> =
        r.su.query_one("SELECT holder_role FROM lease.leases WHERE key = 'k'", &[])
            .await
            .unwrap()
            .get(0);
    assert_eq!(role.as_deref(), Some(APP));
    // But the application role is not a member of its member: the member's own lease is its own.
    let mine = grant(&r.member, "m", "w", "1 hour").await;
    assert_eq!(
        expect_error(
            &r.app,
            &format!("SELECT lease.renew('m', 'w', {mine}, '1 hour')")
        )
        .await
        .code,
        "42501"
    );
    assert_eq!(release(&r.member, "k", "w", epoch).await, "ok");
}

#[tokio::test]
async fn a_grant_records_the_login_role_also_under_set_role() {
    let r = roles("roles_set_role").await;
    // The login role counts, not the role the session switched to: `app_worker` may SET ROLE app,
    // and its grants stay `app_worker`'s.
    r.member
        .batch_execute(&format!("SET ROLE {APP}"))
        .await
        .unwrap();
    let epoch = grant(&r.member, "k", "w", "1 hour").await;
    let role: Option<String> =
        r.su.query_one("SELECT holder_role FROM lease.leases WHERE key = 'k'", &[])
            .await
            .unwrap()
            .get(0);
    assert_eq!(role.as_deref(), Some(APP_MEMBER));
    assert_eq!(
        expect_error(&r.app, &format!("SELECT lease.release('k', 'w', {epoch})"))
            .await
            .code,
        "42501"
    );
}

#[tokio::test]
async fn the_installing_role_force_releases_any_lease_and_may_grant_that_right() {
    let r = roles("roles_force").await;
    let epoch = grant(&r.app, "k", "w", "1 hour").await;
    // Not for the application roles.
    for c in [&r.app, &r.other] {
        assert_eq!(
            expect_error(c, "SELECT lease.force_release('k')")
                .await
                .code,
            "42501"
        );
    }
    let ended: Option<i64> = r
        .admin
        .query_one("SELECT lease.force_release('k')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, Some(epoch));
    assert_eq!(
        inspect(&r.app, "k").await,
        Some((false, None, epoch + 1, None))
    );
    // The ended holder is refused as after any takeover.
    assert_eq!(
        renew(&r.app, "k", "w", epoch, "1 hour").await.0,
        "not_owner"
    );
    assert_eq!(
        expect_error(&r.app, &format!("SELECT lease.fence('k', 'w', {epoch})"))
            .await
            .code,
        "LE001"
    );
    // A key that is not HELD: NULL, nothing changes.
    let before = state_of(&r.su, "").await;
    for key in ["k", "unknown"] {
        let ended: Option<i64> = r
            .admin
            .query_one("SELECT lease.force_release($1)", &[&key])
            .await
            .unwrap()
            .get(0);
        assert_eq!(ended, None, "{key}");
    }
    assert_eq!(state_of(&r.su, "").await, before);
    assert_eq!(
        expect_error(&r.admin, "SELECT lease.force_release('')")
            .await
            .code,
        "22023"
    );
    // The right is grantable: an operator role may then end the other application's grant.
    let theirs = grant(&r.other, "t", "x", "1 hour").await;
    r.admin
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION lease.force_release(text) TO {APP}"
        ))
        .await
        .unwrap();
    let ended: Option<i64> = r
        .app
        .query_one("SELECT lease.force_release('t')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, Some(theirs));
}

/// A grant made before 0.8.0 has no role: it keeps the rule of its time (the owner string and epoch
/// suffice) until it ends; the next grant of the key belongs to its role.
#[tokio::test]
async fn a_grant_made_before_the_upgrade_keeps_the_owner_string_rule_until_it_ends() {
    let s = server();
    let db = s.fresh_db("roles_upgrade");
    s.psql_as(&db, ADMIN, "CREATE EXTENSION pg_lease VERSION '0.7.1';");
    let app = s.connect_as(&db, APP).await;
    let other = s.connect_as(&db, OTHER_APP).await;
    let old = grant(&app, "k", "w", "1 hour").await;
    s.psql_as(&db, ADMIN, "ALTER EXTENSION pg_lease UPDATE;");
    assert_eq!(renew(&other, "k", "w", old, "1 hour").await.0, "ok");
    other
        .batch_execute(&format!(
            "BEGIN; SELECT lease.fence('k', 'w', {old}); COMMIT"
        ))
        .await
        .unwrap();
    assert_eq!(release(&other, "k", "w", old).await, "ok");
    let new = grant(&app, "k", "w", "1 hour").await;
    assert_eq!(
        expect_error(&other, &format!("SELECT lease.release('k', 'w', {new})"))
            .await
            .code,
        "42501"
    );
}
