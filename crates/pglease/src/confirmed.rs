//! Connections that never hand over an answer whose commit was not confirmed.
//!
//! With synchronous replication a commit waits for the standby before the server answers. If that
//! wait is cancelled (`pg_cancel_backend`, a cancel request) the server still answers — the
//! transaction has committed locally — with only a WARNING that it may not have reached the
//! standby. A client that believed that answer could act on a grant the standby never received:
//! after a failover another owner gets the key. PostgreSQL sends the warning just before the final
//! `ReadyForQuery`, and tokio-postgres completes a query only at `ReadyForQuery`; so a connection
//! driver that closes the connection when it sees the warning turns the answer into a connection
//! error before the caller sees it. The call's outcome is then unknown, as after any lost
//! connection, and the client treats it so: an acquire's possible grant is released in the
//! background, a renewal is retried (and counts only once confirmed), a guarded transaction's
//! commit fails.
//!
//! Every connection of a [`Client`](crate::Client) built with [`ClientBuilder::connect`] or
//! [`connect_with`](crate::ClientBuilder::connect_with) is driven so. A pool of your own
//! ([`ClientBuilder::from_pool`](crate::ClientBuilder::from_pool)) should use [`ConfirmedConnect`];
//! a connection of your own for the free functions ([`acquire`](crate::acquire), ...) should be
//! driven by [`drive_connection`].
//!
//! The warning is recognised by where the server raised it (its routine `SyncRepWaitForLSN` in
//! `syncrep.c`, fields PostgreSQL sends with every notice), never by its text, which is translated.
//!
//! [`ClientBuilder::connect`]: crate::ClientBuilder::connect

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Config, Connection, Socket};

use crate::trace;

/// Whether a notice says that a commit's wait for the synchronous standby was given up: the
/// transaction committed locally and may be missing on the standby.
pub(crate) fn is_unconfirmed_commit(notice: &tokio_postgres::error::DbError) -> bool {
    notice.routine() == Some("SyncRepWaitForLSN") || notice.file() == Some("syncrep.c")
}

/// Drives a tokio-postgres connection like awaiting it would, but closes it as soon as the server
/// warns that a commit was not confirmed by the synchronous standby, so that the query waiting for
/// that answer fails (a connection error: outcome unknown) instead of returning it. Notifications
/// are dropped (use a separate connection to `LISTEN`); other notices are logged at debug level.
///
/// Spawn it in place of the connection future:
///
/// ```no_run
/// # async fn demo() -> Result<(), tokio_postgres::Error> {
/// let (client, connection) =
///     tokio_postgres::connect("host=db.example user=app dbname=app", tokio_postgres::NoTls).await?;
/// tokio::spawn(pglease::drive_connection(connection));
/// let ttl = std::time::Duration::from_secs(10);
/// let grant = pglease::acquire(&client, "job-42", "worker-1", ttl, std::time::Duration::ZERO).await;
/// # Ok(())
/// # }
/// ```
pub async fn drive_connection<S, T>(mut connection: Connection<S, T>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notice(notice)) if is_unconfirmed_commit(&notice) => {
                tracing::warn!(
                    target: trace::CONNECTION,
                    sqlstate = notice.code().code(),
                    notice = notice.message(),
                    "closing the connection: a commit was not confirmed by the synchronous standby, \
                     so the answer waiting on it is withheld (outcome unknown)"
                );
                return; // dropping the connection fails the request waiting for ReadyForQuery
            }
            Ok(AsyncMessage::Notice(notice)) => {
                tracing::debug!(
                    target: trace::CONNECTION,
                    sqlstate = notice.code().code(),
                    notice = notice.message(),
                    "server notice"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(target: trace::CONNECTION, error = %e, "connection ended");
                return;
            }
        }
    }
}

/// A deadpool-postgres [`Connect`](deadpool_postgres::Connect) whose connections are driven by
/// [`drive_connection`]: for a pool of your own that a [`Client`](crate::Client) uses
/// ([`ClientBuilder::from_pool`](crate::ClientBuilder::from_pool)).
///
/// # Examples
///
/// ```no_run
/// use deadpool_postgres::{Manager, ManagerConfig, Pool};
///
/// # async fn demo() -> pglease::Result<()> {
/// let config: tokio_postgres::Config = "host=db.example user=app dbname=app".parse().unwrap();
/// let manager = Manager::from_connect(
///     config,
///     pglease::ConfirmedConnect::new(tokio_postgres::NoTls),
///     ManagerConfig::default(),
/// );
/// let pool = Pool::builder(manager).max_size(8).build().unwrap();
/// let client = pglease::Client::builder().from_pool(pool).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ConfirmedConnect<T> {
    tls: T,
}

impl<T> ConfirmedConnect<T> {
    /// Connects with the TLS connector `tls` (e.g. `tokio_postgres::NoTls`).
    pub fn new(tls: T) -> ConfirmedConnect<T> {
        ConfirmedConnect { tls }
    }
}

impl<T> deadpool_postgres::Connect for ConfirmedConnect<T>
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn connect(
        &self,
        pg_config: &Config,
    ) -> BoxFuture<
        '_,
        Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let tls = self.tls.clone();
        let pg_config = pg_config.clone();
        Box::pin(async move {
            let (client, connection) = pg_config.connect(tls).await?;
            let task = tokio::spawn(drive_connection(connection));
            Ok((client, task))
        })
    }
}
