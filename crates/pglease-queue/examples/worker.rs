//! A complete queue worker: produces a few orders in a transaction (the transactional outbox),
//! then consumes its share of the queue's partitions until Ctrl-C, recording each order exactly
//! once in the database (the handler's writes commit with the ack), and shuts down cleanly
//! (finishes the open batches, releases the partitions so other workers take over at once).
//!
//! ```sh
//! cargo run -p pglease-queue --example worker          # pglease's local server
//! DATABASE_URL=postgresql://app@db/app cargo run -p pglease-queue --example worker
//! ```
//!
//! Without `DATABASE_URL` it uses the local server the `pglease` command uses without a database
//! URL (`pglease local`; started with PostgreSQL `PGLEASE_PG_VERSION`, default 15, if it is not
//! running). It installs pg_lease_queue (and pg_lease) with the script installer if needed (the
//! role needs `CREATE` on the database). Its log has colours only on a terminal (and never with
//! `NO_COLOR` set).
//!
//! Start it twice: the second worker gets half of the partitions without the first one stopping.
//! Kill one with SIGKILL: after its ttl the other gets its open batches again (attempts counted).
//! Set `RUST_LOG`-style filtering aside: this example logs everything at `info` and above on the
//! `pglease_queue` and `pglease` targets (claims, losses, redeliveries, dead letters).

use std::time::Duration;

use pglease_queue::{Backoff, Consumer, Delivery, Message, OnShutdown, Producer};

#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    id: i64,
    customer: String,
    cents: i64,
}

/// Why an order cannot be handled (a nack reason, and after `max_attempts` a dead letter's).
#[derive(Debug)]
struct Rejected(String);

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<tokio_postgres::Error> for Rejected {
    fn from(e: tokio_postgres::Error) -> Rejected {
        Rejected(e.to_string())
    }
}

impl From<pglease_queue::Error> for Rejected {
    fn from(e: pglease_queue::Error) -> Rejected {
        Rejected(e.to_string())
    }
}

/// The connection string of pglease's local server (the one `pglease` uses without a database
/// URL: `pglease local`), started if it is not running; it keeps running afterwards.
fn local_server() -> Result<String, Box<dyn std::error::Error>> {
    let local = pgcluster::PersistentCluster::pglease_local()
        .ok_or("set DATABASE_URL, or PGLEASE_LOCAL_DIR (or HOME) for the local server")?;
    let major = std::env::var("PGLEASE_PG_VERSION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15);
    let started = local.start(major)?;
    eprintln!(
        "no DATABASE_URL: using pglease's local server in {}",
        local.root().display()
    );
    Ok(started.server.connection_string("postgres"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .init();
    let conninfo = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => local_server()?,
    };
    // A no-op where pg_lease_queue is installed already (`pglease install`, CREATE EXTENSION).
    let (mut db, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    pglease::PG_LEASE_QUEUE.install(&mut db).await?;
    drop(db);
    let client = pglease::Client::builder()
        .renew_fraction(0.25)
        .connect(&conninfo)
        .await?;

    // Setup (normally a migration): the queue and the table the handler writes.
    let db = client.pool().get().await?;
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS example_orders (
             id bigint PRIMARY KEY, customer text NOT NULL, cents bigint NOT NULL,
             epoch bigint NOT NULL)",
    )
    .await?;
    let exists = db
        .query_opt(
            "SELECT 1 FROM lease_queue.list_queues() WHERE queue_name = 'example-orders'",
            &[],
        )
        .await?
        .is_some();
    if !exists {
        db.execute(
            "SELECT lease_queue.create_queue('example-orders', 4, 5)",
            &[],
        )
        .await?;
    }
    drop(db);

    // Produce: the messages commit with the transaction that sends them, or not at all.
    let producer = Producer::new("example-orders")?;
    let mut db = client.pool().get().await?;
    let tx = db.transaction().await?;
    let base: i64 = tx
        .query_one("SELECT coalesce(max(id), 0) FROM example_orders", &[])
        .await?
        .get(0);
    let orders: Vec<Message> = (1..=10)
        .map(|i| {
            let order = Order {
                id: base + i,
                customer: format!("customer-{}", i % 3),
                cents: 100 * i,
            };
            // Keyed by customer: one customer's orders are handled in order.
            Message::new(&order).map(|m| m.with_key(order.customer.clone()))
        })
        .collect::<Result<_, _>>()?;
    let ids = producer.send_batch(&*tx, &orders).await?;
    tx.commit().await?;
    drop(db);
    println!("sent {} orders (message ids {:?})", ids.len(), ids);

    // Consume: a fair share of the partitions, woken by notifications.
    let consumer = Consumer::builder(client.clone(), "example-orders")
        .ttl(Duration::from_secs(10))
        .batch_size(20)
        .retry_backoff(Backoff::new(
            Duration::from_millis(500),
            Duration::from_secs(30),
        ))
        .on_shutdown(OnShutdown::Finish)
        .listen(conninfo.parse()?)
        .build()?;
    let stop = consumer.stop_token();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        println!("stopping: finishing open batches, releasing partitions");
        stop.cancel();
    });

    consumer
        .run_transactional(|tx, d: &Delivery| {
            Box::pin(async move {
                let order: Order = d.payload_as()?;
                if order.cents < 0 {
                    // Nacked: retried with backoff, a dead letter after max_attempts.
                    return Err(Rejected(format!("order {} has a negative total", order.id)));
                }
                if d.is_redelivery() {
                    println!("order {} again (attempt {})", order.id, d.attempts());
                }
                // Exactly once: this row commits with the ack, or not at all. The epoch is
                // recorded to show which grant of the partition applied it.
                tx.execute(
                    "INSERT INTO example_orders (id, customer, cents, epoch) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                    &[&order.id, &order.customer, &order.cents, &d.epoch()],
                )
                .await?;
                println!(
                    "order {} for {} ({} cents), partition {} epoch {}",
                    order.id,
                    order.customer,
                    order.cents,
                    d.partition(),
                    d.epoch()
                );
                Ok(())
            })
        })
        .await?;

    client.shutdown().await;
    Ok(())
}
