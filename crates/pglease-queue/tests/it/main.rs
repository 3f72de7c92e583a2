//! Integration tests of the `pglease-queue` client against a real PostgreSQL server (version
//! `PGLEASE_PG_VERSION`, default 15) with pg_lease and pg_lease_queue installed. One binary; each
//! test uses its own queue.

mod common;
mod consumer;
mod example;
mod failover;
mod producer;
mod shutdown;
mod waiting;
