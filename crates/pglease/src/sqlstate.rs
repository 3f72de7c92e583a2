//! The SQLSTATEs that pg_lease's SQL API raises itself: the one table of them.
//!
//! A unit test reads every `ERRCODE = '.....'` in the current install script and the upgrade
//! scripts and checks that the set of
//! codes equals [`ALL`], so the SQL and this table cannot drift apart. PostgreSQL's own errors (a
//! missing privilege, a serialization failure, ...) keep their codes too; see [`crate::Error::code`].
//!
//! # Examples
//!
//! ```
//! # fn demo(e: &pglease::Error) {
//! match e.code() {
//!     Some(pglease::sqlstate::FENCE_NOT_OWNER) => println!("someone else holds the key"),
//!     Some(pglease::sqlstate::FENCE_LAPSED) => println!("the lease lapsed"),
//!     Some(pglease::sqlstate::FENCE_EPOCH_MISMATCH) => println!("a newer grant exists"),
//!     _ => {}
//! }
//! # }
//! ```

/// `22023` (`invalid_parameter_value`): an argument violates the API's limits; nothing changed.
///
/// The DETAIL lists every violation, separated by `"; "`. See [`crate::Error::is_invalid_input`].
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::INVALID_INPUT, "22023");
/// ```
pub const INVALID_INPUT: &str = "22023";

/// `57014` (`query_canceled`): a waiting `lease.acquire` reached its deadline; nothing was granted.
///
/// PostgreSQL raises the same code for `statement_timeout` and cancel requests. See
/// [`crate::Error::is_wait_timeout`].
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::WAIT_TIMEOUT, "57014");
/// ```
pub const WAIT_TIMEOUT: &str = "57014";

/// `55000` (`object_not_in_prerequisite_state`): installing or updating pg_lease refused because
/// schema `lease` is not fit for it: it is not empty (a fresh install), holds objects that are not
/// pg_lease's, or is not the extension's schema (an update). Nothing changed.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::SCHEMA_NOT_CLEAN, "55000");
/// ```
pub const SCHEMA_NOT_CLEAN: &str = "55000";

/// `LE001`: `lease.fence` — the caller does not hold the key (unknown, free, or another owner's).
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::FENCE_NOT_OWNER, "LE001");
/// ```
pub const FENCE_NOT_OWNER: &str = "LE001";

/// `LE002`: `lease.fence` — the caller's lease on the key lapsed.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::FENCE_LAPSED, "LE002");
/// ```
pub const FENCE_LAPSED: &str = "LE002";

/// `LE003`: `lease.fence` — the caller holds the key, but at another epoch than the one presented.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::FENCE_EPOCH_MISMATCH, "LE003");
/// ```
pub const FENCE_EPOCH_MISMATCH: &str = "LE003";

/// Every SQLSTATE pg_lease raises, as `(code, PostgreSQL condition name, meaning in pg_lease)`.
///
/// # Examples
///
/// ```
/// for (code, name, meaning) in pglease::sqlstate::ALL {
///     println!("{code} {name}: {meaning}");
/// }
/// ```
pub const ALL: &[(&str, &str, &str)] = &[
    (
        INVALID_INPUT,
        "invalid_parameter_value",
        "invalid input: a NULL, empty or over-long key, owner or prefix, or a ttl, wait or \
         older_than out of range; DETAIL names every violation; nothing changed",
    ),
    (
        WAIT_TIMEOUT,
        "query_canceled",
        "a waiting lease.acquire reached its deadline while another owner held the key; \
         nothing was granted",
    ),
    (
        SCHEMA_NOT_CLEAN,
        "object_not_in_prerequisite_state",
        "installing or updating pg_lease: schema lease is not empty, holds objects that are not \
         pg_lease's, or is not the extension's schema; nothing changed",
    ),
    (
        FENCE_NOT_OWNER,
        "pg_lease_fence_not_owner",
        "lease.fence: the caller does not hold the key (unknown, free, or held or last held by \
         another owner); the guarded transaction must not go on",
    ),
    (
        FENCE_LAPSED,
        "pg_lease_fence_lapsed",
        "lease.fence: the caller's lease on the key lapsed; the guarded transaction must not go on",
    ),
    (
        FENCE_EPOCH_MISMATCH,
        "pg_lease_fence_epoch_mismatch",
        "lease.fence: the key is the caller's at another epoch; the guarded transaction must not go on",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every code in an `ERRCODE = '.....'` clause of `sql`, in order of appearance.
    fn errcodes(sql: &str) -> Vec<String> {
        let mut codes = Vec::new();
        let mut rest = sql;
        while let Some(at) = rest.find("ERRCODE") {
            rest = &rest[at + "ERRCODE".len()..];
            let Some(value) = rest.trim_start().strip_prefix('=') else {
                continue;
            };
            let value = value.trim_start();
            if let Some(quoted) = value.strip_prefix('\'') {
                let end = quoted.find('\'').expect("unterminated ERRCODE literal");
                codes.push(quoted[..end].to_owned());
            }
        }
        codes
    }

    #[test]
    fn sql_and_table_agree_on_the_set_of_codes() {
        // The current API and every upgrade script (an update may refuse, too).
        let in_sql: BTreeSet<String> = crate::PG_LEASE
            .scripts
            .iter()
            .filter(|m| m.from.is_some() || m.to == crate::PG_LEASE.version)
            .flat_map(|m| errcodes(m.script))
            .collect();
        let in_table: BTreeSet<String> = ALL.iter().map(|(c, _, _)| (*c).to_owned()).collect();
        assert!(
            !in_sql.is_empty(),
            "found no ERRCODE in the extension script"
        );
        assert_eq!(in_sql, in_table, "extension SQL vs sqlstate::ALL");
    }

    #[test]
    fn table_entries_are_well_formed_and_unique() {
        let mut seen = BTreeSet::new();
        for (code, name, meaning) in ALL {
            assert_eq!(code.len(), 5, "{code}");
            assert!(
                code.bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
            );
            assert!(!name.is_empty() && !meaning.is_empty());
            assert!(seen.insert(*code), "duplicate {code}");
        }
    }

    #[test]
    fn errcodes_parser_reads_spacing_variants() {
        let sql = "RAISE USING ERRCODE='22023'; RAISE USING ERRCODE  =  '57014', ERRCODE x";
        assert_eq!(errcodes(sql), ["22023", "57014"]);
    }
}
