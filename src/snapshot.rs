//! One generation of configuration: the config file, the key ring and the pages it names, and
//! the objects built from them, validated as a whole.
//!
//! [`Snapshot::load`] is the single code path of `--check`, startup and every reload: if it
//! succeeds, everything a request could need is in place; if it fails, it lists every problem.
//! Requests hold an `Arc<Snapshot>` for their whole life, so a reload never changes the rules
//! under a request in flight.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{Config, ConfigError, ConfigErrors};
use crate::keys::KeyRing;
use crate::pages::{Pages, RoomPages};
use crate::ratelimit::{Rule, RuleSet};
use crate::room::{Room, RoomSet};
use crate::state::State;
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
    /// The key ring; loaded only when a room needs it.
    pub keys: Option<KeyRing>,
    /// The certificates of the TLS listeners, when `[tls]` names any.
    pub tls: Option<Arc<crate::tls::Tls>>,
    pub rooms: RoomSet,
    /// The pages of each room, in the order of `rooms` (see [`Snapshot::pages_of`]).
    pub room_pages: Vec<RoomPages>,
    pub rules: RuleSet,
    /// Problems worth a look that do not stop loading.
    pub warnings: Vec<String>,
    /// Settings the file changed that wait for a restart, as `(key, in service, in the file)`.
    pub pending_restart: Vec<(&'static str, String, String)>,
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
    /// What a request's decision reads from this generation.
    pub fn policy(&self) -> crate::decide::Policy<'_> {
        crate::decide::Policy {
            config: &self.config,
            keys: self.keys.as_ref(),
            rooms: &self.rooms,
            rules: &self.rules,
        }
    }

    /// Loads `path` and everything it names. `previous` is the snapshot in service, whose
    /// upstream pool (and its health) is kept when unchanged; `state` holds the counters that
    /// unchanged rules and rooms keep.
    pub fn load(
        path: &Path,
        previous: Option<&Snapshot>,
        state: &State,
        now: Timestamp,
    ) -> Result<Snapshot, ConfigErrors> {
        let mut config = crate::config::load(path)?;
        // A reload keeps the sockets in service: validate the config as it will actually run.
        let pending_restart = match previous {
            Some(prev) => config.keep_restart_settings(&prev.config, &crate::config::System)?,
            None => Vec::new(),
        };
        let mut load = Loading::default();
        let pages = load.server_pages(&config);
        let keys = load.keys(&config);
        let tls = load.tls(&config, previous);
        let (rooms, room_pages): (Vec<Room>, Vec<RoomPages>) =
            load.rooms(&config, state).into_iter().unzip();
        let rules = RuleSet::new(
            config
                .rate_limits
                .iter()
                .map(|r| Rule::new(r.clone(), &state.rules, &state.store))
                .collect(),
        );
        let upstream = load.upstream(&config, previous);
        let Loading {
            errors, warnings, ..
        } = load;
        match (errors.is_empty(), upstream, pages) {
            (true, Some(upstream), Some(pages)) => Ok(Snapshot {
                generation: previous.map_or(1, |p| p.generation + 1),
                loaded_at: now,
                config,
                upstream,
                pages,
                keys,
                tls,
                rooms: RoomSet::new(rooms),
                room_pages,
                rules,
                warnings,
                pending_restart,
            }),
            _ => Err(ConfigErrors(errors)),
        }
    }

    /// The pages of the room at `index` in [`Snapshot::rooms`] (a [`crate::room::Route`]'s
    /// index).
    pub fn pages_of(&self, index: usize) -> Option<&RoomPages> {
        self.room_pages.get(index)
    }

    /// The room named `name`, with its pages.
    pub fn room_named(&self, name: &str) -> Option<(&Room, &RoomPages)> {
        self.rooms
            .iter()
            .zip(&self.room_pages)
            .find(|(r, _)| r.name() == name)
    }
}

/// One load in progress: the problems found so far (every one is reported, not just the
/// first), the warnings, and the page sets compiled (rooms and events sharing a pages folder
/// share one compiled set).
#[derive(Default)]
struct Loading {
    errors: Vec<ConfigError>,
    warnings: Vec<String>,
    page_sets: HashMap<PathBuf, Arc<Pages>>,
}

impl Loading {
    /// The pages for answers outside every room.
    fn server_pages(&mut self, config: &Config) -> Option<Arc<Pages>> {
        let pages = match &config.server.pages {
            Some(dir) if !dir.is_dir() => {
                self.warnings.push(missing_folder("server.pages", dir));
                Some(Pages::builtin())
            }
            Some(dir) => match Pages::load(dir, "server.pages") {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    self.errors.extend(e.0);
                    None
                }
            },
            None => Some(Pages::builtin()),
        };
        if let Some(p) = &pages {
            warn_origin_references(p, &mut self.warnings);
            warn_missing_pages(p, &mut self.warnings);
        }
        pages
    }

    /// The key ring, loaded only when a room needs it.
    fn keys(&mut self, config: &Config) -> Option<KeyRing> {
        if config.rooms.is_empty() {
            return None;
        }
        match crate::keys::load(&config.keys_file) {
            Ok(ring) => {
                warn_about_keys(&config.keys_file, &ring, &mut self.warnings);
                warn_about_enqueue_secrets(config, &mut self.warnings);
                self.jwt_keys_for(config, &ring);
                Some(ring)
            }
            Err(e) => {
                self.errors.extend(e.0);
                None
            }
        }
    }

    /// A room with `jwt = true` or `api = true`, and `[oidc]` when enabled, need a `[[jwt_key]]`
    /// in the ring to sign with.
    fn jwt_keys_for(&mut self, config: &Config, ring: &KeyRing) {
        if !ring.jwt().is_empty() {
            return;
        }
        let text = std::fs::read_to_string(&config.path).unwrap_or_default();
        let rooms = config.rooms.iter().enumerate().filter_map(|(i, room)| {
            match (room.jwt.is_some(), room.api.is_some()) {
                (true, _) => Some(format!("room[{i}].jwt")),
                (false, true) => Some(format!("room[{i}].api")),
                (false, false) => None,
            }
        });
        let oidc = config.oidc.as_ref().map(|_| "oidc.enabled".to_owned());
        for key in rooms.chain(oidc) {
            {
                let line = crate::config::locate::line_of_key(&text, &key);
                self.errors.push(
                    ConfigError::new(
                        &config.path,
                        Some(key),
                        format!(
                            "needs a [[jwt_key]] in the key ring ({}) to sign with; make one with \
                             `vestibule keygen --jwt ES256 --out jwt.pem`",
                            config.keys_file.display()
                        ),
                    )
                    .at_line(line),
                );
            }
        }
    }

    /// The TLS listeners' certificates (those in service are kept when unchanged).
    fn tls(
        &mut self,
        config: &Config,
        previous: Option<&Snapshot>,
    ) -> Option<Arc<crate::tls::Tls>> {
        let tls = match crate::tls::Tls::load(&config.tls, previous.and_then(|p| p.tls.as_ref())) {
            Ok(tls) => tls,
            Err(e) => {
                self.errors.extend(e);
                None
            }
        };
        if !config.server.tls_listen.is_empty() && config.tls.certificates.is_empty() {
            self.errors.push(ConfigError::new(
                &config.path,
                Some("tls.certificates".into()),
                "needs at least one { cert, key } pair while server.tls_listen is open",
            ));
        }
        tls
    }

    /// The compiled pages of `dir` (`key` labels problems): the built-in pages, with a
    /// warning, when the folder is missing.
    fn pages_in(&mut self, dir: &PathBuf, key: &str) -> Option<Arc<Pages>> {
        if let Some(p) = self.page_sets.get(dir) {
            return Some(p.clone());
        }
        if !dir.is_dir() {
            self.warnings.push(missing_folder(key, dir));
            return Some(Pages::builtin());
        }
        match Pages::load(dir, key) {
            Ok(p) => {
                let p = Arc::new(p);
                warn_origin_references(&p, &mut self.warnings);
                warn_missing_pages(&p, &mut self.warnings);
                self.page_sets.insert(dir.clone(), p.clone());
                Some(p)
            }
            Err(e) => {
                self.errors.extend(e.0);
                None
            }
        }
    }

    /// Every room, with its operator controls and autopilot, beside its pages (its own and its
    /// events', each with the room's language).
    fn rooms(&mut self, config: &Config, state: &State) -> Vec<(Room, RoomPages)> {
        let mut rooms = Vec::new();
        let mut built_in = Vec::new();
        for (i, room) in config.rooms.iter().enumerate() {
            let pages = match &room.pages {
                Some(dir) => self.pages_in(dir, &format!("room[{i}].pages")),
                None => {
                    built_in.push(room.name.as_str());
                    Some(Pages::builtin())
                }
            };
            let Some(pages) = pages else {
                continue;
            };
            let Some(language) = pages.catalogs().find(&room.default_language) else {
                self.errors.push(ConfigError::new(
                    &config.path,
                    Some(format!("room[{i}].default_language")),
                    format!(
                        "no catalog for \"{}\" (built in: {}; or add {}/i18n/{}.toml)",
                        room.default_language,
                        pages
                            .catalogs()
                            .languages()
                            .map(|l| l.tag.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        room.pages
                            .clone()
                            .unwrap_or_else(|| config.path.with_file_name("pages"))
                            .display(),
                        room.default_language,
                    ),
                ));
                continue;
            };
            let built = Room::new(room.clone(), &state.store)
                .with_controls(state.controls.cell(&room.name))
                .with_pilot(state.pilots.cell(&room.name));
            let stream = (config.server.max_streams > 0)
                .then(|| format!("{}/rooms/{}/stream", config.server.api_prefix, room.name));
            let pages = RoomPages::new(pages, language, room.events.len()).with_stream(stream);
            rooms.push((built, self.event_pages(config, i, pages)));
        }
        // Said once (a reload logs only new warnings), so an operator who meant to serve their
        // own pages learns where vestibule looked.
        if !built_in.is_empty() {
            self.warnings.push(format!(
                "room{} {} name{} no pages and there is no folder {}: serving the built-in pages",
                if built_in.len() > 1 { "s" } else { "" },
                built_in.join(", "),
                if built_in.len() > 1 { "" } else { "s" },
                config.path.with_file_name("pages").display()
            ));
        }
        rooms
    }

    /// Room `i`'s events' own page folders, compiled once like the rooms'.
    fn event_pages(&mut self, config: &Config, i: usize, mut built: RoomPages) -> RoomPages {
        let room = &config.rooms[i];
        for (j, event) in room.events.iter().enumerate() {
            let Some(dir) = &event.pages else { continue };
            let key = format!("room[{i}].event[{j}].pages");
            let Some(pages) = self.pages_in(dir, &key) else {
                continue;
            };
            let Some(language) = pages.catalogs().find(&room.default_language) else {
                self.errors.push(ConfigError::new(
                    &config.path,
                    Some(key),
                    format!(
                        "no catalog for the room's default_language \"{}\" in {}",
                        room.default_language,
                        dir.display()
                    ),
                ));
                continue;
            };
            built = built.with_event(j, pages, language);
        }
        built
    }

    /// The origin pool: the one in service when its settings are unchanged (it keeps its
    /// health), else a new one.
    fn upstream(&mut self, config: &Config, previous: Option<&Snapshot>) -> Option<Arc<Upstream>> {
        match previous {
            Some(prev) if prev.upstream.config() == &config.upstream => Some(prev.upstream.clone()),
            _ => match Upstream::new(&config.upstream) {
                Ok(u) => Some(Arc::new(u)),
                Err(e) => {
                    self.errors.push(ConfigError::new(
                        &config.path,
                        Some("upstream.peers".into()),
                        format!("cannot build the origin pool: {e}"),
                    ));
                    None
                }
            },
        }
    }
}

fn warn_about_keys(path: &Path, ring: &KeyRing, warnings: &mut Vec<String>) {
    if ring.uses_sample_key() {
        warnings.push(format!(
            "{}: the ring holds the published demo key; anyone can forge cookies with it. Replace it with `vestibule keygen` output",
            path.display()
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let files = std::iter::once((path, "the key ring"))
            .chain(ring.jwt_files().iter().map(|f| (f.as_path(), "a JWT key")));
        for (file, what) in files {
            if let Ok(meta) = std::fs::metadata(file) {
                let mode = meta.permissions().mode();
                if mode & 0o077 != 0 {
                    warnings.push(format!(
                        "{}: readable by group or others (mode {:o}); keep {what} 0600",
                        file.display(),
                        mode & 0o777
                    ));
                }
            }
        }
    }
}

/// An HS256 `enqueue_key` is a secret that signs: like the key ring, keep it 0600. (A public key
/// may be read by anyone.)
fn warn_about_enqueue_secrets(config: &Config, warnings: &mut Vec<String>) {
    #[cfg(unix)]
    for room in &config.rooms {
        use std::os::unix::fs::PermissionsExt;
        let Some(e) = room
            .enqueue
            .as_ref()
            .filter(|e| e.key.algorithm() == "HS256")
        else {
            continue;
        };
        if let Ok(meta) = std::fs::metadata(&e.key_file) {
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0 {
                warnings.push(format!(
                    "{}: readable by group or others (mode {:o}); keep room {}'s enqueue secret 0600",
                    e.key_file.display(),
                    mode & 0o777,
                    room.name
                ));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (config, warnings);
}

/// Said once (a reload logs only new warnings): a folder without some of the pages serves the
/// built-in ones in their place.
fn warn_missing_pages(pages: &Pages, warnings: &mut Vec<String>) {
    let (Some(dir), [first, rest @ ..]) = (pages.dir(), pages.missing()) else {
        return;
    };
    warnings.push(format!(
        "{}: no {}; serving the built-in {}",
        dir.display(),
        pages.missing().join(", "),
        if rest.is_empty() { *first } else { "ones" }
    ));
}

fn warn_origin_references(pages: &Pages, warnings: &mut Vec<String>) {
    for (file, line, url) in pages.origin_references() {
        warnings.push(format!(
            "{}:{line}: references \"{url}\", which browsers would fetch from the origin; inline it so waiting users never reach the origin",
            file.display()
        ));
    }
}

/// The warning for a pages folder the config names and that is not there: the built-in pages
/// serve instead, so a config needs no copied files to start, and the operator learns where
/// vestibule looked.
fn missing_folder(key: &str, dir: &Path) -> String {
    format!(
        "{key}: there is no folder {}: serving the built-in pages",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{client_address, decide, Answer, Request};
    use crate::keys::testing::KEY1;
    use std::borrow::Cow;

    /// A snapshot of the config `text` (behind one origin), loaded from files as the server
    /// loads it, with the test key ring.
    fn loaded(text: &str) -> (tempfile::TempDir, Snapshot) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("keys.toml"),
            format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
        )
        .unwrap();
        let path = dir.path().join("vestibule.toml");
        std::fs::write(
            &path,
            format!("[upstream]\npeers = [\"127.0.0.1:2\"]\nhealth_check = \"0s\"\n{text}"),
        )
        .unwrap();
        let now = Timestamp::from_secs(1_800_000_000);
        let snapshot = Snapshot::load(&path, None, &State::local(), now).unwrap();
        (dir, snapshot)
    }

    fn answer(snapshot: &Snapshot, target: &str) -> Answer {
        let (method, headers) = (http::Method::GET, http::HeaderMap::new());
        let uri: http::Uri = target.parse().unwrap();
        let peer = "192.0.2.10".parse().unwrap();
        let request = Request {
            method: &method,
            uri: &uri,
            headers: &headers,
            host: Cow::Borrowed("shop.example"),
            path: crate::path::normalize(uri.path()).unwrap(),
            client: client_address(&headers, &snapshot.config.identity, peer),
            tls: false,
        };
        decide(
            &request,
            &snapshot.policy(),
            Timestamp::from_secs(1_800_000_000),
        )
        .answer
    }

    /// The policy a loaded snapshot lends holds its rooms, its API prefix and its key ring, or
    /// no ring when no room needs one.
    #[test]
    fn a_loaded_snapshot_lends_its_policy_to_the_decision() {
        let (_dir, held) = loaded("[[room]]\nname = \"sale\"\nqueue_all = true\n");
        assert!(held.policy().keys.is_some());
        assert!(matches!(answer(&held, "/"), Answer::RoomPage(0, _)));
        assert!(matches!(answer(&held, "/.vestibule/x"), Answer::Api { .. }));
        let (_dir, open) = loaded("");
        assert!(open.policy().keys.is_none());
        assert!(matches!(answer(&open, "/"), Answer::Forward));
    }
}
