//! Balancing: how many partitions a balanced consumer should hold.
//!
//! Every balanced consumer of a queue holds a **membership lease** on key
//! `lease_queue.consumers:<queue>:<owner>` while it runs, so that a consumer holding no partition
//! yet is counted. Each one periodically reads the membership keys and the partition keys
//! (`lease.list`), and aims at its share:
//!
//! ```text
//! target = min(max, ceil((partitions - held_by_others) / members))
//! ```
//!
//! where `members` counts the live membership leases (itself included) and `held_by_others`
//! the partitions held by owners that are not members (consumers with a fixed list of
//! partitions, or anyone else holding a partition's lease): those are not up for sharing. A
//! consumer below its target claims free partitions (`claim_any`); one above it releases the
//! surplus after acking the open batch, so that a consumer that joins gets partitions without
//! anyone crashing. Because every consumer rounds up, the targets cover all partitions.

use std::collections::HashSet;

/// The key prefix of a queue's membership leases.
pub(crate) fn member_prefix(queue: &str) -> String {
    format!("lease_queue.consumers:{queue}:")
}

/// The key prefix of a queue's partition leases (`lease_queue.lease_key`).
pub(crate) fn partition_prefix(queue: &str) -> String {
    format!("lease_queue:{queue}:")
}

/// The lease key of partition `p` of `queue`.
pub(crate) fn partition_key(queue: &str, p: u32) -> String {
    format!("lease_queue:{queue}:{p}")
}

/// What a balanced consumer sees: the live members (owners) and the holder of each held partition.
#[derive(Debug, Default)]
pub(crate) struct View {
    pub(crate) members: HashSet<String>,
    pub(crate) holders: Vec<String>,
}

/// The share of partitions one member should hold: see the module docs. `me` counts as a member
/// even if its membership lease is not (yet) visible.
pub(crate) fn target(partitions: u32, view: &View, me: &str, max: Option<u32>) -> u32 {
    let mut members = view.members.len();
    if !view.members.contains(me) {
        members += 1;
    }
    let foreign = view
        .holders
        .iter()
        .filter(|owner| owner.as_str() != me && !view.members.contains(owner.as_str()))
        .count();
    let shared = partitions.saturating_sub(u32::try_from(foreign).unwrap_or(u32::MAX));
    let members = u32::try_from(members).unwrap_or(u32::MAX).max(1);
    let share = shared.div_ceil(members);
    max.map_or(share, |m| share.min(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(members: &[&str], holders: &[&str]) -> View {
        View {
            members: members.iter().map(|s| (*s).to_owned()).collect(),
            holders: holders.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn a_newcomer_gets_a_share_and_the_incumbent_gives_one_up() {
        // a holds all 4 partitions; b has just joined.
        let v = view(&["a", "b"], &["a", "a", "a", "a"]);
        assert_eq!(target(4, &v, "a", None), 2);
        assert_eq!(target(4, &v, "b", None), 2);
    }

    #[test]
    fn shares_round_up_so_every_partition_is_covered() {
        let v = view(&["a", "b", "c"], &[]);
        assert_eq!(target(4, &v, "a", None), 2);
        assert_eq!(target(1, &v, "a", None), 1);
        assert_eq!(target(0, &v, "a", None), 0);
    }

    #[test]
    fn partitions_held_by_non_members_are_not_shared() {
        // f holds partition 0 with a fixed list; a is the only balanced member.
        let v = view(&["a"], &["f"]);
        assert_eq!(target(4, &v, "a", None), 3);
    }

    #[test]
    fn me_counts_before_my_membership_is_visible_and_max_caps() {
        let v = view(&["a"], &["a", "a"]);
        assert_eq!(target(4, &v, "b", None), 2);
        assert_eq!(target(8, &view(&["a"], &[]), "a", Some(3)), 3);
    }
}
