//! The parsers that reject bad values (durations, keys, owners, data) before anything else happens,
//! bounded by the SQL API's limits (365 days; keys and owners of 1 to 1024 bytes), from the library's
//! one table.

use std::time::Duration;

use pglease::limits::{
    MAX_DATA_BYTES, MAX_HISTORY_RETENTION, MAX_INTERVAL, MAX_NAME_BYTES, MAX_SEMAPHORE_BYTES,
    MIN_NAME_BYTES,
};

/// The shortest ttl `run` accepts: the keepalive needs `ttl > 2 × (ttl / 1000 + 20ms)` (its
/// default safety margin, see the client's `ClientBuilder::safety_margin`), so 41ms.
pub const MIN_RUN_TTL: Duration = Duration::from_millis(41);

/// Parses a human duration (`30s`, `2m`, `1500ms`, `1h 30m`), zero allowed, at most 365 days.
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("must not be negative (examples: 30s, 2m, 1500ms)".into());
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 2m, 1500ms)"))?;
    if d > MAX_INTERVAL {
        return Err(format!(
            "must be at most {} days",
            MAX_INTERVAL.as_secs() / 86_400
        ));
    }
    Ok(d)
}

/// Parses `--wait`: a duration as [`parse_wait`], or `forever` (365 days, the SQL API's limit).
pub fn parse_wait_arg(s: &str) -> Result<Duration, String> {
    match s.trim() {
        "forever" | "infinity" => Ok(MAX_INTERVAL),
        _ => parse_wait(s),
    }
}

/// Parses a ttl: a human duration of at least a millisecond, at most 365 days.
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_wait(s)?;
    if d < Duration::from_millis(1) {
        return Err("must be at least 1ms".into());
    }
    Ok(d)
}

/// Parses the ttl of a kept-alive lease: at least [`MIN_RUN_TTL`], at most 365 days.
pub fn parse_run_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_wait(s)?;
    if d < MIN_RUN_TTL {
        return Err(format!(
            "must be at least {}ms (the keepalive's safety margin needs it)",
            MIN_RUN_TTL.as_millis()
        ));
    }
    Ok(d)
}

/// Parses `configure --history-retention`: 1 second to 3650 days.
pub fn parse_history_retention(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("must not be negative (examples: 7d, 30d)".into());
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 7d, 30d)"))?;
    if d < Duration::from_secs(1) || d > MAX_HISTORY_RETENTION {
        return Err(format!(
            "must be 1s to {} days",
            MAX_HISTORY_RETENTION.as_secs() / 86_400
        ));
    }
    Ok(d)
}

/// Parses `--request-timeout`: above zero, at most 365 days.
pub fn parse_request_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_wait(s)?;
    if d.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(d)
}

/// Parses a key or owner: 1 to 1024 bytes.
pub fn parse_name(s: &str) -> Result<String, String> {
    if s.len() < MIN_NAME_BYTES {
        return Err("must not be empty".into());
    }
    parse_prefix(s)
}

/// Parses `--data`: at most 8192 bytes.
pub fn parse_data(s: &str) -> Result<String, String> {
    if s.len() > MAX_DATA_BYTES {
        return Err(format!(
            "must be at most {MAX_DATA_BYTES} bytes (got {})",
            s.len()
        ));
    }
    Ok(s.to_owned())
}

/// How to get JSON through a shell intact, for messages about a payload that is not JSON.
pub const JSON_QUOTING_HINT: &str = "quote it for the shell so that the JSON arrives intact: \
     '{\"order\": 42}' for an object, '\"text\"' for a string (single quotes keep the double \
     quotes)";

/// Parses a queue message's payload: JSON, or `-` (read stdin).
pub fn parse_payload(s: &str) -> Result<String, String> {
    if s == "-" {
        return Ok(s.to_owned());
    }
    serde_json::from_str::<serde_json::Value>(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("not JSON ({e}); {JSON_QUOTING_HINT}"))
}

/// Whether `run --limit` may use `key` as a semaphore name (room for `#N` within 1024 bytes).
pub fn semaphore_name_fits(key: &str) -> Result<(), String> {
    if key.len() > MAX_SEMAPHORE_BYTES {
        return Err(format!(
            "with --limit, --key names a semaphore and must be at most {MAX_SEMAPHORE_BYTES} bytes \
             (got {}): its slot keys add '#N'",
            key.len()
        ));
    }
    Ok(())
}

/// Parses `run --owner`: 1 byte, and room for the nonce `run` appends within 1024 bytes.
pub fn parse_run_owner(s: &str) -> Result<String, String> {
    let max = MAX_NAME_BYTES - crate::owner::OWNER_SUFFIX_BYTES;
    if s.len() > max {
        return Err(format!(
            "must be at most {max} bytes (got {}): run appends a {}-byte nonce",
            s.len(),
            crate::owner::OWNER_SUFFIX_BYTES
        ));
    }
    parse_name(s)
}

/// Where `history --since` starts: a moment, or a duration before now (by the server's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// This long before now, on the server's clock.
    Ago(Duration),
    /// This moment (an RFC 3339 time).
    At(std::time::SystemTime),
}

/// Parses `history --since`: a duration back from now (`30m`, `2h`, `7d`; at most 365 days) or an
/// RFC 3339 time (`2026-12-05T08:00:00Z`, a space for the `T` and no zone, read as UTC, too).
pub fn parse_since(s: &str) -> Result<Since, String> {
    let t = s.trim();
    if let Ok(d) = parse_wait(t) {
        return Ok(Since::Ago(d));
    }
    humantime::parse_rfc3339_weak(t)
        .map(Since::At)
        .map_err(|_| {
            "expected a duration back from now (30m, 2h, 7d; at most 365 days) or an RFC 3339 time \
             (2026-12-05T08:00:00Z)"
                .to_string()
        })
}

/// Parses a list prefix: at most 1024 bytes.
pub fn parse_prefix(s: &str) -> Result<String, String> {
    if s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "must be at most {MAX_NAME_BYTES} bytes (got {})",
            s.len()
        ));
    }
    Ok(s.to_owned())
}
