//! vestibule's integration tests, in one binary (one link instead of one per area): each module
//! is an area, and `common` the harness they share (the real binary on free loopback ports, in
//! front of the real demo origin). The tests of every area run in parallel in this one process,
//! so nothing here may rely on process-wide state of its own: ports come from
//! `common::bind_loopback`, which never hands out one twice, and no test sets environment
//! variables or a global logger.
//!
//! `cargo test --test it` runs them all; `cargo test --test it cluster::` one area.

mod common;

mod actions;
mod autopilot;
mod benches;
mod browser;
mod capacity;
mod challenge;
mod cluster;
mod console;
mod ctl;
mod enqueue;
mod events;
mod flood;
mod h2_body;
mod h2_flood;
mod hardening;
mod invite;
mod jwt;
mod languages;
mod lottery;
mod memory;
mod oidc;
mod operations;
mod origin_pool;
mod packaging;
mod pages;
mod proxy_protocol;
mod push;
mod queue_api;
mod ratelimit;
mod reload;
mod report;
mod shadow;
mod sinks;
mod skeleton;
mod sync_twins;
mod tls;
