//! Counters behind one interface, so a shared store can back a cluster. The interface and the
//! in-process store are the core's ([`vestibule_core::store`], re-exported here); the stores
//! that talk to other nodes are here.
//!
//! Everything the decision core counts over time goes through [`CounterStore`]: the sliding
//! windows of rate-limit rules and the accounting of capacity rooms (active users per minute,
//! admissions per minute, waiting users per arrival bucket). The in-process
//! [`local::LocalStore`] is the default; a store shared by several vestibule nodes (Redis, for
//! example) implements the same trait, and the counts become cluster-wide.
//!
//! What is deliberately *not* here: penalty boxes, token buckets and concurrency slots. They
//! are verdict caches and per-node resources (vsthrottle and Fastly's penalty box are per node
//! too). With shared windows, a key that trips a limit on one node is caught by the shared
//! count on every node; each node then keeps its own penalty box.
//!
//! Time is always passed in; a store never reads a clock.

pub mod redis;

pub use vestibule_core::store::*;
