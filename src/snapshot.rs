//! One generation of configuration: the config file, the key ring and the pages it names, and
//! the objects built from them, validated as a whole.
//!
//! [`Snapshot::load`] is the single code path of `--check`, startup and every reload: if it
//! succeeds, everything a request could need is in place; if it fails, it lists every problem.
//! Requests hold an `Arc<Snapshot>` for their whole life, so a reload never changes the rules
//! under a request in flight.

use std::path::Path;
use std::sync::Arc;

use crate::config::{Config, ConfigError, ConfigErrors};
use crate::pages::Pages;
use crate::time::Timestamp;
use crate::upstream::Upstream;

pub struct Snapshot {
    /// 1 for the first config; +1 for every good reload.
    pub generation: u64,
    pub loaded_at: Timestamp,
    pub config: Config,
    pub upstream: Arc<Upstream>,
    /// Pages for answers outside every room.
    pub pages: Arc<Pages>,
    /// Problems worth a look that do not stop loading.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("generation", &self.generation)
            .field("loaded_at", &self.loaded_at)
            .finish()
    }
}

impl Snapshot {
    /// Loads `path` and everything it names. `previous` is the snapshot in service, whose
    /// long-lived parts (the upstream pool and its health) are kept when unchanged.
    pub fn load(
        path: &Path,
        previous: Option<&Snapshot>,
        now: Timestamp,
    ) -> Result<Snapshot, ConfigErrors> {
        let config = Config::load(path)?;
        let mut errors: Vec<ConfigError> = Vec::new();
        let mut warnings = Vec::new();

        let pages = match &config.server.pages {
            Some(dir) => match Pages::load(dir, "server.pages") {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    errors.extend(e.0);
                    None
                }
            },
            None => Some(Pages::builtin()),
        };
        if let Some(p) = &pages {
            warn_origin_references(p, &mut warnings);
        }

        let upstream = match previous {
            Some(prev) if prev.upstream.config() == &config.upstream => Some(prev.upstream.clone()),
            _ => match Upstream::new(&config.upstream) {
                Ok(u) => Some(Arc::new(u)),
                Err(e) => {
                    errors.push(ConfigError::new(
                        &config.path,
                        Some("upstream.peers".into()),
                        format!("cannot build the origin pool: {e}"),
                    ));
                    None
                }
            },
        };

        match (errors.is_empty(), upstream, pages) {
            (true, Some(upstream), Some(pages)) => Ok(Snapshot {
                generation: previous.map_or(1, |p| p.generation + 1),
                loaded_at: now,
                config,
                upstream,
                pages,
                warnings,
            }),
            _ => Err(ConfigErrors(errors)),
        }
    }
}

fn warn_origin_references(pages: &Pages, warnings: &mut Vec<String>) {
    for (file, line, url) in pages.origin_references() {
        warnings.push(format!(
            "{}:{line}: references \"{url}\", which browsers would fetch from the origin; inline it so waiting users never reach the origin",
            file.display()
        ));
    }
}
