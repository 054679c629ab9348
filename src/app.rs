//! What lives as long as the process: the snapshot in service, the metrics, and the outcome of
//! the last reload. Every service (proxy, admin, background tasks) shares one `Arc<App>`.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{diff, ConfigErrors};
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

static NEXT_APP: AtomicU64 = AtomicU64::new(0);

/// A worker thread's own reference to a snapshot: cloning it writes a reference count that
/// only this thread uses (see [`App::request_snapshot`]).
pub(crate) struct ThreadSnapshot(Arc<Snapshot>);

impl std::ops::Deref for ThreadSnapshot {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        &self.0
    }
}

/// (app id, generation, snapshot) of the last request a thread served.
type Cached = Option<(u64, u64, Arc<ThreadSnapshot>)>;

thread_local! {
    static THREAD_SNAPSHOT: RefCell<Cached> = const { RefCell::new(None) };
}

pub struct App {
    /// Tells this App's snapshot apart from another's in a thread's cache (tests run several).
    id: u64,
    config_path: PathBuf,
    current: ArcSwap<Snapshot>,
    /// The generation of `current`, stored after it.
    generation: AtomicU64,
    pub metrics: Metrics,
    pub state: State,
    last_reload_error: Mutex<Option<ReloadError>>,
    /// Reloads run one at a time.
    reloading: Mutex<()>,
    pub started_at: Timestamp,
    /// The console's last half hour of admissions and denials.
    pub(crate) recent: crate::recent::History,
    /// The per-minute history this node writes (`[admin] history_dir`).
    pub(crate) minutes: crate::history::Recorder,
    /// Events out to the `[[events.sink]]`s (`crate::sinks`).
    pub events: Arc<crate::sinks::Events>,
    /// A single node's draw receipts, written down in the state folder.
    pub(crate) receipts: crate::draws::Kept,
    /// Visitors' streams open on this node (`crate::push`).
    pub(crate) streams: crate::push::Streams,
}

impl App {
    /// This node's name in its history records: the cluster's name for it (`cluster.node`,
    /// else the host name and first port).
    pub(crate) fn node_name(&self) -> String {
        let snapshot = self.snapshot();
        let config = &snapshot.config;
        config
            .cluster
            .node_name(&config.server.listen, crate::config::hostname().as_deref())
    }

    /// Loads the first snapshot. Fails, listing every problem, when the config is not valid.
    pub fn start(config_path: &Path) -> Result<Arc<App>, ConfigErrors> {
        let now = crate::time::now();
        let state = State::for_config(&crate::config::load(config_path)?);
        let snapshot = Snapshot::load(config_path, None, &state, now)?;
        crate::draws::keep_secret(&snapshot.config, &*state.store, state.shared.is_some());
        let receipts = crate::draws::Kept::default();
        receipts.sync(&snapshot.config, &*state.store, state.shared.is_some(), now);
        let metrics = Metrics::new();
        metrics.refresh(&snapshot, &*state.store);
        let events = Arc::new(crate::sinks::Events::new(
            &snapshot.config.sinks,
            metrics.events.clone(),
        ));
        Ok(Arc::new(App {
            id: NEXT_APP.fetch_add(1, Ordering::Relaxed),
            config_path: config_path.to_path_buf(),
            generation: AtomicU64::new(snapshot.generation),
            current: ArcSwap::from_pointee(snapshot),
            metrics,
            state,
            last_reload_error: Mutex::new(None),
            reloading: Mutex::new(()),
            started_at: now,
            recent: Default::default(),
            minutes: Default::default(),
            events,
            receipts,
            streams: Default::default(),
        }))
    }

    /// The snapshot in service. Hold it for the whole request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The snapshot in service, for one request, through this thread's own reference: cloning
    /// the shared `Arc` on every request made every worker thread write (and pull over) the same
    /// reference count, a cost that grows with the threads. A thread's cached snapshot is
    /// replaced at its first request after a reload (until then an idle thread keeps the old
    /// one alive).
    pub(crate) fn request_snapshot(&self) -> Arc<ThreadSnapshot> {
        let generation = self.generation.load(Ordering::Acquire);
        let cached = THREAD_SNAPSHOT.try_with(|cell| {
            let mut cell = cell.borrow_mut();
            if let Some((app, g, s)) = &*cell {
                if *app == self.id && *g == generation {
                    return s.clone();
                }
            }
            let fresh = Arc::new(ThreadSnapshot(self.current.load_full()));
            *cell = Some((self.id, fresh.generation, fresh.clone()));
            fresh
        });
        cached.unwrap_or_else(|_| Arc::new(ThreadSnapshot(self.current.load_full())))
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Re-reads the config file and everything it names; if the whole is valid, swaps it in.
    /// Requests in flight keep the snapshot they started with. On failure nothing changes:
    /// the errors are logged, counted and kept for `/status`. `trigger` says why, for the log.
    pub fn reload(&self, trigger: &str, now: Timestamp) -> Result<u64, ConfigErrors> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.snapshot();
        let new = match Snapshot::load(&self.config_path, Some(&old), &self.state, now) {
            Ok(new) => new,
            Err(errors) => {
                for e in &errors.0 {
                    log::error!(
                        "reload ({trigger}) failed, generation {} keeps serving: {e}",
                        old.generation
                    );
                }
                self.metrics
                    .config_reloads
                    .with_label_values(&["failure"])
                    .inc();
                let message = errors
                    .0
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                *self
                    .last_reload_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(ReloadError { message, at: now });
                return Err(errors);
            }
        };
        for (key, from, to) in &new.pending_restart {
            log::warn!(
                "reload ({trigger}): {key} {from} -> {to} needs a restart to take effect; the rest of the edit is applied"
            );
        }
        let changes = describe_changes(&old, &new);
        for w in new.warnings.iter().filter(|w| !old.warnings.contains(w)) {
            log::warn!("{w}");
        }
        log::info!(
            "reload ({trigger}): generation {} -> {}: {}",
            old.generation,
            new.generation,
            if changes.is_empty() {
                "no changes".to_owned()
            } else {
                changes.join("; ")
            }
        );
        crate::draws::keep_secret(&new.config, &*self.state.store, self.state.shared.is_some());
        for w in crate::draws::changes(&old.config, &new.config, now) {
            log::warn!("reload ({trigger}): {w}");
        }
        let generation = new.generation;
        let new = Arc::new(new);
        self.current.store(new.clone());
        self.generation.store(generation, Ordering::Release);
        self.metrics
            .config_reloads
            .with_label_values(&["success"])
            .inc();
        self.metrics.refresh(&new, &*self.state.store);
        crate::logging::apply(&new.config.log);
        *self
            .last_reload_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        Ok(generation)
    }

    /// Writes down the draw receipts handed out since the last call (a single node's).
    pub(crate) fn sync_receipts(&self, snapshot: &Snapshot, now: Timestamp) {
        self.receipts.sync(
            &snapshot.config,
            &*self.state.store,
            self.state.shared.is_some(),
            now,
        );
    }

    /// One second of every room's autopilot: starts, steps or stops each, and logs
    /// every change of the pace with its reason.
    pub(crate) fn steer(&self, now: Timestamp) {
        let snapshot = self.snapshot();
        for room in snapshot.rooms.iter() {
            let change = match (&room.config.autopilot, room.pilot_now(now)) {
                (Some(config), Some(here)) => room.pilot().tick(config, here, now),
                _ => room.pilot().stop(),
            };
            if let Some(change) = change {
                log::info!("room {}: autopilot: {}", room.name(), change.describe());
            }
        }
    }

    pub fn last_reload_error(&self) -> Option<ReloadError> {
        self.last_reload_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Everything a reload changed, config and files alike, in words. Never mentions a secret.
fn describe_changes(old: &Snapshot, new: &Snapshot) -> Vec<String> {
    let mut changes = diff::describe(&old.config, &new.config);
    match (&old.keys, &new.keys) {
        (Some(a), Some(b)) => {
            let keys = b.describe_changes(a);
            if !keys.is_empty() {
                changes.push(format!("keys: {}", keys.join(", ")));
            }
        }
        (None, Some(b)) => changes.push(format!("keys: loaded, active {}", b.active().id())),
        (Some(_), None) => changes.push("keys: no longer needed (no rooms)".into()),
        (None, None) => {}
    }
    for (room, pages) in new.rooms.iter().zip(&new.room_pages) {
        let before = old.room_named(room.name()).map(|(_, p)| p.own());
        if before.is_some_and(|b| b.fingerprint() != pages.own().fingerprint()) {
            changes.push(format!("room {}: pages changed", room.name()));
        }
    }
    match (&old.tls, &new.tls) {
        (Some(a), Some(b)) if b.differs_from(a) => changes.push(format!(
            "tls: certificates reloaded ({})",
            crate::tls::summary(b)
        )),
        (None, Some(b)) => changes.push(format!(
            "tls: certificates loaded ({})",
            crate::tls::summary(b)
        )),
        (Some(_), None) => changes.push("tls: no certificates".into()),
        _ => {}
    }
    if old.pages.fingerprint() != new.pages.fingerprint() {
        changes.push("server pages changed".into());
    }
    changes
}
