//! `-v/--verbose` and `PGLEASE_LOG`: the log of the client library (its `tracing` events, see
//! docs/CLIENT.md, "Observability") printed on stderr, one compact line per event (spans are left
//! out: every event carries its key, owner and epoch itself). Nothing is
//! installed, so nothing is printed, unless one of them asks for it.
//!
//! `-v` shows the library's `info` events (grants, releases, losses, leader changes), `-vv` also
//! `debug` (renewals, refusals, waits), `-vvv` everything at `trace`. `PGLEASE_LOG` (not
//! `RUST_LOG`, which the command that `pglease run` starts may be meant to read) replaces that
//! choice with per-target levels, e.g. `pglease=info,pglease::wait=debug`.

use std::io::IsTerminal;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterExt, Targets, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::Color;

/// The variable whose directives (`target=level,...`) override `-v`.
pub const ENV: &str = "PGLEASE_LOG";

/// What to log for `verbose` (the count of `-v`) and the value of [`ENV`]; `None`: nothing.
///
/// # Errors
///
/// A message for the usage error if `env` is not a list of `target=level` directives.
pub fn filter(verbose: u8, env: Option<&str>) -> Result<Option<Targets>, String> {
    if let Some(directives) = env.filter(|s| !s.trim().is_empty()) {
        return directives
            .parse::<Targets>()
            .map(Some)
            .map_err(|e| format!("{ENV}={directives:?}: {e} (expected e.g. pglease=debug)"));
    }
    Ok(match verbose {
        0 => None,
        1 => Some(Targets::new().with_target("pglease", LevelFilter::INFO)),
        2 => Some(Targets::new().with_target("pglease", LevelFilter::DEBUG)),
        _ => Some(Targets::new().with_default(LevelFilter::TRACE)),
    })
}

/// Installs the stderr logger for `verbose` and [`ENV`], if they ask for one, with colours as
/// `color` says (`--color`).
///
/// # Errors
///
/// As [`filter`].
pub fn install(verbose: u8, color: Color) -> Result<(), String> {
    let env = std::env::var(ENV).ok();
    let Some(targets) = filter(verbose, env.as_deref())? else {
        return Ok(());
    };
    let colour = match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let layer = tracing_subscriber::fmt::layer()
        .compact()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    // Events only: each carries its key, owner and epoch itself, so the lines need no span
    // context (which the compact format would append as a repetition of the same fields).
    let events = targets.and(filter_fn(|meta| meta.is_event()));
    tracing_subscriber::registry()
        .with(layer.with_filter(events))
        .try_init()
        .map_err(|e| format!("logging: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_logged_unless_asked_for() {
        assert!(filter(0, None).unwrap().is_none());
        assert!(filter(0, Some("  ")).unwrap().is_none());
    }

    #[test]
    fn each_v_shows_one_more_level_of_the_library() {
        let info = filter(1, None).unwrap().unwrap();
        assert!(info.would_enable("pglease::lease", &tracing::Level::INFO));
        assert!(!info.would_enable("pglease::lease", &tracing::Level::DEBUG));
        assert!(!info.would_enable("tokio_postgres", &tracing::Level::INFO));
        let debug = filter(2, None).unwrap().unwrap();
        assert!(debug.would_enable("pglease::wait", &tracing::Level::DEBUG));
        assert!(!debug.would_enable("pglease::wait", &tracing::Level::TRACE));
        let trace = filter(3, None).unwrap().unwrap();
        assert!(trace.would_enable("anything", &tracing::Level::TRACE));
    }

    #[test]
    fn the_variable_overrides_the_flag_and_is_validated() {
        let targets = filter(0, Some("pglease::wait=debug")).unwrap().unwrap();
        assert!(targets.would_enable("pglease::wait", &tracing::Level::DEBUG));
        assert!(!targets.would_enable("pglease::lease", &tracing::Level::INFO));
        assert!(filter(3, Some("pglease=nonsense")).is_err());
    }
}
