use pgcluster::{ClusterBuilder, Source};

#[test]
fn ensure_15_returns_a_usable_installation() {
    let inst = pgcluster::ensure(15).unwrap();
    assert_eq!(inst.major(), 15);
    assert!(inst.bin("initdb").is_file());
}

#[tokio::test]
async fn fetch_into_downloads_16_and_runs_it() {
    let cache = tempfile::tempdir().unwrap();
    let inst = pgcluster::fetch_into(16, cache.path()).unwrap();
    assert_eq!(inst.major(), 16);
    assert_eq!(inst.source(), Source::Cache);
    assert!(
        inst.bindir()
            .starts_with(cache.path().canonicalize().unwrap())
    );
    assert!(
        inst.sharedir()
            .starts_with(cache.path().canonicalize().unwrap())
    );

    // A second fetch reuses the cache.
    let again = pgcluster::fetch_into(16, cache.path()).unwrap();
    assert_eq!(again, inst);

    let cluster = ClusterBuilder::new(inst).start().unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let version: String = client
        .query_one("SELECT version()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(version.starts_with("PostgreSQL 16."), "{version}");
}
