//! Input generators: adversarial text, interval literals and epochs. Values print shortly (a 1 MB
//! string shows as its length and a prefix) so that a failing case stays readable.

use std::fmt;

use proptest::prelude::*;
use proptest::sample::select;

/// A text argument: NULL or a string (which may contain NUL).
#[derive(Clone, PartialEq)]
pub struct Text(pub Option<String>);

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => write!(f, "NULL"),
            Some(s) if s.len() <= 80 => write!(f, "{s:?}"),
            Some(s) => {
                let head: String = s.chars().take(24).collect();
                write!(f, "<{} bytes: {head:?}...>", s.len())
            }
        }
    }
}

impl Text {
    pub fn has_nul(&self) -> bool {
        self.0.as_deref().is_some_and(|s| s.contains('\0'))
    }

    /// The DETAIL fragment a key-like argument `name` must produce, if it violates a limit.
    pub fn violation(&self, name: &str, may_be_null: bool, may_be_empty: bool) -> Option<String> {
        match self.0.as_deref() {
            None if !may_be_null => Some(format!("{name} must not be NULL")),
            Some("") if !may_be_empty => Some(format!("{name} must not be empty")),
            Some(s) if s.len() > 1024 => Some(format!(
                "{name} must be at most 1024 bytes (got {})",
                s.len()
            )),
            _ => None,
        }
    }

    /// Non-NULL, non-empty, at most 1024 bytes, no NUL: a key/owner the API accepts.
    pub fn valid(&self) -> bool {
        self.violation("x", false, false).is_none() && !self.has_nul()
    }
}

/// Pieces that tend to break quoting, escaping, collation, byte/character arithmetic or display.
const FRAGMENTS: &[&str] = &[
    "a",
    "Z",
    "k",
    "lease",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\u{7}",
    "\u{8}",
    "\u{1b}[31m",
    "\u{7f}",
    "\u{85}",
    "\u{2028}",
    "'",
    "''",
    "\"",
    "\\",
    "\\\\",
    "\\'",
    "%",
    "_",
    "%_%",
    "\\%",
    "\\_",
    "$$",
    "$1",
    "$$;--",
    ";",
    "--",
    "/*",
    "*/",
    "' OR '1'='1",
    "'); DROP TABLE lease.leases; --",
    "e\u{301}",
    "\u{301}",
    "\u{202e}",
    "\u{200f}",
    "\u{200e}",
    "\u{200b}",
    "\u{200d}",
    "\u{feff}",
    "\u{1f600}",
    "\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467}",
    "\u{10ffff}",
    "\u{fffd}",
    "\u{e000}",
    "日本語",
    "ß",
    "İ",
    "ı",
    "Ω",
    "Å",
    "A\u{30a}",
    "\u{fb01}",
    "ｋ",
];

/// One fragment, or one arbitrary non-NUL character.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(FRAGMENTS).prop_map(str::to_string),
        1 => any::<char>()
            .prop_filter("no NUL", |c| *c != '\0')
            .prop_map(|c| c.to_string()),
    ]
}

/// A short adversarial string (1–8 fragments).
pub fn short_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(fragment(), 1..8).prop_map(|v| v.concat())
}

/// A string of exactly `n` bytes around the limits (1023..1026, 2700, 64 KiB, 1 MB), made of a
/// repeated fragment (so multibyte characters straddle the limit) padded with ASCII.
fn sized_text() -> impl Strategy<Value = String> {
    (
        select(&[1023usize, 1024, 1025, 1026, 2047, 2700, 65_536, 1_000_000][..]),
        fragment(),
    )
        .prop_map(|(n, f)| {
            let mut s = String::with_capacity(n);
            while s.len() + f.len() <= n {
                s.push_str(&f);
            }
            while s.len() < n {
                s.push('x');
            }
            s
        })
}

/// A text argument: NULL, empty, short adversarial, sized around the limits, or containing NUL.
pub fn text() -> impl Strategy<Value = Text> {
    prop_oneof![
        1 => Just(Text(None)),
        1 => Just(Text(Some(String::new()))),
        7 => short_text().prop_map(|s| Text(Some(s))),
        3 => sized_text().prop_map(|s| Text(Some(s))),
        1 => (short_text(), short_text()).prop_map(|(a, b)| Text(Some(format!("{a}\0{b}")))),
    ]
}

/// Interval literals at the edges (some unparseable on purpose; infinity exists from PG 17 on).
const EDGE_INTERVALS: &[&str] = &[
    "0",
    "-0",
    "00:00:00",
    "1 microsecond",
    "-1 microsecond",
    "0.000001 seconds",
    "1 millisecond",
    "50 milliseconds",
    "1 second",
    "1 hour",
    "1 day",
    "365 days",
    "365 days 00:00:00.000001",
    "366 days",
    "-365 days",
    "178000000 years",
    "-178000000 years",
    "1 month -30 days",
    "1 month -29 days",
    "-1 month 31 days",
    "1 year -365 days",
    "1 year -364 days",
    "1 year 5 days",
    "12 months 5 days 23:59:59",
    "1 day -86400 seconds",
    "1 day -86399.999999 seconds",
    "2147483647 days",
    "-2147483648 days",
    "2562047788 hours",
    "-2562047788 hours",
    "P1Y",
    "PT0.000001S",
    "P0D",
    "@ 1 sec ago",
    "1 week",
    "1 century",
    "1 millennium",
    "-1 millennium 1 day",
    "infinity",
    "-infinity",
    "",
    "banana",
    "1 fortnight",
    "999999999999 years",
    "'1 day'",
    "1 day; SELECT 1",
];

/// A mixed-sign composite interval, with calendar parts up to the largest the type holds, so parts
/// that cancel out (and would overflow timestamp arithmetic) come up.
fn composite_interval() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just(0i64),
            -2i64..=2,
            -1000i64..=1000,
            -170_000_000i64..=170_000_000
        ],
        -24i64..=24,
        prop_oneof![
            Just(0i64),
            -400i64..=400,
            -400_000i64..=400_000,
            -2_000_000_000i64..=2_000_000_000
        ],
        -10_000i64..=10_000,
        -5_000_000_000i64..=5_000_000_000,
    )
        .prop_map(|(y, mo, d, h, us)| {
            format!("{y} years {mo} months {d} days {h} hours {us} microseconds")
        })
}

/// An interval argument (as a literal to cast, or NULL).
pub fn interval() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        4 => select(EDGE_INTERVALS).prop_map(|s| Some(s.to_string())),
        3 => composite_interval().prop_map(Some),
        2 => (-2_000_000i64..=2_000_000).prop_map(|n| Some(format!("{n} milliseconds"))),
    ]
}

/// How an epoch argument is chosen: fixed values, or relative to the key's current epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Epoch {
    Null,
    Fixed(i64),
    /// The key's stored epoch plus this offset (fixed value 1 plus the offset if there is no row).
    Current(i64),
}

pub fn epoch() -> impl Strategy<Value = Epoch> {
    prop_oneof![
        1 => Just(Epoch::Null),
        3 => select(&[0i64, -1, 1, 2, i64::MIN, i64::MAX, i64::MAX - 1, i64::MIN + 1][..])
            .prop_map(Epoch::Fixed),
        1 => any::<i64>().prop_map(Epoch::Fixed),
        4 => select(&[0i64, 0, 0, -1, 1][..]).prop_map(Epoch::Current),
    ]
}

/// What state the key is put in before the call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Setup {
    /// Whatever earlier cases left.
    AsIs,
    /// Held for an hour by another owner.
    HeldByOther,
    /// Held for an hour by the call's owner.
    HeldByCaller,
    /// Held by the call's owner with a ttl that has passed by the time of the call.
    LapsedCaller,
    /// Released by the call's owner (FREE).
    Released,
}

pub fn setup() -> impl Strategy<Value = Setup> {
    select(
        &[
            Setup::AsIs,
            Setup::AsIs,
            Setup::HeldByOther,
            Setup::HeldByCaller,
            Setup::LapsedCaller,
            Setup::Released,
        ][..],
    )
}
