//! What lives as long as the process: the snapshot in service, the metrics, and the outcome of
//! the last reload. Every service (proxy, admin, background tasks) shares one `Arc<App>`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::ConfigErrors;
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;
use crate::state::State;
use crate::time::Timestamp;

/// A reload that failed, as `/status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadError {
    pub message: String,
    pub at: Timestamp,
}

pub struct App {
    config_path: PathBuf,
    current: ArcSwap<Snapshot>,
    pub metrics: Metrics,
    pub state: State,
    last_reload_error: Mutex<Option<ReloadError>>,
    pub started_at: Timestamp,
}

impl App {
    /// Loads the first snapshot. Fails, listing every problem, when the config is not valid.
    pub fn start(config_path: &Path) -> Result<Arc<App>, ConfigErrors> {
        let now = Timestamp::now();
        let state = State::local();
        let snapshot = Snapshot::load(config_path, None, &state, now)?;
        let metrics = Metrics::new();
        metrics.refresh(&snapshot);
        Ok(Arc::new(App {
            config_path: config_path.to_path_buf(),
            current: ArcSwap::from_pointee(snapshot),
            metrics,
            state,
            last_reload_error: Mutex::new(None),
            started_at: now,
        }))
    }

    /// The snapshot in service. Hold it for the whole request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn last_reload_error(&self) -> Option<ReloadError> {
        self.last_reload_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
