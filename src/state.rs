//! State that outlives configuration snapshots.
//!
//! Counters live here, not in a snapshot, so a reload keeps them for every rule and room that
//! did not change: a snapshot's rules and rooms look their state up by identity when they are
//! built, and get the existing state when it matches.

use std::sync::Arc;

use crate::autopilot::pilot::Pilots;
use crate::config::{ClusterConfig, Config, StoreKind};
use crate::controls::Controls;
use crate::ratelimit::RuleStates;
use crate::resets::ClientResets;
use crate::store::local::LocalStore;
use crate::store::shared::SharedStore;
use crate::store::CounterStore;

pub struct State {
    pub store: Arc<dyn CounterStore>,
    pub rules: RuleStates,
    /// The same store as `store` when it is shared with other nodes, and how.
    pub shared: Option<(Arc<SharedStore>, ClusterConfig)>,
    /// Operator actions, by room name.
    pub controls: Arc<Controls>,
    /// Autopilots, by room name.
    pub pilots: Arc<Pilots>,
    /// The queue API's requests this node remembers, by room name.
    pub ledgers: Arc<vestibule_core::api::queue::Ledgers>,
    /// HTTP/2 clients' premature resets and the penalty box they lead to (this node's own).
    pub resets: Arc<ClientResets>,
}

impl State {
    /// State kept in this process.
    pub fn local() -> State {
        State {
            store: Arc::new(LocalStore::new()),
            rules: RuleStates::default(),
            shared: None,
            controls: Arc::default(),
            pilots: Arc::default(),
            ledgers: Arc::default(),
            resets: Arc::default(),
        }
    }

    /// The state `config`'s `[cluster]` asks for. A shared store starts empty and not synced;
    /// the sync service (`server.rs`) brings it in.
    pub(crate) fn for_config(config: &Config) -> State {
        let c = &config.cluster;
        if c.store == StoreKind::Local {
            return State::local();
        }
        let incarnation = {
            use rand::Rng;
            format!("{:08x}", rand::thread_rng().gen::<u32>())
        };
        let store = Arc::new(SharedStore::new(
            &c.node_name(&config.server.listen, crate::config::hostname().as_deref()),
            &incarnation,
            c.sync_interval.as_millis() as u64,
            c.on_store_failure,
        ));
        State {
            store: store.clone(),
            rules: RuleStates::default(),
            shared: Some((store, c.clone())),
            controls: Arc::default(),
            pilots: Arc::default(),
            ledgers: Arc::default(),
            resets: Arc::default(),
        }
    }
}

impl Default for State {
    fn default() -> Self {
        State::local()
    }
}
