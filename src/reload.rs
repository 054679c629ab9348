//! Hot reload: watch the config file, the key ring and every pages folder, and reload on
//! change or on SIGHUP.
//!
//! Directories are watched, not files: editors that save by writing a temporary file and
//! renaming it over the original replace the inode a file watch would hold, but the rename is
//! an event in the directory. Events are filtered to the files that matter (so swap files and
//! backups do nothing) and debounced: a reload starts once writes have been quiet for
//! [`QUIET`], or [`MAX_DELAY`] after the first, whichever is sooner. The set of watched
//! folders follows the config (a new pages folder is watched after the reload that names it).
//!
//! The reload itself ([`App::reload`]) does file IO and DNS, so it runs on a blocking thread.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use notify::{RecursiveMode, Watcher};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::time::Instant;

use crate::app::App;
use crate::pages::PageKind;
use crate::snapshot::Snapshot;
use crate::time::Timestamp;

/// Reload once writes have been quiet this long...
pub(crate) const QUIET: Duration = Duration::from_millis(150);
/// ...or this long after the first write, if they keep coming.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(1);

/// The files whose change means a reload, and the folders to watch for them.
#[derive(Debug, Default, PartialEq, Eq)]
struct WatchSet {
    dirs: HashSet<PathBuf>,
    files: HashSet<PathBuf>,
    /// The files' names, to pass over other files' events without a file-system call.
    names: HashSet<std::ffi::OsString>,
    /// Message catalog folders (`pages/i18n`): any `.toml` in them counts, new ones too.
    catalogs: HashSet<PathBuf>,
}

impl WatchSet {
    fn of(snapshot: &Snapshot, config_path: &Path) -> WatchSet {
        let mut set = WatchSet::default();
        set.add(config_path);
        if let Some(ring) = &snapshot.keys {
            set.add(&snapshot.config.keys_file);
            for file in ring.jwt_files() {
                set.add(file);
            }
        }
        if let Some(file) = &snapshot.config.admin.token_file {
            set.add(file);
        }
        for room in &snapshot.config.rooms {
            if let Some(enqueue) = &room.enqueue {
                set.add(&enqueue.key_file);
            }
        }
        for c in &snapshot.config.tls.certificates {
            for file in [&c.cert, &c.key] {
                set.add(file);
            }
        }
        let mut page_dirs: Vec<&Path> = snapshot
            .rooms
            .iter()
            .flat_map(|r| {
                r.config
                    .pages
                    .as_deref()
                    .into_iter()
                    .chain(r.config.events.iter().filter_map(|e| e.pages.as_deref()))
            })
            .collect();
        if let Some(dir) = &snapshot.config.server.pages {
            page_dirs.push(dir);
        }
        for dir in page_dirs {
            for kind in PageKind::ALL {
                set.add(&dir.join(kind.file_name()));
            }
            set.add(&dir.join(crate::pages::BASE_FILE));
            let catalogs = absolute(&dir.join("i18n"));
            if catalogs.is_dir() {
                set.dirs.insert(catalogs.clone());
                set.catalogs.insert(catalogs);
            }
        }
        set
    }

    /// Watch `file`, and when it is a symlink, what makes it point elsewhere:
    /// - where it points (certbot's live/ folder): a file rewritten in place there changes
    ///   nothing in the link's own folder;
    /// - the links inside its own folder that it goes through. Kubernetes mounts a ConfigMap or
    ///   Secret as `name -> ..data/name`, `..data` a link to a timestamped folder; an update
    ///   writes a new folder and renames a new `..data` over the old one. Nothing happens to
    ///   `name` itself: the rename of `..data` is the event to reload on.
    fn add(&mut self, file: &Path) {
        self.add_file(file);
        let Some(folder) = file.parent() else { return };
        let Ok(target) = std::fs::read_link(file) else {
            return;
        };
        let target = folder.join(target);
        for link in target.ancestors().skip(1) {
            if link == folder || !link.starts_with(folder) {
                break;
            }
            if link
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink())
            {
                self.add_file(link);
            }
        }
        if let Ok(target) = std::fs::canonicalize(file) {
            self.add_file(&target);
        }
    }

    fn add_file(&mut self, file: &Path) {
        let file = absolute(file);
        if let Some(dir) = file.parent() {
            self.dirs.insert(dir.to_path_buf());
        }
        if let Some(name) = file.file_name() {
            self.names.insert(name.to_owned());
        }
        self.files.insert(file);
    }

    /// Whether a watched file was modified at or after `loaded` (wall-clock time).
    fn changed_since(&self, loaded: Timestamp) -> bool {
        self.files.iter().any(|file| {
            std::fs::metadata(file)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .is_some_and(|t| t.as_millis() as u64 >= loaded.millis())
        })
    }

    fn matters(&self, path: &Path) -> bool {
        if path.extension().is_some_and(|e| e == "toml")
            && path
                .parent()
                .is_some_and(|dir| self.catalogs.contains(&absolute(dir)))
        {
            return true;
        }
        path.file_name().is_some_and(|n| self.names.contains(n))
            && self.files.contains(&absolute(path))
    }
}

/// An absolute path with its folder resolved (symlinks included), so event paths and config
/// paths compare equal.
fn absolute(path: &Path) -> PathBuf {
    let name = path.file_name().map(PathBuf::from).unwrap_or_default();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match std::fs::canonicalize(dir) {
        Ok(dir) => dir.join(name),
        Err(_) => std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf()),
    }
}

pub(crate) struct Reloader {
    app: Arc<App>,
}

impl Reloader {
    pub fn new(app: Arc<App>) -> Reloader {
        Reloader { app }
    }

    async fn reload(&self, trigger: &'static str) {
        let app = self.app.clone();
        let outcome =
            tokio::task::spawn_blocking(move || app.reload(trigger, crate::time::now())).await;
        if let Err(e) = outcome {
            log::error!("reload ({trigger}) did not finish: {e}");
        }
    }
}

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let (tx, mut events) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            // Reading the files (as every reload does) is an access event: ignore those, or a
            // reload would trigger the next one.
            if matches!(event.kind, notify::EventKind::Access(_)) {
                return;
            }
            for path in event.paths {
                let _ = tx.send(path);
            }
        });
        let mut watcher = match watcher {
            Ok(w) => Some(w),
            Err(e) => {
                log::error!("cannot watch config files ({e}); reload with SIGHUP");
                None
            }
        };
        let mut watching: HashSet<PathBuf> = HashSet::new();
        let mut set = WatchSet::default();
        let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        {
            Ok(s) => Some(s),
            Err(e) => {
                log::error!("cannot listen for SIGHUP: {e}");
                None
            }
        };
        // When the pending reload fires: (quiet deadline, latest allowed).
        let mut pending: Option<(Instant, Instant)> = None;
        // The generation whose files `set` watches.
        let mut watched_generation = 0;
        loop {
            // Follow the config: watch the folders the snapshot in service names. Worked out
            // again only after a reload: events for other files in those folders (a log file
            // next to the config, say) cost no file-system calls.
            let snapshot = self.app.snapshot();
            if snapshot.generation != watched_generation {
                let wanted = WatchSet::of(&snapshot, self.app.config_path());
                if wanted != set {
                    if let Some(w) = watcher.as_mut() {
                        sync_watches(w, &mut watching, &wanted.dirs);
                    }
                    set = wanted;
                }
                // A file saved after the snapshot was loaded and before its folder was watched
                // (at startup, the moments before this service runs) sent no event: reload for
                // it as if it had.
                if watched_generation == 0 && set.changed_since(snapshot.loaded_at) {
                    let now = Instant::now();
                    pending = Some((now + QUIET, now + MAX_DELAY));
                }
                watched_generation = snapshot.generation;
            }
            drop(snapshot);
            let fire_at = pending.map(|(quiet, latest)| quiet.min(latest));
            tokio::select! {
                _ = shutdown.changed() => return,
                Some(path) = events.recv() => {
                    if set.matters(&path) {
                        let now = Instant::now();
                        pending = Some(match pending {
                            Some((_, latest)) => (now + QUIET, latest),
                            None => (now + QUIET, now + MAX_DELAY),
                        });
                    }
                }
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                    pending = None;
                    self.reload("SIGHUP").await;
                }
                _ = async { match fire_at { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                    pending = None;
                    self.reload("file change").await;
                }
            }
        }
    }
}

fn sync_watches(
    watcher: &mut notify::RecommendedWatcher,
    watching: &mut HashSet<PathBuf>,
    wanted: &HashSet<PathBuf>,
) {
    for dir in watching.difference(wanted).cloned().collect::<Vec<_>>() {
        let _ = watcher.unwatch(&dir);
        watching.remove(&dir);
    }
    for dir in wanted.difference(watching).cloned().collect::<Vec<_>>() {
        match watcher.watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => {
                watching.insert(dir);
            }
            Err(e) => log::warn!(
                "cannot watch {}: {e}; edits there need SIGHUP",
                dir.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_absolute_paths_compare_equal() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("v.toml");
        std::fs::write(&file, "x").unwrap();
        let mut set = WatchSet::default();
        set.add(&file);
        assert!(set.matters(&file));
        assert!(set.matters(&dir.path().join(".").join("v.toml")));
        assert!(!set.matters(&dir.path().join("v.toml.swp")));
        assert!(!set.matters(&dir.path().join("4913")));
        assert_eq!(set.dirs.len(), 1);
    }

    #[test]
    fn a_file_saved_after_the_load_counts_as_changed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vestibule.toml");
        std::fs::write(&file, "x").unwrap();
        let mut set = WatchSet::default();
        set.add(&file);
        let saved = std::fs::metadata(&file).unwrap().modified().unwrap();
        let saved = saved
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        // Loaded before the save: the save sent no event the watcher saw, so it counts.
        assert!(set.changed_since(Timestamp::from_millis(saved)));
        assert!(set.changed_since(Timestamp::from_millis(saved - 1_000)));
        // Loaded after it: nothing to do.
        assert!(!set.changed_since(Timestamp::from_millis(saved + 1_000)));
        // A file that is gone is no change.
        std::fs::remove_file(&file).unwrap();
        assert!(!set.changed_since(Timestamp::from_millis(0)));
    }
}
