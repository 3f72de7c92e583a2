//! What `lease.history` returns: a grant of a key's history ([`HistoryEntry`]) and how it ended
//! ([`EndedBy`]).

use std::fmt;
use std::time::SystemTime;
/// How a grant in the history ended ([`HistoryEntry::ended_by`]), as `lease.history` names it.
///
/// A grant that a later call ended where it happened says so directly (forced, transferred, or
/// the end of a key's last grant written by purge, which is `released` or `lapsed`); a release or
/// a lapse is otherwise read from the key's next grant or from its row now. A strings this client
/// does not know (from a newer pg_lease) is kept as [`EndedBy::Other`].
///
/// # Examples
///
/// ```
/// use pglease::EndedBy;
/// assert_eq!(EndedBy::parse("transferred"), EndedBy::Transferred);
/// assert_eq!(EndedBy::parse("evicted"), EndedBy::Other("evicted".into()));
/// assert_eq!(EndedBy::Lapsed.as_str(), "lapsed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndedBy {
    /// `released`: the holder released it (or, when purge ended the record, the key was free).
    Released,
    /// `lapsed`: it expired without a renewal; `ended_at` is its expiry (shown as soon as it
    /// passes, before any later grant).
    Lapsed,
    /// `forced`: an operator ended it with `lease.force_release` ([`force_release`](crate::force_release)).
    Forced,
    /// `transferred`: its holder handed the key to another owner ([`transfer`](crate::transfer));
    /// the next entry is the successor's grant.
    Transferred,
    /// `unrecorded`: it ended while the history was off ([`configure_history`](crate::configure_history)),
    /// so how and when is unknown (`ended_at` is `None`).
    Unrecorded,
    /// A string this client does not know, kept as the server sent it.
    Other(String),
}

impl EndedBy {
    /// The known ends, in the order of the SQL API's documentation.
    #[cfg(test)]
    pub(crate) const KNOWN: [EndedBy; 5] = [
        EndedBy::Released,
        EndedBy::Lapsed,
        EndedBy::Forced,
        EndedBy::Transferred,
        EndedBy::Unrecorded,
    ];

    /// Reads the SQL API's string (exactly, case-sensitive); any other string is
    /// [`EndedBy::Other`].
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::EndedBy::parse("forced"), pglease::EndedBy::Forced);
    /// ```
    pub fn parse(s: &str) -> EndedBy {
        match s {
            "released" => EndedBy::Released,
            "lapsed" => EndedBy::Lapsed,
            "forced" => EndedBy::Forced,
            "transferred" => EndedBy::Transferred,
            "unrecorded" => EndedBy::Unrecorded,
            other => EndedBy::Other(other.to_owned()),
        }
    }

    /// The SQL API's string: `released`, `lapsed`, `forced`, `transferred`, `unrecorded`, or the
    /// unknown string kept in [`EndedBy::Other`].
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(pglease::EndedBy::Transferred.as_str(), "transferred");
    /// ```
    pub fn as_str(&self) -> &str {
        match self {
            EndedBy::Released => "released",
            EndedBy::Lapsed => "lapsed",
            EndedBy::Forced => "forced",
            EndedBy::Transferred => "transferred",
            EndedBy::Unrecorded => "unrecorded",
            EndedBy::Other(s) => s,
        }
    }
}

impl fmt::Display for EndedBy {
    /// Writes [`EndedBy::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One grant of a key, from [`history`](crate::history), judged as of the call by the server
/// clock.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// for g in pglease::history(db, "scheduler", &pglease::HistoryQuery::new()).await? {
///     match &g.ended_by {
///         None => println!("epoch {}: {} holds it", g.epoch, g.owner),
///         Some(end) => println!("epoch {}: {} until {:?} ({end})", g.epoch, g.owner, g.ended_at),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// The grant's fencing epoch (entries come in epoch order).
    pub epoch: i64,
    /// The owner it was granted to.
    pub owner: String,
    /// The login role of the session that made the grant (the role that may renew, release and
    /// fence it); `None` for a grant made before pg_lease 0.8.0.
    pub holder_role: Option<String>,
    /// When it was granted (server time); `None` for a grant already held when the history began
    /// (the upgrade to pg_lease 0.9.0 recorded it without its start).
    pub granted_at: Option<SystemTime>,
    /// Its expiry: the current one while held, the last one it had once ended; `None` when unknown
    /// ([`EndedBy::Unrecorded`]).
    pub expires_at: Option<SystemTime>,
    /// When it ended (server time; a lapse's is its expiry); `None` while held, and for
    /// [`EndedBy::Unrecorded`].
    pub ended_at: Option<SystemTime>,
    /// How it ended; `None` while it is held (the current grant).
    pub ended_by: Option<EndedBy>,
    /// The data it was granted with (not later changes by renewals).
    pub data: Option<String>,
}

impl HistoryEntry {
    /// Whether this is the key's current grant, held as of the call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
    /// let grants = pglease::history(db, "scheduler", &pglease::HistoryQuery::new()).await?;
    /// let holder = grants.iter().find(|g| g.is_current()).map(|g| g.owner.as_str());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_current(&self) -> bool {
        self.ended_by.is_none()
    }
}
