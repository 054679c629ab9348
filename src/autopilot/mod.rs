//! The autopilot: the law is the core's ([`vestibule_core::autopilot`]); [`pilot`] runs it in
//! the proxy.

pub use vestibule_core::autopilot::*;

pub(crate) mod pilot;
