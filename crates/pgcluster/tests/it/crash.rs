use crate::common::{pid_gone, start15};

#[tokio::test]
async fn crash_then_start_recovers_committed_data() {
    let mut cluster = start15();
    let client = cluster.connect("postgres").await.unwrap();
    client
        .batch_execute("CREATE TABLE t(v int); INSERT INTO t VALUES (1), (2)")
        .await
        .unwrap();
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let postmaster = cluster.postmaster_pid().unwrap() as i32;

    cluster.crash().unwrap();
    assert!(!cluster.is_running());
    assert!(pid_gone(postmaster), "postmaster {postmaster} still alive");
    assert!(pid_gone(backend), "backend {backend} still alive");
    assert!(client.simple_query("SELECT 1").await.is_err());
    cluster.crash().unwrap(); // no-op when not running

    cluster.start().unwrap();
    assert_ne!(cluster.postmaster_pid().unwrap() as i32, postmaster);
    let client = cluster.connect("postgres").await.unwrap();
    let sum: i64 = client
        .query_one("SELECT sum(v) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(sum, 3);
    assert!(
        cluster.log().contains("not properly shut down"),
        "crash recovery expected in log:\n{}",
        cluster.log()
    );
}
