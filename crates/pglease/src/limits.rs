//! The limits of pg_lease's SQL API, the one table of them in Rust: how long a key or owner may be,
//! and the longest duration (ttl, wait, purge age) the server accepts.
//!
//! The server enforces these limits (SQLSTATE `22023`, [`crate::sqlstate::INVALID_INPUT`]); the
//! client and the `pglease` command line use these constants to say the same thing before anything
//! is sent. A unit test reads the extension's SQL and checks that every length and duration bound
//! in it is one of these values, so the SQL and this table cannot drift apart.
//!
//! | argument | accepted |
//! | --- | --- |
//! | key, owner | [`MIN_NAME_BYTES`]..=[`MAX_NAME_BYTES`] bytes (1 to 1024) |
//! | list prefix | at most [`MAX_NAME_BYTES`] bytes |
//! | ttl | (0, [`MAX_INTERVAL`]]: above zero, at most 365 days |
//! | wait, purge age (`older_than`) | [0, [`MAX_INTERVAL`]]: zero to 365 days |
//! | lease data | at most [`MAX_DATA_BYTES`] bytes of text (8 KiB) |
//! | semaphore name | [`MIN_NAME_BYTES`]..=[`MAX_SEMAPHORE_BYTES`] bytes (1 to 1018, so slot keys fit) |
//! | semaphore `max_holders`, slot number | 1..=[`MAX_HOLDERS`] (10 000) |
//! | `renew_many` pairs | at most [`MAX_RENEW_MANY`] (100 000) per call |
//! | `raise_min_epoch` | 0..=[`MAX_MIN_EPOCH`] (2^62) |
//! | `max_ttl`, `failover_quarantine` (`lease.configure`) | (0, [`MAX_INTERVAL`]], the quarantine at least `max_ttl` |
//! | `history` rows (`max_rows`) | 1..=[`MAX_HISTORY_ROWS`] (10 000) |
//! | `browse` rows per page (`max_rows`) | 1..=[`MAX_BROWSE_ROWS`] (1 000) |
//! | `browse` prefix, after | at most [`MAX_NAME_BYTES`] bytes; an owner filter as an owner |
//! | `summary`'s `expiring_within` | [0, [`MAX_INTERVAL`]]: zero to 365 days |
//! | history retention (`lease.configure_history`) | [1 s, [`MAX_HISTORY_RETENTION`]]: 1 second to 3650 days; [`DEFAULT_HISTORY_RETENTION`] (30 days) when not set |
//!
//! # Examples
//!
//! ```
//! use pglease::limits;
//!
//! let owner = "worker-7";
//! assert!(limits::is_valid_name(owner));
//! assert!(!limits::is_valid_name(""));
//! assert!(std::time::Duration::from_secs(30) <= limits::MAX_INTERVAL);
//! ```

use std::time::Duration;

/// The shortest key or owner, in bytes: neither may be empty.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MIN_NAME_BYTES, 1);
/// ```
pub const MIN_NAME_BYTES: usize = 1;

/// The longest key, owner or list prefix, in bytes (compared byte for byte, so a multi-byte UTF-8
/// character counts for each of its bytes).
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MAX_NAME_BYTES, 1024);
/// ```
pub const MAX_NAME_BYTES: usize = 1024;

/// The longest ttl, wait or purge age: 365 days (of 86 400 s each). A ttl must also be above zero;
/// a wait or purge age may be zero.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// assert_eq!(pglease::limits::MAX_INTERVAL, Duration::from_secs(365 * 86_400));
/// ```
pub const MAX_INTERVAL: Duration = Duration::from_secs(MAX_INTERVAL_DAYS * SECONDS_PER_DAY);

/// The largest lease data, in bytes of text (UTF-8, byte for byte): 8 KiB.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MAX_DATA_BYTES, 8192);
/// ```
pub const MAX_DATA_BYTES: usize = 8192;

/// The longest semaphore name, in bytes: the slot keys `name#1` .. `name#10000` must stay within
/// [`MAX_NAME_BYTES`].
///
/// # Examples
///
/// ```
/// use pglease::limits;
/// assert_eq!(limits::MAX_SEMAPHORE_BYTES + "#10000".len(), limits::MAX_NAME_BYTES);
/// ```
pub const MAX_SEMAPHORE_BYTES: usize = 1018;

/// The largest `max_holders` of a semaphore (and so the largest slot number).
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MAX_HOLDERS, 10_000);
/// ```
pub const MAX_HOLDERS: u32 = 10_000;

/// The most (key, epoch) pairs one `lease.renew_many` call takes; the client splits larger
/// batches.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MAX_RENEW_MANY, 100_000);
/// ```
pub const MAX_RENEW_MANY: usize = 100_000;

/// The highest minimum epoch `lease.raise_min_epoch` accepts: 2^62, which leaves room for the
/// timeline bands of later promotions above it.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MAX_MIN_EPOCH, 1 << 62);
/// ```
pub const MAX_MIN_EPOCH: i64 = 1 << 62;

/// The most grants one `lease.history` call returns (its `max_rows`).
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MAX_HISTORY_ROWS, 10_000);
/// ```
pub const MAX_HISTORY_ROWS: u32 = 10_000;

/// The most keys one `lease.browse` call returns (its `max_rows`: one page of an operator
/// console).
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::limits::MAX_BROWSE_ROWS, 1_000);
/// ```
pub const MAX_BROWSE_ROWS: u32 = 1_000;

/// The longest history retention `lease.configure_history` accepts: 3650 days (ten years of
/// 365 days). The shortest is one second.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// assert_eq!(pglease::limits::MAX_HISTORY_RETENTION, Duration::from_secs(3650 * 86_400));
/// ```
pub const MAX_HISTORY_RETENTION: Duration =
    Duration::from_secs(10 * MAX_INTERVAL_DAYS * SECONDS_PER_DAY);

/// The history retention when none was configured: 30 days. (Not a bound, but the SQL spells it
/// as `interval '30 days'` like its bounds, so it is in this table too.)
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// assert_eq!(pglease::limits::DEFAULT_HISTORY_RETENTION, Duration::from_secs(30 * 86_400));
/// ```
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(30 * SECONDS_PER_DAY);

/// [`MAX_INTERVAL`] in days, as the SQL spells it (`interval '365 days'`).
const MAX_INTERVAL_DAYS: u64 = 365;
const SECONDS_PER_DAY: u64 = 86_400;

/// Whether `name` is a valid key or owner: [`MIN_NAME_BYTES`] to [`MAX_NAME_BYTES`] bytes.
///
/// (PostgreSQL itself rejects text containing a NUL character, with SQLSTATE `22021`.)
///
/// # Examples
///
/// ```
/// use pglease::limits;
/// assert!(limits::is_valid_name("job-42"));
/// assert!(!limits::is_valid_name(&"k".repeat(limits::MAX_NAME_BYTES + 1)));
/// ```
pub const fn is_valid_name(name: &str) -> bool {
    name.len() >= MIN_NAME_BYTES && name.len() <= MAX_NAME_BYTES
}

/// Whether `data` is valid lease data: at most [`MAX_DATA_BYTES`] bytes.
///
/// # Examples
///
/// ```
/// use pglease::limits;
/// assert!(limits::is_valid_data("10.0.0.7:8080"));
/// assert!(!limits::is_valid_data(&"x".repeat(limits::MAX_DATA_BYTES + 1)));
/// ```
pub const fn is_valid_data(data: &str) -> bool {
    data.len() <= MAX_DATA_BYTES
}

/// Whether `name` is a valid semaphore name: [`MIN_NAME_BYTES`] to [`MAX_SEMAPHORE_BYTES`] bytes.
///
/// # Examples
///
/// ```
/// use pglease::limits;
/// assert!(limits::is_valid_semaphore("report-runners"));
/// assert!(!limits::is_valid_semaphore(""));
/// ```
pub const fn is_valid_semaphore(name: &str) -> bool {
    name.len() >= MIN_NAME_BYTES && name.len() <= MAX_SEMAPHORE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The SQL of the current install, whose limits the table must match.
    fn current_sql() -> String {
        crate::PG_LEASE.install_script().script.to_owned()
    }

    /// `sql` without its `--` comments (a `--` inside a string literal is kept).
    fn without_comments(sql: &str) -> String {
        let mut out = String::with_capacity(sql.len());
        for line in sql.lines() {
            let mut in_string = false;
            let mut end = line.len();
            let bytes = line.as_bytes();
            for i in 0..bytes.len() {
                match bytes[i] {
                    b'\'' => in_string = !in_string,
                    b'-' if !in_string && bytes.get(i + 1) == Some(&b'-') => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            out.push_str(&line[..end]);
            out.push('\n');
        }
        out
    }

    /// The bounds `sql` states, as (lengths in bytes, durations in seconds):
    ///
    /// - every nonzero integer compared (`<`, `<=`, `>`, `>=`) with an expression: a length if the
    ///   expression (the text since the previous `AND`/`OR`) is an `octet_length(...)`, else a
    ///   duration in seconds (`date_part('epoch', ttl) <= 31536000`);
    /// - the nonzero bounds of every range literal: `'[1,1024]'::int4range` (lengths),
    ///   `'(0,31536000]'::numrange` (seconds);
    /// - every `interval 'N days'` (seconds).
    fn bounds(sql: &str) -> (BTreeSet<u64>, BTreeSet<u64>) {
        let sql = without_comments(sql);
        let (mut lengths, mut seconds) = (BTreeSet::new(), BTreeSet::new());
        let bytes = sql.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let op_len = match (bytes[i], bytes.get(i + 1)) {
                (b'<' | b'>', Some(b'=')) => 2,
                (b'<', Some(b'>' | b'@')) | (b'-', Some(b'>')) | (b'=', Some(b'>')) => {
                    i += 2;
                    continue;
                }
                (b'<' | b'>', _) => 1,
                _ => {
                    i += 1;
                    continue;
                }
            };
            let rest = sql[i + op_len..].trim_start();
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(n) = digits.parse::<u64>()
                && n != 0
            {
                let before = &sql[..i];
                let operand_start = ["AND ", "OR ", "\n"]
                    .iter()
                    .filter_map(|w| before.rfind(w).map(|at| at + w.len()))
                    .max()
                    .unwrap_or(0);
                if before[operand_start..].contains("octet_length(") {
                    lengths.insert(n);
                } else {
                    seconds.insert(n);
                }
            }
            i += op_len;
        }
        for (cast, set) in [
            ("::pg_catalog.int4range", &mut lengths),
            ("::pg_catalog.numrange", &mut seconds),
        ] {
            let mut rest = sql.as_str();
            while let Some(at) = rest.find(cast) {
                let literal = rest[..at].trim_end().trim_end_matches('\'');
                let open = literal
                    .rfind('\'')
                    .expect("a quoted range literal before the cast");
                let range = &literal[open + 1..];
                for bound in range.trim_matches(['[', '(', ']', ')']).split(',') {
                    let n: u64 = bound.trim().parse().expect("an integer range bound");
                    if n != 0 {
                        set.insert(n);
                    }
                }
                rest = &rest[at + cast.len()..];
            }
        }
        let mut rest = sql.as_str();
        while let Some(at) = rest.find("interval '") {
            rest = &rest[at + "interval '".len()..];
            let literal = &rest[..rest.find('\'').expect("unterminated interval literal")];
            if let Some(days) = literal.strip_suffix(" days") {
                let days: u64 = days.trim().parse().expect("an integer number of days");
                seconds.insert(days * SECONDS_PER_DAY);
            }
        }
        (lengths, seconds)
    }

    #[test]
    fn sql_and_table_agree_on_the_limits() {
        let (lengths, seconds) = bounds(&current_sql());
        let names = BTreeSet::from([
            MIN_NAME_BYTES as u64,
            MAX_NAME_BYTES as u64,
            MAX_SEMAPHORE_BYTES as u64,
            MAX_DATA_BYTES as u64,
        ]);
        for bound in [MAX_NAME_BYTES, MAX_SEMAPHORE_BYTES, MAX_DATA_BYTES] {
            assert!(
                lengths.contains(&(bound as u64)),
                "found no length bound {bound} in the extension SQL"
            );
        }
        assert!(
            lengths.is_subset(&names),
            "extension SQL length bounds {lengths:?} vs limits {names:?}"
        );
        // Every other bound is a duration in seconds or a count: max_holders, renew_many pairs,
        // history and browse rows, or `> 1` (one-dimensional arrays, distinct keys).
        let counts = BTreeSet::from([
            u64::from(MAX_HOLDERS),
            u64::from(MAX_HISTORY_ROWS),
            u64::from(MAX_BROWSE_ROWS),
            MAX_RENEW_MANY as u64,
            MAX_MIN_EPOCH as u64,
        ]);
        let durations: BTreeSet<u64> = seconds
            .difference(&counts)
            .copied()
            .filter(|&n| n != 1)
            .collect();
        assert_eq!(
            durations,
            BTreeSet::from([
                MAX_INTERVAL.as_secs(),
                MAX_HISTORY_RETENTION.as_secs(),
                DEFAULT_HISTORY_RETENTION.as_secs(),
            ]),
            "extension SQL duration bounds (seconds) vs limits::MAX_INTERVAL, \
             MAX_HISTORY_RETENTION, DEFAULT_HISTORY_RETENTION"
        );
        assert!(
            counts.is_subset(&seconds),
            "extension SQL count bounds {seconds:?} vs limits {counts:?}"
        );
    }

    #[test]
    fn bounds_parser_reads_each_form() {
        let sql = "IF pg_catalog.octet_length(k) > 1024 OR v_s <= 31536000 -- x > 7\n\
                   AND pg_catalog.octet_length(o) <@ '[1,1024]'::pg_catalog.int4range\n\
                   AND EXTRACT(epoch FROM t) <@ '(0,86400]'::pg_catalog.numrange\n\
                   AND t > interval '365 days' AND w >= 0 AND a <> 5 AND b -> 6 AND '--' < 3";
        let (lengths, seconds) = bounds(sql);
        assert_eq!(lengths, BTreeSet::from([1, 1024]));
        assert_eq!(seconds, BTreeSet::from([3, 86_400, 31_536_000]));
    }

    #[test]
    fn names_are_one_to_max_bytes() {
        assert!(!is_valid_name(""));
        assert!(is_valid_name("k"));
        assert!(is_valid_name(&"k".repeat(MAX_NAME_BYTES)));
        assert!(!is_valid_name(&"k".repeat(MAX_NAME_BYTES + 1)));
        assert!(!is_valid_name(&"é".repeat(MAX_NAME_BYTES / 2 + 1)));
    }
}
