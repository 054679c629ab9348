//! Integration-test harness: the real `vestibule` binary on free loopback ports, in front of the
//! real demo origin (a separate process), talked to with a real HTTP client. Every process a test
//! starts is stopped by its pid when the test ends.
//!
//! The helpers live in files by concern and are all re-exported here, so a test module's
//! `use crate::common::*;` finds every one.

mod clients;
mod lanes;
mod net;
mod origins;
mod process;
mod proxy;
mod redis_server;
mod util;

pub use clients::*;
pub use lanes::*;
pub use net::*;
pub use origins::*;
pub use process::*;
pub use proxy::*;
pub use redis_server::*;
pub use util::*;
