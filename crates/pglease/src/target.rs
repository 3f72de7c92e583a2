//! [`Target`]: what an acquire asks for, a key or a slot of a semaphore. One type serves every
//! part that needs to know: the attempt (which SQL call it sends, what its clean-up looks for),
//! the client's reservations, the wait between attempts, and the sharding gate (what it routes).

/// What an acquire asks for: one key, or any slot of a semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// The key itself (`lease.acquire`); waiting means waiting for its holder's release or lapse.
    Key(String),
    /// The lowest free slot `name#N` of the semaphore `name` (`lease.acquire_slot`) while fewer
    /// than `max_holders` are held; waiting means waiting for any holder's release or lapse.
    Semaphore { name: String, max_holders: u32 },
}

impl Target {
    /// The key, or the semaphore's name: the `key` field of every event about the acquire.
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Key(key) => key,
            Target::Semaphore { name, .. } => name,
        }
    }

    /// What the acquire is called in errors, e.g. `acquire of key "k"`.
    pub(crate) fn what(&self) -> String {
        match self {
            Target::Key(key) => format!("acquire of key {key:?}"),
            Target::Semaphore { name, .. } => {
                format!("acquire of a slot of semaphore {name:?}")
            }
        }
    }

    /// The name under which the client reserves the target while it holds or acquires it: the
    /// key itself, or for a semaphore a name no key can have (keys cannot contain NUL), since a
    /// client holds at most one slot of a semaphore.
    pub(crate) fn reservation(&self) -> String {
        match self {
            Target::Key(key) => key.clone(),
            Target::Semaphore { name, .. } => format!("\0semaphore\0{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semaphore_is_reserved_under_a_name_no_key_can_have() {
        let key = Target::Key("runners".into());
        let semaphore = Target::Semaphore {
            name: "runners".into(),
            max_holders: 3,
        };
        assert_eq!(key.name(), semaphore.name());
        assert_ne!(key.reservation(), semaphore.reservation());
        assert!(semaphore.reservation().contains('\0'));
    }
}
