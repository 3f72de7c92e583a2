//! DROP EXTENSION removes all lease state; CREATE EXTENSION starts a new installation whose epochs
//! begin again at 1 (F26, F27).

use pglease_tests::{Wait, await_backend_waiting, backend_pid};

use crate::node::Node;
use crate::{LIMIT, code_of, grant, grant_until, inspect, release, renew, within};

/// F26: dropping the extension while a lease is held just removes the state (the holder is not
/// told); the holder's next call fails closed with an error; a recreated extension starts over:
/// no rows, floor 0, epochs from 1, and the old (owner, epoch) means nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_and_recreate_extension_starts_over() {
    let node = Node::start();
    let holder = node.app().await;
    for _ in 0..2 {
        let e = grant(&holder, "k", "worker-a", "1 hour").await;
        assert_eq!(release(&holder, "k", "worker-a", e).await, "ok");
    }
    let e = grant(&holder, "k", "worker-a", "1 hour").await;
    assert_eq!(e, 5);

    let admin = node.admin().await;
    within(
        "DROP EXTENSION",
        admin.batch_execute("DROP EXTENSION pg_lease"),
    )
    .await
    .expect("an idle holder does not stop the drop");
    let err = holder
        .query_one(
            "SELECT status FROM lease.renew('k', 'worker-a', $1, '1 hour')",
            &[&e],
        )
        .await
        .expect_err("the API is gone");
    let code = code_of(&err);
    assert!(
        code == "3F000" || code == "42883",
        "undefined schema or function, got {code}"
    );

    admin
        .batch_execute("CREATE EXTENSION pg_lease")
        .await
        .unwrap();
    assert_eq!(inspect(&holder, "k").await, None);
    assert_eq!(
        node.state().await,
        "\nfloor:0/t",
        "a new, empty installation"
    );
    assert_eq!(
        renew(&holder, "k", "worker-a", e, "1 hour").await.0,
        "not_owner"
    );
    assert_eq!(
        grant_until(&holder, "k", "worker-b", "1 hour").await.0,
        1,
        "epochs start over"
    );
}

/// F27: DROP EXTENSION waits for every open transaction that used the lease tables (here a holder
/// with an uncommitted renew), then removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_extension_waits_for_open_transactions_that_used_it() {
    let node = Node::start();
    let observer = node.superuser().await;
    let holder = node.app().await;
    let e = grant(&holder, "k", "worker-a", "1 hour").await;
    holder.batch_execute("BEGIN").await.unwrap();
    assert_eq!(renew(&holder, "k", "worker-a", e, "2 hours").await.0, "ok");

    let admin = node.admin().await;
    let admin_pid = backend_pid(&admin).await;
    let drop = tokio::spawn(async move { admin.batch_execute("DROP EXTENSION pg_lease").await });
    await_backend_waiting(&observer, admin_pid, Wait::Lock, LIMIT).await;
    assert_eq!(renew(&holder, "k", "worker-a", e, "3 hours").await.0, "ok");
    holder.batch_execute("COMMIT").await.unwrap();
    within("DROP EXTENSION", drop)
        .await
        .unwrap()
        .expect("the drop completes once the transaction ends");
    let gone: bool = observer
        .query_one(
            "SELECT to_regclass('lease.leases') IS NULL AND NOT EXISTS \
               (SELECT FROM pg_extension WHERE extname = 'pg_lease')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(gone);
}
