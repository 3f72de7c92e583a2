//! Large synthetic histories that keep every invariant: a sequential model of pg_lease (one call at a
//! time on a made-up server clock, each call in its own 1 ms window) that records what each call
//! would have returned. They exercise every path of the checker (grants, re-acquires, renews,
//! releases, transfers, force_releases, fences in committed transactions, reads, refusals, rolled-back writes, lost calls,
//! purges) at any size, to show that the checker's work grows like n log n in their size.

use std::collections::HashSet;

use crate::model::{Call, Commit, Micros, Op, Outcome, View};
use crate::rng::Rng;

const BASE: Micros = 1_900_000_000_000_000;
/// Each call runs over `[t0, t0 + WINDOW]`, and the next one starts `STEP` later.
const WINDOW: Micros = 1_000;
const STEP: Micros = 2_000;

/// A key's row in the model.
#[derive(Debug, Clone, Default)]
struct Row {
    /// False until the first grant, and again after a purge removed the row.
    present: bool,
    /// The epoch of the last grant, or that plus one after its release.
    counter: i64,
    /// (owner, epoch, expiry) of the last grant while it is not released (it may have lapsed).
    holder: Option<(String, i64, Micros)>,
}

impl Row {
    /// The holder whose lease is unexpired at `t`.
    fn live(&self, t: Micros) -> Option<&(String, i64, Micros)> {
        self.holder.as_ref().filter(|h| h.2 > t)
    }
}

struct Gen {
    rng: Rng,
    ops: Vec<Op>,
    rows: Vec<Row>,
    floor: i64,
    owners: usize,
    next_tx: usize,
    /// Every (key, owner, epoch, expiry) any write produced, so that no two writes produce the same
    /// one (the checker pairs re-acquires with writes by that tuple).
    written: HashSet<(usize, String, i64, Micros)>,
}

/// Client clock (ns since a made-up start) for server time `t`.
fn client(t: Micros) -> u64 {
    ((t - BASE) * 1000 + 1_000_000_000) as u64
}

impl Gen {
    fn push(&mut self, call: Call, outcome: Outcome, t0: Micros) -> usize {
        let id = self.ops.len();
        self.ops.push(Op {
            id,
            client: id % 32,
            tx: None,
            call,
            outcome,
            t0: Some(t0),
            t1: Some(t0 + WINDOW),
            lo: t0,
            sent: client(t0),
            done: client(t0 + WINDOW),
            commit: Commit::Committed,
            visible_at: Some(client(t0 + WINDOW)),
        });
        id
    }

    /// Ends op `id` in a transaction of its own that rolled back.
    fn roll_back(&mut self, id: usize) {
        let tx = self.next_tx;
        self.next_tx += 1;
        let op = &mut self.ops[id];
        op.tx = Some(tx);
        op.commit = Commit::NotCommitted;
        op.visible_at = None;
    }

    /// A write instant within `[t0, t0 + WINDOW]` whose expiry no earlier write produced.
    fn instant(&mut self, k: usize, owner: &str, epoch: i64, t0: Micros, ttl_ms: i64) -> Micros {
        let mut at = t0 + self.rng.range(0, WINDOW / 2);
        while !self
            .written
            .insert((k, owner.to_string(), epoch, at + ttl_ms * 1000))
        {
            at += 1;
        }
        at
    }

    fn owner(&mut self) -> String {
        format!("o{}", self.rng.below(self.owners as u64))
    }

    fn ttl(&mut self) -> i64 {
        self.rng.range(15, 300)
    }

    /// (owner, epoch) for renew/release/fence: mostly the current holder's, sometimes a guess.
    fn target(&mut self, k: usize) -> (String, i64) {
        match (&self.rows[k].holder, self.rng.chance(80)) {
            (Some((o, e, _)), true) => (o.clone(), *e),
            _ => {
                let o = self.owner();
                let e = self.rng.range(1, self.rows[k].counter + 2);
                (o, e)
            }
        }
    }

    /// acquire(key, owner, ttl, 0) at `t0`; applies the grant unless `commit` is false.
    fn acquire(&mut self, k: usize, t0: Micros, commit: bool) -> usize {
        let owner = match (&self.rows[k].holder, self.rng.chance(30)) {
            (Some((o, _, _)), true) => o.clone(),
            _ => self.owner(),
        };
        let mut ttl_ms = self.ttl();
        let key = format!("k{k}");
        let live = self.rows[k].live(t0).cloned();
        let outcome = match live {
            Some((o, e, x)) if o == owner => {
                // A re-acquire: returns the lease as it is; its own ttl must not make the expiry
                // look like a grant written during this call.
                while (t0..=t0 + WINDOW).contains(&(x - ttl_ms * 1000)) {
                    ttl_ms += 5;
                }
                Outcome::Acquired {
                    acquired: true,
                    epoch: Some(e),
                    expires_at: Some(x),
                }
            }
            Some(_) => Outcome::Acquired {
                acquired: false,
                epoch: None,
                expires_at: None,
            },
            None => {
                let row = &self.rows[k];
                let epoch = if row.present {
                    row.counter + 1
                } else {
                    row.counter.max(self.floor) + 1
                };
                let at = self.instant(k, &owner, epoch, t0, ttl_ms);
                let x = at + ttl_ms * 1000;
                if commit {
                    let row = &mut self.rows[k];
                    row.present = true;
                    row.counter = epoch;
                    row.holder = Some((owner.clone(), epoch, x));
                }
                Outcome::Acquired {
                    acquired: true,
                    epoch: Some(epoch),
                    expires_at: Some(x),
                }
            }
        };
        let call = Call::Acquire {
            key,
            owner,
            ttl_ms,
            wait_ms: 0,
        };
        let id = self.push(call, outcome, t0);
        if !commit {
            self.roll_back(id);
        }
        id
    }

    /// The status renew/release report for (owner, epoch) at `t0`.
    fn status(&self, k: usize, owner: &str, epoch: i64, t0: Micros) -> &'static str {
        match &self.rows[k].holder {
            Some((o, e, x)) if o == owner && *e == epoch => {
                if *x > t0 {
                    "ok"
                } else {
                    "lapsed"
                }
            }
            Some((o, _, _)) if o == owner => "epoch_mismatch",
            _ => "not_owner",
        }
    }

    fn renew(&mut self, k: usize, t0: Micros, commit: bool) -> usize {
        let (owner, epoch) = self.target(k);
        let ttl_ms = self.ttl();
        let status = self.status(k, &owner, epoch, t0);
        let expires_at = (status == "ok").then(|| {
            let at = self.instant(k, &owner, epoch, t0, ttl_ms);
            at + ttl_ms * 1000
        });
        if let (Some(x), true) = (expires_at, commit) {
            self.rows[k].holder = Some((owner.clone(), epoch, x));
        }
        let call = Call::Renew {
            key: format!("k{k}"),
            owner,
            epoch,
            ttl_ms,
        };
        let outcome = Outcome::Renewed {
            status: status.to_string(),
            expires_at,
        };
        let id = self.push(call, outcome, t0);
        if !commit {
            self.roll_back(id);
        }
        id
    }

    fn release(&mut self, k: usize, t0: Micros) -> usize {
        let (owner, epoch) = self.target(k);
        let status = self.status(k, &owner, epoch, t0);
        if status == "ok" {
            let row = &mut self.rows[k];
            row.counter = epoch + 1;
            row.holder = None;
        }
        let call = Call::Release {
            key: format!("k{k}"),
            owner,
            epoch,
        };
        let outcome = Outcome::Released {
            status: status.to_string(),
        };
        self.push(call, outcome, t0)
    }

    /// A transfer of (owner, epoch) to another owner: the successor holds the next epoch.
    fn transfer(&mut self, k: usize, t0: Micros) -> usize {
        let (owner, epoch) = self.target(k);
        let to = self.owner();
        let ttl_ms = self.ttl();
        let status = self.status(k, &owner, epoch, t0);
        let granted = (status == "ok").then(|| {
            let next = epoch + 1;
            let at = self.instant(k, &to, next, t0, ttl_ms);
            let x = at + ttl_ms * 1000;
            let row = &mut self.rows[k];
            row.counter = next;
            row.holder = Some((to.clone(), next, x));
            (next, x)
        });
        let call = Call::Transfer {
            key: format!("k{k}"),
            owner,
            epoch,
            to_owner: to,
            ttl_ms,
        };
        let outcome = Outcome::Transferred {
            status: status.to_string(),
            epoch: granted.map(|g| g.0),
            expires_at: granted.map(|g| g.1),
        };
        self.push(call, outcome, t0)
    }

    /// The operator's force_release: ends the live grant (the counter moves to epoch + 1), if any.
    fn force(&mut self, k: usize, t0: Micros) -> usize {
        let ended = self.rows[k].live(t0).map(|h| h.1);
        if let Some(e) = ended {
            let row = &mut self.rows[k];
            row.counter = e + 1;
            row.holder = None;
        }
        self.push(
            Call::ForceRelease {
                key: format!("k{k}"),
            },
            Outcome::Forced(ended),
            t0,
        )
    }

    /// A fence (and its guarded write) in a transaction that commits right after it, or fails.
    fn fence(&mut self, k: usize, t0: Micros) -> usize {
        let (owner, epoch) = self.target(k);
        let passed = self.status(k, &owner, epoch, t0) == "ok";
        let outcome = match &self.rows[k].holder {
            Some((_, _, x)) if passed => Outcome::Fenced {
                expires_at: *x,
                pre_commit: Some(t0 + WINDOW),
                commit_sent: Some(client(t0 + WINDOW) + 100_000),
            },
            _ => Outcome::Failed("LE002".into()),
        };
        let call = Call::Fence {
            key: format!("k{k}"),
            owner,
            epoch,
        };
        let id = self.push(call, outcome, t0);
        let tx = self.next_tx;
        self.next_tx += 1;
        let op = &mut self.ops[id];
        op.tx = Some(tx);
        if passed {
            op.visible_at = Some(client(t0 + WINDOW) + 200_000);
        } else {
            op.commit = Commit::NotCommitted;
            op.visible_at = None;
        }
        id
    }

    fn read(&mut self, k: usize, t0: Micros, register: bool) -> usize {
        let row = &self.rows[k];
        let key = format!("k{k}");
        let live = row.live(t0).cloned();
        let view = |now| {
            live.as_ref().map(|(o, e, x)| View {
                held: true,
                owner: Some(o.clone()),
                epoch: Some(*e),
                expires_at: Some(*x),
                now,
            })
        };
        let (call, outcome) = if register {
            let v = view(Some(t0)).unwrap_or(View {
                held: false,
                owner: None,
                epoch: None,
                expires_at: None,
                now: None,
            });
            (Call::RegisterWaiter { key }, Outcome::Registered(v))
        } else {
            let v = view(None).or_else(|| {
                row.present.then_some(View {
                    held: false,
                    owner: None,
                    epoch: Some(row.counter),
                    expires_at: None,
                    now: None,
                })
            });
            (Call::Inspect { key }, Outcome::Inspected(v))
        };
        self.push(call, outcome, t0)
    }

    /// A call whose connection died: no result, no effect (it did not commit), commit unknown.
    fn lost(&mut self, k: usize, t0: Micros) -> usize {
        let owner = self.owner();
        let call = Call::Acquire {
            key: format!("k{k}"),
            owner,
            ttl_ms: 100,
            wait_ms: 0,
        };
        let id = self.push(call, Outcome::Lost, t0);
        let op = &mut self.ops[id];
        op.t0 = None;
        op.t1 = None;
        op.lo = t0 - STEP;
        op.commit = Commit::Ambiguous;
        op.visible_at = None;
        id
    }

    /// `lease.purge('0')`: removes every row that is free or lapsed, raising the floor.
    fn purge(&mut self, t0: Micros) -> usize {
        let mut n = 0;
        for row in &mut self.rows {
            if row.present && row.live(t0).is_none() {
                self.floor = self.floor.max(row.counter);
                *row = Row {
                    counter: row.counter,
                    ..Row::default()
                };
                n += 1;
            }
        }
        self.push(Call::Purge { older_than_ms: 0 }, Outcome::Purged(n), t0)
    }
}

/// A valid history of `n` calls on `keys` keys by 4 owners, chosen by `seed`.
pub fn valid_history(n: usize, keys: usize, seed: u64) -> Vec<Op> {
    let mut g = Gen {
        rng: Rng::new(seed),
        ops: Vec::with_capacity(n),
        rows: vec![Row::default(); keys],
        floor: 0,
        owners: 4,
        next_tx: 0,
        written: HashSet::new(),
    };
    for i in 0..n {
        let t0 = BASE + i as Micros * STEP;
        let k = g.rng.below(keys as u64) as usize;
        if i % 997 == 996 {
            g.purge(t0);
            continue;
        }
        match g.rng.below(100) {
            0..30 => g.acquire(k, t0, true),
            30..53 => g.renew(k, t0, true),
            53..63 => g.release(k, t0),
            63..71 => g.fence(k, t0),
            71..83 => g.read(k, t0, false),
            83..84 => g.force(k, t0),
            84..86 => g.transfer(k, t0),
            86..91 => g.read(k, t0, true),
            91..95 => g.acquire(k, t0, false),
            95..99 => g.renew(k, t0, false),
            _ => g.lost(k, t0),
        };
    }
    g.ops
}
