//! A consumer's run: starts (the queue's partitions, listening, the membership lease), then
//! supervises its rounds and workers until it is stopped or the queue is gone: each rebalancing
//! round's claims become workers, its surplus is given up, and a worker that ended frees its
//! partition. Stopping finishes the round in flight and every worker, and releases the
//! membership.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::builder::Assignment;
use crate::calls;
use crate::consumer::Inner;
use crate::error::{Error, Result};
use crate::process::Process;
use crate::rebalance::Plan;
use crate::trace;
use crate::worker::Exit;

/// How long a run waits for the listening connection before its first receives (it polls
/// meanwhile if the server is slow to answer).
const LISTEN_READY_TIMEOUT: Duration = Duration::from_secs(5);

type WorkerFuture<'a> = Pin<Box<dyn Future<Output = (u32, Exit)> + Send + 'a>>;
type RoundFuture<'a> = Pin<Box<dyn Future<Output = Plan> + Send + 'a>>;

/// What a run holds and is doing: its workers, its round in flight, its membership.
struct Supervised<'a> {
    workers: FuturesUnordered<WorkerFuture<'a>>,
    /// Each held partition's release request (cancelled: give it up after its batch).
    held: HashMap<u32, CancellationToken>,
    round: Option<RoundFuture<'a>>,
    next_round: Instant,
    membership: Option<pglease::Lease>,
    /// The error that ends the run (the queue is gone).
    fatal: Option<Error>,
}

/// Marks the consumer running; clears the mark and the partitions held when the run ends.
struct RunningMark<'a>(&'a Inner);

impl Drop for RunningMark<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::SeqCst);
        self.0
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl Inner {
    /// Runs the consumer with `process` until it is stopped (or the queue is gone).
    pub(crate) async fn run<P: Process>(&self, process: &P) -> Result<()> {
        let _running = self.mark_running()?;
        let partitions = self.checked_partition_count().await?;
        if let Some(listening) = &self.listen {
            listening.ready(&self.client, LISTEN_READY_TIMEOUT).await;
        }
        let membership = match &self.assignment {
            Assignment::Balanced { .. } => Some(self.join().await?),
            Assignment::Fixed(_) => None,
        };
        tracing::info!(
            target: trace::CONSUMER,
            queue = &*self.queue,
            owner = self.owner.as_str(),
            partitions,
            "consumer started"
        );
        let mut run = Supervised {
            workers: FuturesUnordered::new(),
            held: HashMap::new(),
            round: None,
            next_round: Instant::now(),
            membership,
            fatal: None,
        };
        self.supervise(&mut run, process, partitions).await;
        self.stop_run(run).await
    }

    fn mark_running(&self) -> Result<RunningMark<'_>> {
        if self.running.swap(true, Ordering::SeqCst) {
            return Err(Error::invalid_argument("the consumer is already running"));
        }
        Ok(RunningMark(self))
    }

    /// The queue's number of partitions, checked against a fixed list.
    async fn checked_partition_count(&self) -> Result<u32> {
        let partitions = {
            let conn = self.client.pool().get().await?;
            calls::partition_count(&**conn, &self.queue).await?
        };
        if let Assignment::Fixed(list) = &self.assignment
            && let Some(p) = list.iter().find(|p| **p >= partitions)
        {
            return Err(Error::invalid_argument(format!(
                "partition {p} is out of range: queue {:?} has {partitions}",
                &*self.queue
            )));
        }
        Ok(partitions)
    }

    /// Runs rounds and workers until the consumer is stopped or the run hits a fatal error.
    async fn supervise<'a, P: Process>(
        &'a self,
        run: &mut Supervised<'a>,
        process: &'a P,
        partitions: u32,
    ) {
        loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                Some((partition, exit)) = run.workers.next(), if !run.workers.is_empty() => {
                    if self.worker_ended(run, partition, exit) {
                        return;
                    }
                }
                plan = async { run.round.as_mut().expect("guarded").await }, if run.round.is_some() => {
                    run.round = None;
                    run.next_round = Instant::now() + self.rebalance_interval;
                    if let Some(e) = plan.fatal {
                        run.fatal = Some(e);
                        return;
                    }
                    self.carry_out(run, plan, process);
                }
                () = sleep_until(run.next_round), if run.round.is_none() => {
                    self.start_round(run, partitions).await;
                }
            }
        }
    }

    /// Frees the partition of a worker that ended; whether its error ends the run.
    fn worker_ended(&self, run: &mut Supervised<'_>, partition: u32, exit: Exit) -> bool {
        run.held.remove(&partition);
        self.set_owned(&run.held);
        match exit {
            Exit::Failed(e) if run.fatal.is_none() && e.is_queue_not_found() => {
                run.fatal = Some(e);
                true
            }
            _ => false,
        }
    }

    /// Starts a worker per partition the round claimed, and gives up its surplus: the highest
    /// partitions not already going.
    fn carry_out<'a, P: Process>(&'a self, run: &mut Supervised<'a>, plan: Plan, process: &'a P) {
        for claimed in plan.claimed {
            let release = CancellationToken::new();
            run.held.insert(claimed.partition, release.clone());
            run.workers
                .push(Box::pin(self.work(claimed, process, release)));
        }
        let mut going = kept(&run.held);
        going.sort_unstable_by(|a, b| b.cmp(a));
        for p in going.into_iter().take(plan.surplus) {
            run.held[&p].cancel();
        }
        self.set_owned(&run.held);
    }

    /// Starts a rebalancing round, after taking the membership again if it was lost.
    async fn start_round<'a>(&'a self, run: &mut Supervised<'a>, partitions: u32) {
        if run
            .membership
            .as_ref()
            .is_some_and(|lease| !lease.is_held())
        {
            // Lost (e.g. the server was unreachable for a ttl): take it again without waiting,
            // so the workers are not held up; else at the next round.
            match self.client.try_acquire(&self.member_key, self.ttl).await {
                Ok(Some(lease)) => run.membership = Some(lease),
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    target: trace::CONSUMER,
                    queue = &*self.queue,
                    owner = self.owner.as_str(),
                    error = %e,
                    sqlstate = e.code(),
                    "could not renew the consumer's membership; retrying at the next round"
                ),
            }
        }
        run.round = Some(Box::pin(self.plan(kept(&run.held), partitions)));
    }

    /// Stopping: finishes the round in flight (so nothing it claimed is left behind), then lets
    /// every worker finish or abandon its batch and release its partition, and leaves.
    async fn stop_run(&self, mut run: Supervised<'_>) -> Result<()> {
        self.stop.cancel();
        if let Some(round) = run.round.take() {
            let plan = round.await;
            for claimed in plan.claimed {
                let _ = claimed.lease.release().await;
            }
        }
        while let Some((partition, exit)) = run.workers.next().await {
            self.worker_ended(&mut run, partition, exit);
        }
        if let Some(lease) = run.membership.take() {
            let _ = lease.release().await;
        }
        tracing::info!(
            target: trace::CONSUMER,
            queue = &*self.queue,
            owner = self.owner.as_str(),
            "consumer stopped"
        );
        run.fatal.map_or(Ok(()), Err)
    }

    fn set_owned(&self, held: &HashMap<u32, CancellationToken>) {
        let mut owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
        owned.clear();
        owned.extend(held.keys().copied());
    }
}

/// The held partitions not being given up.
fn kept(held: &HashMap<u32, CancellationToken>) -> Vec<u32> {
    held.iter()
        .filter(|(_, release)| !release.is_cancelled())
        .map(|(p, _)| *p)
        .collect()
}
