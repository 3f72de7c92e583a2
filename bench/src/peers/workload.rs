//! The work every system gets, and the check of what its consumers did with it.
//!
//! Message `i` of a backlog has key index `i % K` and sequence number `i / K` within its key (keys
//! round-robin), and a ~100-byte JSON payload `{"k":…,"s":…,"pad":"xx…"}` carrying both. The
//! drivers in bench/peers/common.mjs build the same messages.
//!
//! Every consumer takes a ticket from one counter of the run when its handler starts on a message
//! and another when the handler has finished it (before the system is told to settle it); a
//! handler given a batch handles its messages one after the other, in the order given. A message of
//! sequence `s` delivered while an earlier message of its key has not been finished — still queued,
//! or being handled — was processed out of order: an **order violation**. A correct per-key FIFO
//! system delivers `s` only after `s - 1` was settled, which happens after its finish ticket, so it
//! never shows one, however its consumers interleave.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// `{"k":<k>,"s":<s>,"pad":"xx…"}`, 100 bytes for small numbers.
pub(super) fn payload(k: u32, s: u32) -> String {
    let head = format!("{{\"k\":{k},\"s\":{s},\"pad\":\"");
    let pad = 100usize.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

/// (key index, sequence number within the key) of message `i`.
pub(super) fn message(i: u64, keys: u32) -> (u32, u32) {
    let k = u64::from(keys.max(1));
    ((i % k) as u32, (i / k) as u32)
}

/// How many messages a preload call carries: at most `max`, and never two of one key (the peers
/// order a key's jobs by a timestamp of the inserting transaction; jobs of one call tie on it).
pub fn preload_batch(keys: u32, max: u32) -> u32 {
    keys.min(max).max(1)
}

/// One handled message: key index, sequence number, delivery ticket, finish ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rec {
    pub(super) k: u32,
    pub(super) s: u32,
    pub(super) d: u64,
    pub(super) c: u64,
}

/// The run's ticket counter, shared by its consumers.
#[derive(Default)]
pub(super) struct Tickets(AtomicU64);

impl Tickets {
    pub(super) fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// A handler got `msgs` and handled them one after the other, in the order given.
    pub(super) fn handle(&self, msgs: &[(u32, u32)], out: &mut Vec<Rec>) {
        for &(k, s) in msgs {
            let d = self.next();
            out.push(Rec {
                k,
                s,
                d,
                c: self.next(),
            });
        }
    }
}

/// Records from a driver's flat list `[k, s, d, c, k, s, d, c, …]`.
pub(super) fn from_flat(flat: &[u64]) -> Vec<Rec> {
    flat.chunks_exact(4)
        .map(|r| Rec {
            k: r[0] as u32,
            s: r[1] as u32,
            d: r[2],
            c: r[3],
        })
        .collect()
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct OrderCheck {
    /// Messages handled (records).
    pub handled: u64,
    /// Distinct messages handled.
    pub distinct: u64,
    /// Handled more than once (records beyond the first of a message).
    pub duplicates: u64,
    /// Deliveries of a message while an earlier message of its key was not finished.
    pub violations: u64,
    /// Keys with at least one violation.
    pub keys_violated: u64,
    /// The first violation, in words.
    pub example: Option<String>,
}

/// Checks per-key order over `recs` (see the module's documentation).
pub(super) fn check(recs: &[Rec], keys: u32) -> OrderCheck {
    // Per key, every event in ticket order: (ticket, is_finish, seq).
    let mut by_key: Vec<Vec<(u64, bool, u32)>> = vec![Vec::new(); keys.max(1) as usize];
    for r in recs {
        if let Some(v) = by_key.get_mut(r.k as usize) {
            v.push((r.d, false, r.s));
            v.push((r.c, true, r.s));
        }
    }
    let mut out = OrderCheck {
        handled: recs.len() as u64,
        ..OrderCheck::default()
    };
    for (k, events) in by_key.iter_mut().enumerate() {
        if events.is_empty() {
            continue;
        }
        events.sort_unstable();
        let max = events.iter().map(|e| e.2).max().unwrap_or(0) as usize;
        let mut finished = vec![false; max + 1];
        let mut delivered = vec![false; max + 1];
        // Every sequence number below `prefix` is finished.
        let mut prefix = 0usize;
        let mut violated = false;
        for &(ticket, is_finish, s) in events.iter() {
            let s = s as usize;
            if is_finish {
                finished[s] = true;
                while prefix <= max && finished[prefix] {
                    prefix += 1;
                }
                continue;
            }
            if delivered[s] {
                out.duplicates += 1;
            } else {
                delivered[s] = true;
                out.distinct += 1;
            }
            if !finished[s] && s > prefix {
                out.violations += 1;
                violated = true;
                if out.example.is_none() {
                    out.example = Some(format!(
                        "key {k}: message {s} delivered (ticket {ticket}) while message {prefix} of the key was not finished"
                    ));
                }
            }
        }
        if violated {
            out.keys_violated += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(k: u32, s: u32, d: u64, c: u64) -> Rec {
        Rec { k, s, d, c }
    }

    #[test]
    fn payloads_are_100_bytes_and_carry_key_and_seq() {
        let p = payload(63, 311);
        assert_eq!(p.len(), 100);
        let v: serde_json::Value = serde_json::from_str(&p).expect("json");
        assert_eq!(v["k"], 63);
        assert_eq!(v["s"], 311);
        assert_eq!(message(130, 64), (2, 2));
        assert_eq!(preload_batch(64, 1000), 64);
        assert_eq!(preload_batch(10_000, 1000), 1000);
    }

    #[test]
    fn in_order_interleaved_consumers_pass() {
        // Key 0 by two consumers, one after the other; key 1 concurrently.
        let recs = [
            rec(0, 0, 1, 3),
            rec(1, 0, 2, 4),
            rec(0, 1, 5, 6),
            rec(1, 1, 7, 8),
        ];
        let c = check(&recs, 2);
        assert_eq!((c.violations, c.duplicates, c.distinct), (0, 0, 4));
    }

    #[test]
    fn overlap_swap_and_gap_are_violations() {
        // Message 1 delivered before message 0 finished (overlap).
        assert_eq!(check(&[rec(0, 0, 1, 3), rec(0, 1, 2, 4)], 1).violations, 1);
        // Swapped: 1 before 0: one violation (1), not two.
        assert_eq!(check(&[rec(0, 1, 1, 2), rec(0, 0, 3, 4)], 1).violations, 1);
        // Gap: message 0 never handled.
        let c = check(&[rec(0, 1, 1, 2), rec(0, 2, 3, 4)], 1);
        assert_eq!((c.violations, c.keys_violated), (2, 1));
        assert!(c.example.is_some());
    }

    #[test]
    fn redelivery_is_a_duplicate_not_a_violation() {
        let c = check(&[rec(0, 0, 1, 2), rec(0, 0, 3, 4), rec(0, 1, 5, 6)], 1);
        assert_eq!((c.violations, c.duplicates, c.distinct), (0, 1, 2));
    }

    #[test]
    fn tickets_and_flat_records() {
        let t = Tickets::default();
        let mut out = Vec::new();
        t.handle(&[(0, 0), (1, 0)], &mut out);
        assert_eq!(out, vec![rec(0, 0, 1, 2), rec(1, 0, 3, 4)]);
        assert_eq!(from_flat(&[0, 0, 1, 2, 1, 0, 3, 4, 9]), out);
        // Records of an unknown key are ignored, never a panic.
        assert_eq!(check(&[rec(7, 0, 1, 2)], 2).distinct, 0);
    }
}
