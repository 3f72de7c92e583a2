//! What the operator console's calls return: a key of a `lease.browse` page ([`BrowsedLease`]) in
//! one of the three states a key can be in ([`KeyState`]), and the counts of `lease.summary`
//! ([`LeaseCounts`]).

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use crate::error::{Error, Result};

/// The state of a key as [`browse`](crate::browse) judges it, at one reading of the server clock
/// (docs/SEMANTICS.md §2): held by an owner until its expiry, lapsed (its grant expired and was
/// not released), or free (released or forced, nobody owns it).
///
/// # Examples
///
/// ```
/// use pglease::KeyState;
/// assert_eq!("lapsed".parse::<KeyState>().unwrap(), KeyState::Lapsed);
/// assert_eq!(KeyState::Held.as_str(), "held");
/// assert!("HELD".parse::<KeyState>().unwrap_err().is_protocol());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyState {
    /// `held`: an owner holds the key, its expiry is still ahead on the server clock.
    Held,
    /// `lapsed`: the last grant expired without being released or renewed; nobody holds the key,
    /// anyone may acquire it.
    Lapsed,
    /// `free`: the last grant was released (or ended by `force_release`); nobody holds the key.
    Free,
}

impl KeyState {
    /// Every state, in the order of the SQL API's documentation.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::KeyState::ALL.len(), 3);
    /// ```
    pub const ALL: [KeyState; 3] = [KeyState::Held, KeyState::Lapsed, KeyState::Free];

    /// The SQL API's string: `held`, `lapsed` or `free` (what `lease.browse` returns in its `state`
    /// column and takes as its `state` filter).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::KeyState::Free.as_str(), "free");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            KeyState::Held => "held",
            KeyState::Lapsed => "lapsed",
            KeyState::Free => "free",
        }
    }
}

impl FromStr for KeyState {
    type Err = Error;

    /// Parses one of the SQL API's state strings, exactly (case-sensitive, no whitespace).
    ///
    /// # Errors
    ///
    /// Any other string is a protocol error ([`Error::is_protocol`]).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!("held".parse::<pglease::KeyState>().unwrap(), pglease::KeyState::Held);
    /// ```
    fn from_str(s: &str) -> Result<KeyState> {
        match s {
            "held" => Ok(KeyState::Held),
            "lapsed" => Ok(KeyState::Lapsed),
            "free" => Ok(KeyState::Free),
            other => Err(Error::protocol(format!("unknown key state {other:?}"))),
        }
    }
}

impl fmt::Display for KeyState {
    /// Writes [`KeyState::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key of a page from [`browse`](crate::browse), judged as of the call by the server clock.
///
/// Which fields are set follows from the state: `owner` and `data` only while
/// [`KeyState::Held`]; `expires_at` while held (the expiry) or lapsed (the moment it lapsed);
/// `last_owner` only when [`KeyState::Lapsed`]; `waiting` never for a free key.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// use pglease::{BrowseQuery, KeyState};
///
/// for k in pglease::browse(db, &BrowseQuery::new().prefix("job-")).await? {
///     match k.state {
///         KeyState::Held => println!("{}: {:?} at epoch {}", k.key, k.owner, k.epoch),
///         KeyState::Lapsed => println!("{}: lapsed, last held by {:?}", k.key, k.last_owner),
///         KeyState::Free => println!("{}: free, next epoch above {}", k.key, k.epoch),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BrowsedLease {
    /// The key.
    pub key: String,
    /// Held, lapsed or free, at the server clock's reading when the call started.
    pub state: KeyState,
    /// The holder, while held; `None` otherwise (see [`BrowsedLease::last_owner`]).
    pub owner: Option<String>,
    /// The key's epoch: the current grant's (held or lapsed), or for a free key its fencing
    /// counter (every epoch up to it is stale; the next grant gets a greater one).
    pub epoch: i64,
    /// Server time of the expiry while held, of the lapse when lapsed; `None` when free.
    pub expires_at: Option<SystemTime>,
    /// The holder's data (see [`AcquireBuilder::data`](crate::AcquireBuilder::data)), while
    /// held.
    pub data: Option<String>,
    /// Someone waits for the key (a waiter registered on its current grant, e.g. a
    /// [`Client::acquire`](crate::Client::acquire) waiting on another client): set while held or
    /// lapsed, never for a free key.
    pub waiting: bool,
    /// The owner whose grant lapsed, for a lapsed key; `None` otherwise.
    pub last_owner: Option<String>,
}

/// How many keys are in each state, from [`summary`](crate::summary), all judged at one reading of
/// the server clock and counted in one scan.
///
/// `held + lapsed + free` is the number of keys the database knows (purged keys are not counted).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// use std::time::Duration;
///
/// let c = pglease::summary(db, Duration::from_secs(10)).await?;
/// println!("{} held ({} lapse within 10 s), {} lapsed, {} free, {} awaited", c.held, c.expiring,
///          c.lapsed, c.free, c.waiting);
/// assert_eq!(c.total(), c.held + c.lapsed + c.free);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct LeaseCounts {
    /// Keys held now.
    pub held: u64,
    /// Keys whose grant lapsed (expired, not released).
    pub lapsed: u64,
    /// Keys released or forced free.
    pub free: u64,
    /// Held keys whose expiry is within the call's `expiring_within` of now: they lapse that soon
    /// unless their holders renew.
    pub expiring: u64,
    /// Held or lapsed keys someone waits for.
    pub waiting: u64,
}

impl LeaseCounts {
    /// Every key the database knows: `held + lapsed + free`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::LeaseCounts::default().total(), 0);
    /// ```
    pub const fn total(&self) -> u64 {
        self.held + self.lapsed + self.free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_state_strings_round_trip_and_appear_in_the_sql() {
        let sql = crate::PG_LEASE.install_script().script;
        for s in KeyState::ALL {
            assert_eq!(s.as_str().parse::<KeyState>().unwrap(), s);
            assert_eq!(s.to_string(), s.as_str());
            assert!(sql.contains(&format!("'{}'", s.as_str())), "{s}");
        }
        for bad in ["", "HELD", " held", "expired", "busy"] {
            assert!(
                bad.parse::<KeyState>().unwrap_err().is_protocol(),
                "{bad:?}"
            );
        }
    }
}
