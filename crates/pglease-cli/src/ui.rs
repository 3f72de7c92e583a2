//! `pglease ui` and `pglease metrics`: the operator console (crate `pglease-console`) served on
//! a local address, connected like every command (URL, PG* variables, or the local server).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use pglease_console::Console;

use crate::cli::{ConsoleArgs, MetricsArgs, UiArgs};
use crate::connect::{ConfigError, Target};
use crate::exit::BoxError;
use crate::missing;

/// The environment variable that may hold the console's token.
pub const TOKEN_VARIABLE: &str = "PGLEASE_UI_TOKEN";

/// The shortest token accepted: a guessable token is no protection.
const MIN_TOKEN_BYTES: usize = 16;

/// Refuses (before any I/O) to serve off loopback without a token.
pub fn check_listen(listen: SocketAddr, args: &ConsoleArgs) -> Result<(), ConfigError> {
    let has_token = args.token_file.is_some()
        || std::env::var_os(TOKEN_VARIABLE).is_some_and(|v| !v.is_empty());
    if listen.ip().is_loopback() || has_token {
        return Ok(());
    }
    Err(ConfigError::Usage(format!(
        "--listen {listen} is not a loopback address: the console then requires a token, from \
         --token-file FILE or {TOKEN_VARIABLE} (anyone who can reach the address could otherwise \
         read every lease and queue)"
    )))
}

/// The token from `--token-file` (its first line) or `PGLEASE_UI_TOKEN`, if any.
fn read_token(args: &ConsoleArgs) -> Result<Option<String>, BoxError> {
    let token = match &args.token_file {
        Some(path) => Some(read_token_file(path)?),
        None => std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty()),
    };
    if let Some(t) = &token
        && t.len() < MIN_TOKEN_BYTES
    {
        return Err(format!(
            "the console's token is {} bytes long: use at least {MIN_TOKEN_BYTES} (e.g. \
             `openssl rand -hex 32`)",
            t.len()
        )
        .into());
    }
    Ok(token)
}

fn read_token_file(path: &Path) -> Result<String, BoxError> {
    use std::os::unix::fs::MetadataExt as _;
    let meta =
        std::fs::metadata(path).map_err(|e| format!("--token-file {}: {e}", path.display()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "--token-file {}: group or others may read it (mode {:o}); chmod 600 it",
            path.display(),
            meta.mode() & 0o777
        )
        .into());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        return Err(format!("--token-file {}: its first line is empty", path.display()).into());
    }
    Ok(token)
}

/// The console's builder for `args`, connected to `target` (pg_lease checked first).
async fn builder(
    args: &ConsoleArgs,
    target: &Target,
) -> Result<pglease_console::ConsoleBuilder, BoxError> {
    let token = read_token(args)?;
    let conn = target.connect().await?;
    missing::check(&conn, target, &pglease::PG_LEASE).await?;
    drop(conn);
    let host = pglease::hostname().unwrap_or_else(|| "localhost".to_owned());
    let owner = format!("pglease-console@{host}");
    let client = target
        .client(pglease::Client::builder().owner(owner))
        .await?;
    let mut b = Console::builder(client)
        .statement_timeout(args.statement_timeout)
        .expiring_within(args.expiring_within);
    if let Some(t) = token {
        b = b.token(t);
    }
    for e in &args.elections {
        b = b.election(e.clone());
    }
    for p in &args.metric_key_prefixes {
        b = b.metric_key_prefix(p.clone());
    }
    Ok(b)
}

/// Binds `listen` and serves `console` there until the process is stopped; the URL goes to
/// stdout (a line), what it serves to stderr.
async fn serve(
    console: Console,
    listen: SocketAddr,
    path: &str,
    what: &str,
) -> Result<ExitCode, BoxError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let bound = listener.local_addr()?;
    println!("http://{bound}{path}");
    eprintln!("pglease: {what} on http://{bound}{path} (Ctrl-C stops it)");
    console.serve(listener, std::future::pending()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `pglease ui`.
pub async fn ui(args: UiArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let console = builder(&args.console, target)
        .await?
        .allow_actions(args.allow_actions)
        .show_payloads(args.show_payloads)
        .base_path(&args.base_path)
        .refresh(args.refresh)
        .build();
    let mode = if args.allow_actions {
        "the console (actions allowed)"
    } else {
        "the console (read-only)"
    };
    let path = format!("{}/", console.base_path());
    serve(console, args.listen, &path, mode).await
}

/// `pglease metrics`.
pub async fn metrics(args: MetricsArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let console = builder(&args.console, target)
        .await?
        .metrics_only(true)
        .build();
    serve(console, args.listen, "/metrics", "Prometheus metrics").await
}
