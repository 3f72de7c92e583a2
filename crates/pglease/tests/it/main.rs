//! Integration tests of the `pglease` client against real PostgreSQL servers (and a real
//! PgBouncer for the pooler tests). One binary; each test uses its own keys.

mod adopt;
mod api;
mod common;
mod console;
mod data;
mod election;
mod example;
mod fence;
mod handover;
mod keepalive;
mod loss;
mod observability;
mod pooler;
mod renew_many;
mod semaphore;
mod shard;
mod tls;
mod waiting;
