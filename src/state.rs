//! State that outlives configuration snapshots.
//!
//! Counters live here, not in a snapshot, so a reload keeps them for every rule and room that
//! did not change: a snapshot's rules and rooms look their state up by identity when they are
//! built, and get the existing state when it matches.

use std::sync::Arc;

use crate::ratelimit::RuleStates;
use crate::store::local::LocalStore;
use crate::store::CounterStore;

pub struct State {
    pub store: Arc<dyn CounterStore>,
    pub rules: RuleStates,
}

impl State {
    /// State kept in this process.
    pub fn local() -> State {
        State {
            store: Arc::new(LocalStore::new()),
            rules: RuleStates::default(),
        }
    }
}

impl Default for State {
    fn default() -> Self {
        State::local()
    }
}
