//! One rebalancing round of a consumer: claims the partitions its assignment asks for (each of a
//! fixed list that is free, or its fair share of the free ones), says how many to give up, and
//! puts each claimed partition's lease under the client's keepalive. Also the membership lease
//! of a balanced consumer.

use std::time::Instant;

use crate::balance::{self, View};
use crate::builder::Assignment;
use crate::calls;
use crate::consumer::Inner;
use crate::error::{Error, Result};
use crate::trace;
use crate::worker::Claimed;

/// What one rebalancing round decided.
#[derive(Default)]
pub(crate) struct Plan {
    pub(crate) claimed: Vec<Claimed>,
    /// How many partitions to give up.
    pub(crate) surplus: usize,
    /// An error that ends the run (the queue does not exist).
    pub(crate) fatal: Option<Error>,
}

impl Inner {
    pub(crate) async fn join(&self) -> Result<pglease::Lease> {
        match self.client.try_acquire(&self.member_key, self.ttl).await? {
            Some(lease) => Ok(lease),
            None => {
                // Held by this owner's earlier lease (lapsing) or by another consumer of it.
                match self
                    .client
                    .acquire(&self.member_key, self.ttl, self.ttl * 2)
                    .await
                {
                    Ok(lease) => Ok(lease),
                    Err(e) if e.is_wait_timeout() => Err(Error::invalid_argument(format!(
                        "another consumer with owner {:?} consumes queue {:?}",
                        self.owner, &*self.queue
                    ))),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// One rebalancing round: claims what the assignment asks for, given the partitions held
    /// (and not being given up), and says how many to give up.
    pub(crate) async fn plan(&self, keep: Vec<u32>, partitions: u32) -> Plan {
        let mut plan = Plan::default();
        let result = match &self.assignment {
            Assignment::Fixed(list) => {
                let wanted: Vec<u32> = list.iter().filter(|p| !keep.contains(p)).copied().collect();
                self.claim_each(&wanted, &mut plan).await
            }
            Assignment::Balanced { max } => self.balance(&keep, partitions, *max, &mut plan).await,
        };
        if let Err(e) = result {
            if e.is_queue_not_found() {
                plan.fatal = Some(e);
            } else {
                tracing::warn!(
                    target: trace::CONSUMER,
                    queue = &*self.queue,
                    owner = self.owner.as_str(),
                    error = %e,
                    sqlstate = e.code(),
                    "rebalancing failed; retrying at the next round"
                );
            }
        }
        plan
    }

    async fn claim_each(&self, wanted: &[u32], plan: &mut Plan) -> Result<()> {
        for p in wanted {
            if let Some(claimed) = self.claim(Some(*p)).await? {
                plan.claimed.push(claimed);
            }
        }
        Ok(())
    }

    async fn balance(
        &self,
        keep: &[u32],
        partitions: u32,
        max: Option<u32>,
        plan: &mut Plan,
    ) -> Result<()> {
        let mut view = View::default();
        for listed in self
            .client
            .list(Some(&balance::member_prefix(&self.queue)))
            .await?
        {
            if let (true, Some(owner)) = (listed.state.held, listed.state.owner) {
                view.members.insert(owner);
            }
        }
        for listed in self
            .client
            .list(Some(&balance::partition_prefix(&self.queue)))
            .await?
        {
            if let (true, Some(owner)) = (listed.state.held, listed.state.owner) {
                view.holders.push(owner);
            }
        }
        let target = balance::target(partitions, &view, &self.owner, max) as usize;
        let have = keep.len();
        tracing::debug!(
            target: trace::CONSUMER,
            queue = &*self.queue,
            owner = self.owner.as_str(),
            members = view.members.len(),
            target,
            have,
            "rebalancing"
        );
        if have > target {
            plan.surplus = have - target;
            return Ok(());
        }
        while have + plan.claimed.len() < target {
            match self.claim(None).await? {
                Some(claimed) => plan.claimed.push(claimed),
                None => break,
            }
        }
        Ok(())
    }

    /// Claims partition `p` (`claim`), or any free one (`claim_any`), and puts its lease under
    /// the client's keepalive.
    async fn claim(&self, p: Option<u32>) -> Result<Option<Claimed>> {
        let conn = self.client.pool().get().await?;
        let queue: &str = &self.queue;
        let sent_at = Instant::now();
        let granted = match p {
            Some(p) => calls::claim(&**conn, queue, p, &self.owner, self.ttl).await?,
            None => calls::claim_any(&**conn, queue, &self.owner, self.ttl).await?,
        };
        drop(conn);
        let Some(calls::PartitionGrant {
            partition,
            grant,
            left,
        }) = granted
        else {
            return Ok(None);
        };
        let epoch = grant.epoch;
        let key = balance::partition_key(queue, partition);
        let lease = self.client.adopt(&key, grant, self.ttl, sent_at, left)?;
        tracing::info!(
            target: trace::CONSUMER,
            queue,
            partition,
            owner = self.owner.as_str(),
            epoch,
            ttl = ?self.ttl,
            "partition claimed"
        );
        Ok(Some(Claimed { partition, lease }))
    }
}
