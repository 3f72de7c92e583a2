//! The SQLSTATEs that our SQL APIs raise themselves: the one table of them per extension, [`ALL`]
//! for pg_lease and [`QUEUE`] for pg_lease_queue.
//!
//! A unit test reads every `ERRCODE = '.....'` in each extension's current install script and
//! upgrade scripts and checks that the set of codes equals its table, so the SQL and the tables
//! cannot drift apart. PostgreSQL's own errors (a missing privilege, a serialization failure, ...)
//! keep their codes too; see [`crate::Error::code`].
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

/// `42501` (`insufficient_privilege`): the lease was granted to another role. `lease.renew`,
/// `lease.renew_many`, `lease.release` and `lease.fence` refuse a HELD grant that a role made which
/// the session's login role is neither nor a member of; nothing changed. (PostgreSQL raises the same
/// code for a missing privilege, e.g. calling `lease.force_release` without the admin right.) See
/// [`crate::Error::is_other_role`].
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::OTHER_ROLE, "42501");
/// ```
pub const OTHER_ROLE: &str = "42501";

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

/// `LE004`: `lease.acquire` / `lease.acquire_slot` — no new grant: the server was promoted and is
/// in the failover quarantine the installing role turned on (`lease.configure`), during which
/// grants the old primary made and the standby never received may still be acted on by their
/// holders. Nothing was granted; retry after the quarantine (`lease.configuration()` says until
/// when). See [`crate::Error::is_quarantined`].
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::QUARANTINED, "LE004");
/// ```
pub const QUARANTINED: &str = "LE004";

/// `LQ001`: pg_lease_queue — there is no queue of that name (or it was dropped while the call
/// waited for its partition). Nothing changed.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::QUEUE_NOT_FOUND, "LQ001");
/// ```
pub const QUEUE_NOT_FOUND: &str = "LQ001";

/// `LQ002`: pg_lease_queue `ack` / `nack` — the batch is not the partition's open batch at the
/// caller's epoch (already closed by another ack, never issued, or issued to an older epoch and not
/// yet received at this one). Nothing changed.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::BATCH_NOT_OPEN, "LQ002");
/// ```
pub const BATCH_NOT_OPEN: &str = "LQ002";

/// `LQ003`: pg_lease_queue `nack` — the message is not in the open batch. Nothing changed.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::MESSAGE_NOT_IN_BATCH, "LQ003");
/// ```
pub const MESSAGE_NOT_IN_BATCH: &str = "LQ003";

/// `LQ004`: pg_lease_queue `receive` — the caller holds the partition's lease at this epoch, but
/// took it with `lease.acquire` instead of `lease_queue.claim`, so the queue knows no ttl to renew
/// it with. Nothing changed.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::NOT_CLAIMED, "LQ004");
/// ```
pub const NOT_CLAIMED: &str = "LQ004";

/// `55006` (`object_in_use`): pg_lease_queue `release` without `force` while the partition has an
/// open batch, or `redrive` of a key that was delivered in the open batch. Nothing changed.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::BATCH_OPEN, "55006");
/// ```
pub const BATCH_OPEN: &str = "55006";

/// `42710` (`duplicate_object`): pg_lease_queue `create_queue` of a name that exists.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::sqlstate::QUEUE_EXISTS, "42710");
/// ```
pub const QUEUE_EXISTS: &str = "42710";

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
        "invalid input: a NULL, empty or over-long key, owner, prefix, semaphore or data, a ttl, \
         wait or older_than out of range (a ttl above the installing role's max_ttl), a max_holders \
         or slot out of [1, 10000], malformed renew_many arrays, or settings out of range; DETAIL \
         names every violation; nothing changed",
    ),
    (
        WAIT_TIMEOUT,
        "query_canceled",
        "a waiting lease.acquire (lease.acquire_slot) reached its deadline while another owner \
         held the key (every slot was held); nothing was granted",
    ),
    (
        SCHEMA_NOT_CLEAN,
        "object_not_in_prerequisite_state",
        "installing or updating pg_lease: schema lease is not empty, holds objects that are not \
         pg_lease's, or is not the extension's schema; nothing changed",
    ),
    (
        OTHER_ROLE,
        "insufficient_privilege",
        "lease.renew, lease.renew_many, lease.release or lease.fence on a HELD grant made by a role \
         that the session's login role is neither nor a member of; nothing changed",
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
    (
        QUARANTINED,
        "pg_lease_failover_quarantine",
        "lease.acquire (lease.acquire_slot): no new grant during the failover quarantine after a \
         promotion (lease.configure); nothing was granted; retry after it",
    ),
];

/// SQLSTATEs that pg_lease raises and catches inside one function, so no caller ever sees them:
/// `LE900`, with which `lease.renew_many` abandons its fast path for the careful one. They are not
/// in [`ALL`]; the unit test that compares [`ALL`] with the SQL leaves them out.
///
/// # Examples
///
/// ```
/// assert!(pglease::sqlstate::INTERNAL.contains(&"LE900"));
/// ```
pub const INTERNAL: &[&str] = &["LE900"];

/// Every SQLSTATE pg_lease_queue raises, as `(code, PostgreSQL condition name, meaning in
/// pg_lease_queue)`. Its fenced calls raise pg_lease's own fencing codes (`LE001`–`LE003`).
///
/// # Examples
///
/// ```
/// assert!(pglease::sqlstate::QUEUE.iter().any(|(c, _, _)| *c == pglease::sqlstate::FENCE_LAPSED));
/// ```
pub const QUEUE: &[(&str, &str, &str)] = &[
    (
        INVALID_INPUT,
        "invalid_parameter_value",
        "invalid input (also a partition out of range for the queue); DETAIL names every \
         violation; nothing changed",
    ),
    (
        SCHEMA_NOT_CLEAN,
        "object_not_in_prerequisite_state",
        "installing pg_lease_queue: schema lease_queue is not empty; or send/send_batch with \
         session_replication_role = replica (the commit-order trigger would not fire); nothing \
         changed",
    ),
    (
        OTHER_ROLE,
        "insufficient_privilege",
        "lease_queue's producing or consuming calls: the session's login role (a role it is a \
         member of, or PUBLIC) was not granted produce or consume on the queue, or the partition's \
         lease is held under another role; nothing changed",
    ),
    (
        QUEUE_EXISTS,
        "duplicate_object",
        "create_queue: a queue of that name exists",
    ),
    (
        BATCH_OPEN,
        "object_in_use",
        "release without force while the partition has an open batch, or redrive of a key that was \
         delivered in the open batch; nothing changed",
    ),
    (
        QUEUE_NOT_FOUND,
        "pg_lease_queue_no_such_queue",
        "no queue of that name (or dropped while the call waited); nothing changed",
    ),
    (
        BATCH_NOT_OPEN,
        "pg_lease_queue_batch_not_open",
        "ack/nack: not the partition's open batch at the caller's epoch; nothing changed",
    ),
    (
        MESSAGE_NOT_IN_BATCH,
        "pg_lease_queue_message_not_in_batch",
        "nack: the message is not in the open batch; nothing changed",
    ),
    (
        NOT_CLAIMED,
        "pg_lease_queue_not_claimed",
        "receive: the lease at this epoch was not taken through claim/claim_any; nothing changed",
    ),
    (
        FENCE_NOT_OWNER,
        "pg_lease_fence_not_owner",
        "receive/ack/nack/release: the caller does not hold the partition; nothing changed",
    ),
    (
        FENCE_LAPSED,
        "pg_lease_fence_lapsed",
        "receive/ack/nack/release: the caller's lease on the partition lapsed; nothing changed",
    ),
    (
        FENCE_EPOCH_MISMATCH,
        "pg_lease_fence_epoch_mismatch",
        "receive/ack/nack/release: the caller holds the partition at another epoch; nothing changed",
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
            .filter(|code| !INTERNAL.contains(&code.as_str()))
            .collect();
        let in_table: BTreeSet<String> = ALL.iter().map(|(c, _, _)| (*c).to_owned()).collect();
        assert!(
            !in_sql.is_empty(),
            "found no ERRCODE in the extension script"
        );
        assert_eq!(in_sql, in_table, "extension SQL vs sqlstate::ALL");
    }

    #[test]
    fn queue_sql_and_table_agree_on_the_set_of_codes() {
        let ext = &crate::PG_LEASE_QUEUE;
        let mut in_sql: BTreeSet<String> = ext
            .scripts
            .iter()
            .filter(|m| m.from.is_some() || m.to == ext.version)
            .flat_map(|m| errcodes(m.script))
            .collect();
        // The fencing codes come from lease.fence, or are chosen by a CASE (_raise_fenced).
        for code in [FENCE_NOT_OWNER, FENCE_LAPSED, FENCE_EPOCH_MISMATCH] {
            assert!(
                ext.install_script().script.contains(&format!("'{code}'")),
                "{code}"
            );
            in_sql.insert(code.to_owned());
        }
        let in_table: BTreeSet<String> = QUEUE.iter().map(|(c, _, _)| (*c).to_owned()).collect();
        assert_eq!(in_sql, in_table, "pg_lease_queue SQL vs sqlstate::QUEUE");
    }

    #[test]
    fn table_entries_are_well_formed_and_unique() {
        for table in [ALL, QUEUE] {
            table_is_well_formed(table);
        }
    }

    fn table_is_well_formed(table: &[(&str, &str, &str)]) {
        let mut seen = BTreeSet::new();
        for (code, name, meaning) in table {
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
