//! vestibule: an edge waiting room and rate limiter on Pingora.
//!
//! The decision core ([`token`], [`keys`], [`identity`], [`time`]) is pure: it takes the clock
//! as an argument and knows nothing of sockets. [`proxy`] translates HTTP to the core's inputs
//! and its decisions back to HTTP; [`snapshot`] holds one validated generation of
//! configuration; [`app`] what lives as long as the process.

pub mod admin;
pub mod alloc;
pub mod app;
pub mod config;
pub mod controls;
pub mod demo;
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
pub mod reload;
pub mod resets;
pub mod server;
#[cfg(feature = "tools")]
pub mod simulate;
pub mod snapshot;
pub mod state;
pub mod store;
pub mod time;
pub mod tls;
pub mod upstream;

// The decision core, under the paths the edge has always used.
pub use vestibule_core::{
    autopilot, challenge, cookie, decide, identity, inflight, invite, path, ratelimit, room, shard,
    sketch, thread_cache, token,
};
