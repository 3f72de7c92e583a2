//! A queue command's server errors told in pglease's terms: what went wrong and the `pglease`
//! command that fixes it, instead of hints naming SQL functions (`lease_queue.create_queue`).
//! Recognised by SQLSTATE alone (docs/SQLSTATES.md), never by message text; the SQLSTATE stays in
//! the message, and with `--json` in the error document printed on stdout ([`print_json`]).

use std::fmt;

use crate::exit::BoxError;

/// A server error of a queue command, rephrased; `(SQLSTATE XXXXX)` ends its text.
#[derive(Debug)]
pub struct QueueError {
    message: String,
    sqlstate: String,
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.sqlstate)
    }
}

impl std::error::Error for QueueError {}

/// `error` rephrased if it is a server error, for a command on queue `queue` (if it names one).
pub fn speak(error: BoxError, queue: Option<&str>) -> BoxError {
    let db = std::iter::successors(Some(&*error as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
    .find_map(|e| {
        e.downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
    });
    let Some(code) = crate::missing::sqlstate(&*error) else {
        return error;
    };
    // The server's own message: from tokio-postgres, else the client libraries' text.
    let server = || db.map_or_else(|| error.to_string(), |db| db.message().to_owned());
    let q = queue.unwrap_or("QUEUE");
    let message = match code.as_str() {
        "LQ001" => format!(
            "queue {q} does not exist: create it with `pglease queue create {q} --partitions N` \
             (`pglease queue stats` lists the queues)"
        ),
        "42710" => format!("queue {q} already exists (`pglease queue stats {q}` shows it)"),
        "55006" => format!(
            "{}: messages of that key are in an open batch; redrive once the batch is acked",
            server()
        ),
        // Our refusals, with a DETAIL: the queue not granted to the role, or a partition's lease
        // held under another role.
        "42501" if db.and_then(|db| db.detail()).is_some() => format!(
            "{}: {}; the installing role gives a role the queue with `pglease queue grant {q} \
             ROLE produce|consume`, and a claimed partition is its claimer's role's",
            server(),
            db.and_then(|db| db.detail())
                .unwrap_or_default()
                .trim_end_matches('.')
        ),
        // PostgreSQL's missing privilege: an operator's function.
        "42501" => format!(
            "{}: only the role that installed pg_lease_queue may do this, unless it granted \
             EXECUTE on the function to others (docs/QUEUE.md)",
            server()
        ),
        // Anything else from the server: its message and detail, without a hint naming SQL
        // functions; from a client library: as it is.
        _ => match db {
            None => return error,
            Some(db) => match (db.detail(), db.hint()) {
                (Some(detail), _) => format!("{}: {detail}", db.message()),
                (None, Some(hint)) if !hint.contains("lease_queue.") => {
                    format!("{} ({hint})", db.message())
                }
                _ => db.message().to_owned(),
            },
        },
    };
    Box::new(QueueError {
        message,
        sqlstate: code,
    })
}

/// Prints `error` as the JSON document of a failed queue command with `--json`, on stdout:
/// `{"error": <message>, "sqlstate": <code or null>, "not_installed": <bool>}` (the exit code and
/// the message on stderr are as without `--json`). A closed stdout is ignored.
pub fn print_json(error: &(dyn std::error::Error + 'static)) {
    let message = match error.downcast_ref::<QueueError>() {
        Some(e) => e.message.clone(),
        None => error.to_string(),
    };
    let _ = crate::output::json(&serde_json::json!({
        "error": message,
        "sqlstate": crate::missing::sqlstate(error).or_else(|| {
            error.downcast_ref::<QueueError>().map(|e| e.sqlstate.clone())
        }),
        "not_installed": crate::missing::is_not_ready(error),
    }));
}
