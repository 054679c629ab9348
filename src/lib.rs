//! vestibule: an edge waiting room and rate limiter on Pingora.
//!
//! This crate is the edge. The decision core is the `vestibule-core` crate, re-exported here
//! under the paths the edge has always used ([`decide`], [`room`], [`ratelimit`], [`token`],
//! …): it is pure, takes the clock as an argument and knows nothing of sockets. [`proxy`]
//! reads a request into the core's [`decide::Request`], asks [`decide::decide`], and writes the
//! verdict back as HTTP; [`snapshot`] holds one validated generation of configuration and lends
//! the decision its [`decide::Policy`]; [`app`] holds what lives as long as the process.

pub mod admin;
pub mod alloc;
pub mod api;
pub mod app;
pub(crate) mod body;
pub mod config;
pub mod controls;
pub mod ctl;
pub mod demo;
pub mod draws;
pub mod history;
pub mod i18n;
pub mod init;
pub mod inspect;
pub mod keys;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod pages;
#[cfg(feature = "tools")]
pub mod plot;
pub mod probe;
pub mod proxy;
pub mod push;
pub(crate) mod recent;
pub mod reload;
pub mod report;
pub mod resets;
pub mod server;
#[cfg(feature = "tools")]
pub mod simulate;
pub mod sinks;
pub mod snapshot;
pub mod state;
pub mod store;
pub mod time;
pub mod tls;
pub mod upstream;

// The decision core, under the paths the edge has always used.
pub use vestibule_core::{
    autopilot, bearer, challenge, cookie, decide, enqueue, identity, inflight, invite, jwt, oidc,
    path, ratelimit, room, shard, sketch, thread_cache, token,
};
