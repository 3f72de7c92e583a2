//! How long and how wide each section runs: the full suite (`all`) or `--quick`.

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub quick: bool,
    /// Client counts of W1 and W2.
    pub clients: Vec<u32>,
    /// Interleaved rounds per group, and seconds per run (pgbench takes whole seconds).
    pub rounds: u32,
    pub seconds: u32,
    pub warmup_seconds: u32,
    /// Rounds of the synchronous_commit=on groups (fsync-bound: slower and noisier, fewer rounds).
    pub rounds_sync_on: u32,
    /// Rounds of the mixed interleaving (all variants in one run, picked per transaction).
    pub mixed_rounds: u32,
    pub mixed_rounds_sync_on: u32,
    /// The target check: lease and floor only, alternating A B B A .. runs of 1 s.
    pub target_rounds: u32,
    pub storm_keys: u64,
    pub storm_clients: u32,
    /// Pairs of storm segments (lease, floor) and the seconds of each segment.
    pub storm_rounds: u32,
    pub storm_segment_seconds: u32,
    pub scale_keys: Vec<u64>,
    pub scale_rounds: u32,
    pub scale_seconds: u32,
    pub wake_samples: u32,
    pub client_rounds: u32,
    pub client_seconds: u32,
    pub variant_rounds: u32,
    pub variant_seconds: u32,
    pub variant_mixed_rounds: u32,
    /// Queue section: partition counts (= consumers) and batch sizes of the throughput matrix.
    pub queue_partitions: Vec<u32>,
    pub queue_batches: Vec<u32>,
    /// Producer connections of the throughput runs.
    pub queue_producers: u32,
    /// Seconds of each produce phase and (at most) of each consume phase.
    pub queue_seconds: u32,
    /// Messages waiting when a consume phase starts (the produce phase, topped up to this).
    pub queue_backlog: u32,
    /// send → handler samples per mode, and takeover samples per mode.
    pub queue_latency_samples: u32,
    pub queue_takeover_samples: u32,
    /// The bloat run: seconds, offered rate (messages/s per system) and batch size.
    pub queue_bloat_seconds: u32,
    pub queue_bloat_rate: u32,
    pub queue_bloat_batch: u32,
    /// Renew-many section: interleaved rounds per number of held keys, and seconds of each run.
    pub renew_many_rounds: u32,
    pub renew_many_seconds: f64,
    /// Console section: timed requests per endpoint and client count, untimed ones before them
    /// (one client), the concurrent clients, and calls of each console statement timed alone.
    pub console_requests: u32,
    pub console_warmup: u32,
    pub console_clients: u32,
    pub console_sql_samples: u32,
    /// Hot-path section: interleaved rounds and seconds of each timed consume / produce run.
    pub hotpath_rounds: u32,
    pub hotpath_seconds: f64,
    /// Messages waiting when a consume run starts (batch 100; batch 1).
    pub hotpath_backlog: u64,
    pub hotpath_backlog_single: u64,
    /// Messages of one tuple-writes / WAL cycle (batch 100; batch 1), and its rounds.
    pub hotpath_cycle_messages: u64,
    pub hotpath_cycle_messages_single: u64,
    pub hotpath_cycle_rounds: u32,
    /// send → handler samples per contender and round.
    pub hotpath_latency_samples: u32,
    /// Peers section: the most seconds of each drain, and the messages preloaded per run.
    pub peers_seconds: u32,
    pub peers_backlog: u64,
}

impl Plan {
    pub fn full() -> Plan {
        Plan {
            quick: false,
            clients: vec![1, 4, 16],
            rounds: 3,
            seconds: 2,
            warmup_seconds: 1,
            rounds_sync_on: 2,
            mixed_rounds: 5,
            mixed_rounds_sync_on: 3,
            target_rounds: 10,
            storm_keys: 10_000,
            storm_clients: 4,
            storm_rounds: 3,
            storm_segment_seconds: 10,
            scale_keys: vec![1_000, 100_000, 1_000_000],
            scale_rounds: 3,
            scale_seconds: 2,
            wake_samples: 40,
            client_rounds: 5,
            client_seconds: 2,
            variant_rounds: 1,
            variant_seconds: 2,
            variant_mixed_rounds: 5,
            queue_partitions: vec![1, 4, 16],
            queue_batches: vec![1, 100],
            queue_producers: 2,
            queue_seconds: 2,
            queue_backlog: 10_000,
            queue_latency_samples: 100,
            queue_takeover_samples: 10,
            queue_bloat_seconds: 60,
            queue_bloat_rate: 1000,
            queue_bloat_batch: 10,
            renew_many_rounds: 5,
            renew_many_seconds: 2.0,
            console_requests: 200,
            console_warmup: 10,
            console_clients: 4,
            console_sql_samples: 20,
            hotpath_rounds: 3,
            hotpath_seconds: 2.0,
            hotpath_backlog: 100_000,
            hotpath_backlog_single: 12_000,
            hotpath_cycle_messages: 10_000,
            hotpath_cycle_messages_single: 2_000,
            hotpath_cycle_rounds: 2,
            hotpath_latency_samples: 50,
            peers_seconds: 10,
            peers_backlog: 20_000,
        }
    }

    pub fn quick() -> Plan {
        Plan {
            quick: true,
            clients: vec![1, 4],
            rounds: 2,
            seconds: 1,
            warmup_seconds: 0,
            rounds_sync_on: 1,
            mixed_rounds: 1,
            mixed_rounds_sync_on: 1,
            target_rounds: 3,
            storm_keys: 10_000,
            storm_clients: 4,
            storm_rounds: 1,
            storm_segment_seconds: 3,
            scale_keys: vec![1_000, 100_000],
            scale_rounds: 1,
            scale_seconds: 1,
            wake_samples: 10,
            client_rounds: 2,
            client_seconds: 1,
            variant_rounds: 1,
            variant_seconds: 1,
            variant_mixed_rounds: 2,
            queue_partitions: vec![1, 4, 16],
            queue_batches: vec![1, 100],
            queue_producers: 2,
            queue_seconds: 1,
            queue_backlog: 2_000,
            queue_latency_samples: 20,
            queue_takeover_samples: 3,
            queue_bloat_seconds: 10,
            queue_bloat_rate: 500,
            queue_bloat_batch: 10,
            renew_many_rounds: 2,
            renew_many_seconds: 1.0,
            console_requests: 100,
            console_warmup: 5,
            console_clients: 4,
            console_sql_samples: 10,
            hotpath_rounds: 2,
            hotpath_seconds: 1.0,
            hotpath_backlog: 30_000,
            hotpath_backlog_single: 5_000,
            hotpath_cycle_messages: 2_000,
            hotpath_cycle_messages_single: 500,
            hotpath_cycle_rounds: 1,
            hotpath_latency_samples: 20,
            peers_seconds: 3,
            peers_backlog: 5_000,
        }
    }
}
