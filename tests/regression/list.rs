//! lease.list: the operator's view of many keys.

use pglease_tests::{key, server};

use crate::{grant, lapse, release};

type Listed = (String, bool, Option<String>, i64);

async fn list(c: &tokio_postgres::Client, prefix: Option<&str>) -> Vec<Listed> {
    c.query(
        "SELECT key, held, owner, epoch FROM lease.list($1)",
        &[&prefix],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

#[tokio::test]
async fn list_shows_keys_under_a_prefix_in_key_order_with_inspect_semantics() {
    let c = server().app().await;
    let p = key("list_prefix", "");
    grant(&c, &format!("{p}b-held"), "worker-b", "1 hour").await;
    grant(&c, &format!("{p}a-released"), "worker-a", "1 hour").await;
    release(&c, &format!("{p}a-released"), "worker-a", 1).await;
    lapse(&c, &format!("{p}c-lapsed"), "worker-c").await;
    assert_eq!(
        list(&c, Some(&p)).await,
        vec![
            (format!("{p}a-released"), false, None, 2),
            (format!("{p}b-held"), true, Some("worker-b".into()), 1),
            (format!("{p}c-lapsed"), false, None, 1),
        ]
    );
}

#[tokio::test]
async fn list_prefix_treats_like_wildcards_literally() {
    let c = server().app().await;
    let p = key("list_wild", "");
    for k in ["a_c", "abc", "a%c", "a\\c", "a%"] {
        grant(&c, &format!("{p}{k}"), "w", "1 hour").await;
    }
    let keys = |v: Vec<Listed>| v.into_iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(
        keys(list(&c, Some(&format!("{p}a_"))).await),
        vec![format!("{p}a_c")]
    );
    assert_eq!(
        keys(list(&c, Some(&format!("{p}a%"))).await),
        vec![format!("{p}a%"), format!("{p}a%c")]
    );
    assert_eq!(
        keys(list(&c, Some(&format!("{p}a\\"))).await),
        vec![format!("{p}a\\c")]
    );
}

#[tokio::test]
async fn list_without_prefix_includes_every_key() {
    let c = server().app().await;
    let k = key("list_all", "k");
    grant(&c, &k, "w", "1 hour").await;
    let all = list(&c, None).await;
    assert!(all.iter().any(|r| r.0 == k));
    let sorted = all
        .windows(2)
        .all(|w| w[0].0.as_bytes() < w[1].0.as_bytes());
    assert!(sorted, "ordered by key, byte-wise");
    assert!(
        list(&c, Some("")).await.iter().any(|r| r.0 == k),
        "an empty prefix matches everything"
    );
}
