//! Printing results: aligned text for people, one JSON document for scripts, and the formats of
//! times and durations both use.
//!
//! Everything goes through [`out`], which returns write errors instead of panicking like
//! `println!`: a closed pipe (`pglease list | head -1`) surfaces as an `io::Error` of kind
//! `BrokenPipe`, which `main` treats as success.

use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use serde::Serialize;

/// Writes `text` to stdout (a newline is not added).
pub fn out(text: &str) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// Writes `value` as one line of JSON to stdout.
pub fn json<T: Serialize>(value: &T) -> io::Result<()> {
    let mut text = serde_json::to_string(value).map_err(io::Error::other)?;
    text.push('\n');
    out(&text)
}

/// `name  value` lines with the values aligned, for one record.
pub fn fields(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

/// A table with a header row; columns are padded to their widest cell (the last is not padded).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 == widths.len() {
                s.push_str(cell);
            } else {
                s.push_str(cell);
                let pad = widths[i] - cell.chars().count() + 2;
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut text = line(&mut headers.iter().copied());
    for row in rows {
        text.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    text
}

/// A server timestamp in RFC 3339, UTC, with milliseconds: `2025-06-01T12:00:30.123Z`.
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Whole milliseconds of `d` (for JSON).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A short duration for people: `850ms`, `12.3s`, `4m05s`, `2h30m`, `3d04h`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600)
    }
}

/// `expires_at` as text with the time left until it by the server's clock `now`:
/// `2025-06-01T12:00:30.123Z (in 27.4s)`.
pub fn expiry(expires_at: SystemTime, now: SystemTime) -> String {
    match expires_at.duration_since(now) {
        Ok(left) => format!("{} (in {})", timestamp(expires_at), duration(left)),
        Err(_) => format!("{} (passed)", timestamp(expires_at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(duration(Duration::from_secs(9000)), "2h30m");
        assert_eq!(duration(Duration::from_secs(273_600)), "3d04h");
    }

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["KEY", "OWNER"],
            &[
                vec!["a".into(), "worker-long".into()],
                vec!["long-key".into(), "-".into()],
            ],
        );
        assert_eq!(t, "KEY       OWNER\na         worker-long\nlong-key  -\n");
    }

    #[test]
    fn fields_align_values() {
        assert_eq!(
            fields(&[("key", "k".into()), ("epoch", "3".into())]),
            "key    k\nepoch  3\n"
        );
    }
}
