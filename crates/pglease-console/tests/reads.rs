//! What the console reads, and as whom. A console whose role has nothing but USAGE on the schemas
//! (docs/CONSOLE.md, "A read-only console role"): every view reads, holders of a queue the role may
//! not consume are hidden (not reported as missing), and the database refuses the actions the role
//! may not perform even when the console allows actions. A database without pg_lease_queue: no
//! queues, and the metrics still answer. Against a real server (pgcluster), the console's router
//! driven in-process.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use pgcluster::{Cluster, ClusterBuilder};
use serde_json::Value;
use tower::ServiceExt as _;

fn major() -> u32 {
    std::env::var("PGLEASE_PG_VERSION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15)
}

/// The server, with a database `console` where the superuser made: held and lapsed keys with
/// history, a semaphore slot, a queue `orders` (max_attempts 1) with pending messages, a claimed
/// partition with an open batch and a dead letter; and the role `viewer` with USAGE only.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let cluster = ClusterBuilder::for_major(major())
            .and_then(|b| {
                b.private_mirror(true)
                    .cache_dir(root.join("target/pgcluster-mirrors"))
                    .extension_dir(root.join("extensions/pg_lease"))
                    .extension_dir(root.join("extensions/pg_lease_queue"))
                    .start()
            })
            .unwrap_or_else(|e| panic!("could not start PostgreSQL {}: {e}", major()));
        cluster.create_database("console").expect("create database");
        cluster
            .psql(
                "console",
                "CREATE EXTENSION pg_lease_queue CASCADE;
                 SELECT lease.acquire('job-1', 'worker-a', interval '1 hour');
                 SELECT lease.acquire('job-2', 'worker-b', interval '1 millisecond');
                 SELECT lease.acquire_slot('backups', 'b1', interval '1 hour', 2);
                 SELECT lease_queue.create_queue('orders', 2, 1, true);
                 SELECT lease_queue.send('orders', 'k' || g, jsonb_build_object('n', g))
                   FROM generate_series(1, 6) AS g;
                 CREATE ROLE viewer LOGIN PASSWORD 'viewer-password';
                 GRANT USAGE ON SCHEMA lease, lease_queue TO viewer;",
            )
            .expect("set up the database");
        // A dead letter: claim partition 0, receive, nack (max_attempts 1); then an open batch.
        cluster
            .psql(
                "console",
                "DO $$
                 DECLARE c record; b record;
                 BEGIN
                   SELECT * INTO c FROM lease_queue.claim('orders', 0, 'consumer-1', interval '1 hour');
                   SELECT * INTO b FROM lease_queue.receive('orders', 0, 'consumer-1', c.epoch, 1);
                   PERFORM lease_queue.nack('orders', 0, 'consumer-1', c.epoch, b.batch_id, b.id,
                                            interval '0', 'declined');
                   PERFORM lease_queue.ack('orders', 0, 'consumer-1', c.epoch, b.batch_id);
                   PERFORM lease_queue.receive('orders', 0, 'consumer-1', c.epoch, 2);
                 END $$;",
            )
            .expect("make a dead letter and an open batch");
        cluster
    })
}

fn url_as(role: &str, password: &str) -> String {
    url_of("console", role, password)
}

fn url_of(db: &str, role: &str, password: &str) -> String {
    let c = cluster();
    c.url(db).replacen(
        &format!("postgres:{}@", c.password()),
        &format!("{role}:{password}@"),
        1,
    )
}

async fn console(role: &str, password: &str, actions: bool) -> pglease_console::Console {
    let client = pglease::Client::builder()
        .owner("console-test")
        .connect(&url_as(role, password))
        .await
        .expect("connect the console's client");
    pglease_console::Console::builder(client)
        .allow_actions(actions)
        .build()
}

/// `(status, JSON body)` of a request to the console's router.
async fn call(
    c: &pglease_console::Console,
    method: &str,
    uri: &str,
    csrf: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "127.0.0.1:8080")
        .header("content-type", "application/json");
    if let Some(t) = csrf {
        req = req.header("x-csrf-token", t);
    }
    let body = if method == "POST" {
        Body::from(r#"{"older_than":"1h","key":"k1"}"#)
    } else {
        Body::empty()
    };
    let resp = c.router().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 22)
        .await
        .unwrap();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, json)
}

/// The first `view` event of `/api/events?...`.
async fn first_event(c: &pglease_console::Console, query: &str) -> Value {
    let req = Request::builder()
        .uri(format!("/api/events?{query}"))
        .header("host", "127.0.0.1:8080")
        .body(Body::empty())
        .unwrap();
    let resp = c.router().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body().into_data_stream();
    use futures_util::StreamExt as _;
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, body.next()).await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        if let Some(start) = text.find("event: view\ndata: ")
            && let Some(end) = text[start..].find("\n\n")
        {
            let data = &text[start + "event: view\ndata: ".len()..start + end];
            return serde_json::from_str(data).expect("the event's JSON");
        }
    }
    panic!("no view event within 60 s: {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_only_usage_reads_every_view_and_sees_no_holders_of_a_queue_it_may_not_consume()
{
    let c = console("viewer", "viewer-password", false).await;

    let (status, leases) = call(&c, "GET", "/api/leases", None).await;
    assert_eq!(status, StatusCode::OK, "{leases}");
    let keys: Vec<&str> = leases["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["key"].as_str())
        .collect();
    assert!(
        keys.contains(&"job-1") && keys.contains(&"job-2"),
        "{leases}"
    );
    assert_eq!(leases["counts"]["lapsed"], 1, "job-2 lapsed: {leases}");

    let (status, lease) = call(&c, "GET", "/api/lease?key=job-1", None).await;
    assert_eq!(status, StatusCode::OK, "{lease}");
    assert_eq!(lease["history"][0]["owner"], "worker-a", "{lease}");

    let (status, sem) = call(&c, "GET", "/api/semaphores", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sem["items"][0]["name"], "backups", "{sem}");

    let (status, queues) = call(&c, "GET", "/api/queues", None).await;
    assert_eq!(status, StatusCode::OK, "{queues}");
    let q = &queues["items"][0];
    assert_eq!(q["name"], "orders");
    assert_eq!(q["holders_visible"], false, "{q}");
    assert!(
        q.get("unowned").is_none_or(Value::is_null),
        "not 'all unowned': {q}"
    );
    assert!(
        q["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["owner"].is_null()),
        "{q}"
    );
    // The counts are there: what the superuser's own query says.
    let backlog: i64 = cluster()
        .psql(
            "console",
            "SELECT sum(backlog) FROM lease_queue.status('orders')",
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(q["backlog"], backlog, "{q}");
    assert_eq!(q["dead_letters"], 1, "{q}");

    let page = first_event(&c, "view=queue&queue=orders").await;
    assert!(page["dead_letters_hidden"].is_string(), "{page}");

    let (status, metrics) = call(&c, "GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    let text = metrics.as_str().unwrap();
    assert!(text.contains("pglease_queue_backlog{"), "{text}");
    assert!(!text.contains("pglease_queue_partition_owned{"), "{text}");
    assert!(
        !text.contains("pglease_queue_partitions_unowned{"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_refuses_the_actions_a_usage_role_may_not_perform_even_with_actions_allowed() {
    let c = console("viewer", "viewer-password", true).await;
    let (_, info) = call(&c, "GET", "/api/info", None).await;
    let csrf = info["csrf_token"].as_str().unwrap().to_owned();
    for uri in [
        "/api/purge",
        "/api/queues/orders/partitions/0/force-release",
        "/api/queues/orders/redrive",
    ] {
        let (status, body) = call(&c, "POST", uri, Some(&csrf)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}: {body}");
        assert_eq!(body["error"], "not_permitted", "{uri}: {body}");
    }
    // Nothing changed: the dead letter is still there, the partition still held.
    let left = cluster()
        .psql(
            "console",
            "SELECT (SELECT count(*) FROM lease_queue.dead_letters),
                    (SELECT held FROM lease.inspect(lease_queue.lease_key('orders', 0)))",
        )
        .unwrap();
    assert_eq!(left.trim(), "1|t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pg_lease_queue_there_are_no_queues_and_the_metrics_still_answer() {
    let c = cluster();
    c.create_database("no_queue").expect("create database");
    c.psql(
        "no_queue",
        "CREATE EXTENSION pg_lease; SELECT lease.acquire('k', 'w', interval '1 hour')",
    )
    .expect("pg_lease only");
    let client = pglease::Client::builder()
        .owner("console-test")
        .connect(&url_of("no_queue", "postgres", c.password()))
        .await
        .expect("connect");
    let console = pglease_console::Console::builder(client).build();
    let (status, queues) = call(&console, "GET", "/api/queues", None).await;
    assert_eq!(status, StatusCode::OK, "{queues}");
    assert_eq!(queues["items"], Value::Array(Vec::new()));
    let (status, metrics) = call(&console, "GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK, "{metrics}");
    assert!(
        metrics.as_str().unwrap().contains("pglease_leases_held 1"),
        "{metrics}"
    );
}
