//! The slot map's text form, for configuration: `[count:][!]first[-last]=shard,...` (see
//! [`SlotMap`]).

use std::fmt;
use std::str::FromStr;

use super::{DEFAULT_SLOTS, SlotMap, SlotMapError};

impl fmt::Display for SlotMap {
    /// The text form: `count:` and the merged runs, `[!]first[-last]=shard`, comma-separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.slots)?;
        for (i, run) in self.runs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if run.paused {
                f.write_str("!")?;
            }
            if run.start == run.end {
                write!(f, "{}={}", run.start, run.shard)?;
            } else {
                write!(f, "{}-{}={}", run.start, run.end, run.shard)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for SlotMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotMap({self})")
    }
}

impl FromStr for SlotMap {
    type Err = SlotMapError;

    /// Reads the text form (see [`SlotMap`]), checking it as [`SlotMap::new`] does.
    fn from_str(text: &str) -> Result<SlotMap, SlotMapError> {
        let (slots, body) = match text.split_once(':') {
            Some((count, body)) => (parse_number(count)?, body),
            None => (DEFAULT_SLOTS, text),
        };
        let entries = body
            .split(',')
            .map(parse_entry)
            .collect::<Result<Vec<_>, _>>()?;
        SlotMap::build(slots, entries)
    }
}

fn syntax(entry: &str, reason: &str) -> SlotMapError {
    SlotMapError::Syntax {
        entry: entry.trim().to_owned(),
        reason: reason.to_owned(),
    }
}

/// A slot number or count: ASCII digits only (no sign), fitting in a u32.
fn parse_number(text: &str) -> Result<u32, SlotMapError> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(syntax(text, "expected a number"));
    }
    t.parse().map_err(|_| syntax(text, "number too large"))
}

/// One entry `[!]first[-last]=shard`.
fn parse_entry(entry: &str) -> Result<(u32, u32, String, bool), SlotMapError> {
    let Some((range, shard)) = entry.split_once('=') else {
        return Err(syntax(entry, "expected first[-last]=shard"));
    };
    let range = range.trim();
    let (paused, range) = match range.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, range),
    };
    let (start, end) = match range.split_once('-') {
        Some((a, b)) => (parse_number(a)?, parse_number(b)?),
        None => {
            let n = parse_number(range)?;
            (n, n)
        }
    };
    Ok((start, end, shard.trim().to_owned(), paused))
}
