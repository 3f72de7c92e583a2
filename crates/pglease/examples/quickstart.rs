//! The README's Rust quick start: acquire a lease, work while the keepalive renews it, release it.
//!
//! ```text
//! export DATABASE_URL="$(pglease local url)"   # or any database where pg_lease is installed
//! cargo run -p pglease --example quickstart
//! ```
//!
//! The body of `run` is the README's snippet, line for line (the docs test compares them).

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!(
            "quickstart: set DATABASE_URL, e.g. export DATABASE_URL=\"$(pglease local url)\""
        );
        std::process::exit(2);
    };
    run(&url).await
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = pglease::Client::connect(url).await?;
    let (ttl, wait) = (Duration::from_secs(30), Duration::from_secs(60));
    let lease = client.acquire("nightly-report", ttl, wait).await?;
    println!("held nightly-report at epoch {}", lease.epoch());
    let finished = tokio::select! {
        reason = lease.lost() => { eprintln!("lost the lease: {reason:?}"); false }
        () = tokio::time::sleep(Duration::from_secs(2)) => true, // the work: pass it lease.epoch()
    };
    if finished {
        lease.release().await?; // a waiter gets the key at once
    }
    Ok(())
}
