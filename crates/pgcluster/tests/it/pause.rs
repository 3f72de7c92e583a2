use std::time::Duration;

use crate::common::start15;

#[tokio::test]
async fn paused_server_does_not_answer_until_resumed() {
    let cluster = start15();
    let client = cluster.connect("postgres").await.unwrap();
    client.simple_query("SELECT 1").await.unwrap();

    cluster.pause();
    assert!(cluster.is_paused());
    assert!(cluster.is_running());
    let frozen =
        tokio::time::timeout(Duration::from_millis(1500), client.simple_query("SELECT 1")).await;
    assert!(frozen.is_err(), "query answered while paused");

    cluster.resume();
    assert!(!cluster.is_paused());
    let rows = tokio::time::timeout(Duration::from_secs(60), client.simple_query("SELECT 2"))
        .await
        .expect("answers after resume")
        .unwrap();
    assert!(!rows.is_empty());
    let fresh = cluster.connect("postgres").await.unwrap();
    fresh.simple_query("SELECT 3").await.unwrap();
}

#[test]
fn dropping_a_paused_cluster_cleans_up() {
    let cluster = start15();
    let pid = cluster.postmaster_pid().unwrap() as i32;
    let dir = cluster.data_dir().to_path_buf();
    cluster.pause();
    drop(cluster);
    assert!(crate::common::pid_gone(pid));
    assert!(!dir.exists());
}
