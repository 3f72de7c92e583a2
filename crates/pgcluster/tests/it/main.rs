//! Integration tests for pgcluster: every test runs real PostgreSQL servers.

mod access;
mod cleanup;
mod common;
mod crash;
mod discover;
mod extension;
mod fetch;
mod lifecycle;
mod pause;
mod persistent;
mod replication;
