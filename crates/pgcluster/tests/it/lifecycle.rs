use std::time::Duration;

use pgcluster::ClusterBuilder;

use crate::common::{pg15, start15};

#[tokio::test]
async fn start_connect_and_query_version() {
    let cluster = start15();
    assert!(cluster.is_running());
    assert!(cluster.postmaster_pid().is_some());
    let client = cluster.connect("postgres").await.unwrap();
    let version: String = client
        .query_one("SELECT version()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(version.starts_with("PostgreSQL 15."), "{version}");

    let tcp = cluster.connect_tcp("postgres").await.unwrap();
    let one: i32 = tcp.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);

    let (by_string, conn) = tokio_postgres::connect(
        &cluster.connection_string("postgres"),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    by_string.simple_query("SELECT 1").await.unwrap();
    let (by_url, conn) = tokio_postgres::connect(&cluster.url("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    by_url.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn settings_are_applied() {
    let cluster = ClusterBuilder::new(pg15())
        .setting("work_mem", "7MB")
        .setting("max_connections", "42")
        .start()
        .unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let work_mem: String = client.query_one("SHOW work_mem", &[]).await.unwrap().get(0);
    assert_eq!(work_mem, "7MB");
    let max: String = client
        .query_one("SHOW max_connections", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(max, "42");
    let fsync: String = client.query_one("SHOW fsync", &[]).await.unwrap().get(0);
    assert_eq!(fsync, "on");
}

#[test]
fn psql_and_create_database() {
    let cluster = start15();
    cluster.create_database("app db").unwrap();
    let out = cluster
        .psql("app db", "SELECT current_database(), 40 + 2")
        .unwrap();
    assert_eq!(out.trim(), "app db|42");
    let err = cluster
        .psql("postgres", "SELECT * FROM missing_table")
        .unwrap_err();
    assert!(err.to_string().contains("missing_table"), "{err}");
}

#[tokio::test]
async fn stop_then_start_keeps_data() {
    let mut cluster = start15();
    cluster
        .psql(
            "postgres",
            "CREATE TABLE t(v text); INSERT INTO t VALUES ('kept')",
        )
        .unwrap();
    let old_pid = cluster.postmaster_pid().unwrap();
    cluster.stop().unwrap();
    assert!(!cluster.is_running());
    assert!(cluster.postmaster_pid().is_none());
    assert!(crate::common::pid_gone(old_pid as i32));
    assert!(!cluster.data_dir().join("postmaster.pid").exists());
    cluster.stop().unwrap(); // idempotent

    cluster.start().unwrap();
    assert!(cluster.is_running());
    let client = cluster.connect("postgres").await.unwrap();
    let v: String = client
        .query_one("SELECT v FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, "kept");

    cluster.restart().unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[test]
fn restart_moves_to_a_new_port_when_the_old_one_is_taken() {
    let mut cluster = start15();
    let old_port = cluster.port();
    cluster.stop().unwrap();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", old_port)).unwrap();
    cluster.start().unwrap();
    assert_ne!(cluster.port(), old_port);
    assert!(
        cluster
            .connection_string("x")
            .contains(&format!("port={}", cluster.port()))
    );
    assert_eq!(cluster.psql("postgres", "SELECT 1").unwrap().trim(), "1");
    drop(squatter);
}

#[tokio::test]
async fn signal_backend_terminates_a_session() {
    let cluster = start15();
    let victim = cluster.connect("postgres").await.unwrap();
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    cluster.signal_backend(pid, libc::SIGTERM).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(30), victim.simple_query("SELECT 1"))
        .await
        .expect("terminated session answers promptly");
    assert!(result.is_err(), "session should be terminated");
    assert!(cluster.signal_backend(1, libc::SIGTERM).is_err());
}
