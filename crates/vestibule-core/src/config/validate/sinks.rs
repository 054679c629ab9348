//! `[[events.sink]]`: each sink's kind and destination, its filters, its spool and its retries.

use super::server::parse_bytes;
use super::*;
use crate::config::sinks::{
    Destination, SinkConfig, SinkSecret, EVENT_TYPES, MIN_FILE_BYTES, MIN_SECRET_BYTES,
    MIN_SPOOL_BYTES,
};

/// `max_spool_bytes` unless set.
const DEFAULT_SPOOL_BYTES: &str = "256MiB";
/// `max_file_bytes` unless set.
const DEFAULT_FILE_BYTES: &str = "256MiB";
/// `max_retry_age` unless set.
const DEFAULT_RETRY_AGE: Duration = Duration::from_secs(24 * 3600);
/// `max_len` unless set.
const DEFAULT_MAX_LEN: u64 = 100_000;

impl Validator<'_> {
    pub(super) fn sinks(
        &mut self,
        file: &FileConfig,
        rooms: &[RoomConfig],
        cluster: &ClusterConfig,
    ) -> Vec<SinkConfig> {
        let mut names = HashSet::new();
        let mut spools: HashSet<PathBuf> = HashSet::new();
        let mut files: HashSet<PathBuf> = HashSet::new();
        let mut out = Vec::new();
        for (i, s) in file.events.sink.iter().enumerate() {
            let k = |field: &str| format!("events.sink[{i}].{field}");
            let name = match s.name.as_deref().map(str::trim) {
                Some(n) if is_label(n) => {
                    if !names.insert(n.to_owned()) {
                        self.err(k("name"), format!("another sink is named \"{n}\""));
                    }
                    n.to_owned()
                }
                Some(n) => {
                    self.err(
                        k("name"),
                        format!(
                            "\"{}\" may hold letters, digits and _ - . only (1 to 64)",
                            n.escape_debug()
                        ),
                    );
                    continue;
                }
                None => {
                    self.err(
                        k("name"),
                        "is required: the sink's name in metrics and logs",
                    );
                    continue;
                }
            };
            let Some(destination) = self.destination(i, s, cluster) else {
                continue;
            };
            // Two writers of one file would interleave, and rotate each other's lines away.
            if let Destination::File { path, .. } = &destination {
                if !files.insert(path.clone()) {
                    self.err(
                        k("path"),
                        format!("{} is another file sink's file too", path.display()),
                    );
                }
            }
            let types = self.event_types(i, &s.types);
            for (j, room) in s.rooms.iter().enumerate() {
                if !rooms.iter().any(|r| &r.name == room) {
                    self.err(
                        format!("events.sink[{i}].rooms[{j}]"),
                        format!("no room is named \"{}\"", room.escape_debug()),
                    );
                }
            }
            let spool_dir = match s.spool_dir.trim() {
                "" => self.resolve(&format!("state/spool/{name}")),
                dir => self.resolve(dir),
            };
            if !spools.insert(spool_dir.clone()) {
                self.err(
                    k("spool_dir"),
                    format!("{} is another sink's spool too", spool_dir.display()),
                );
            }
            let max_spool_bytes = self.size(
                k("max_spool_bytes"),
                s.max_spool_bytes.as_deref().unwrap_or(DEFAULT_SPOOL_BYTES),
                MIN_SPOOL_BYTES,
                "64KiB",
            );
            let max_retry_age = s.max_retry_age.unwrap_or(DEFAULT_RETRY_AGE);
            if max_retry_age < Duration::from_secs(1) {
                self.err(k("max_retry_age"), "must be at least 1s");
            }
            out.push(SinkConfig {
                name,
                destination,
                types,
                rooms: s.rooms.clone(),
                include_client_ip: s.include_client_ip,
                spool_dir,
                max_spool_bytes,
                max_retry_age,
            });
        }
        out
    }

    /// The sink's kind and the keys of that kind; a key of another kind is an error.
    fn destination(
        &mut self,
        i: usize,
        s: &super::super::file::SinkFile,
        cluster: &ClusterConfig,
    ) -> Option<Destination> {
        let k = |field: &str| format!("events.sink[{i}].{field}");
        let kind = match s.kind.as_deref() {
            Some(kind @ ("webhook" | "redis_stream" | "file")) => kind,
            Some(other) => {
                self.err(
                    k("kind"),
                    format!(
                        "must be \"webhook\", \"redis_stream\" or \"file\", got \"{}\"",
                        other.escape_debug()
                    ),
                );
                return None;
            }
            None => {
                self.err(
                    k("kind"),
                    "is required: \"webhook\", \"redis_stream\" or \"file\"",
                );
                return None;
            }
        };
        let written = [
            ("url", s.url.is_some(), "webhook"),
            ("secret_file", s.secret_file.is_some(), "webhook"),
            ("stream", s.stream.is_some(), "redis_stream"),
            ("max_len", s.max_len.is_some(), "redis_stream"),
            ("redis", s.redis.is_some(), "redis_stream"),
            ("path", s.path.is_some(), "file"),
            ("max_file_bytes", s.max_file_bytes.is_some(), "file"),
        ];
        for (key, set, of) in written {
            if set && of != kind {
                self.err(
                    k(key),
                    format!("applies only to kind = \"{of}\" sinks, not to \"{kind}\" ones"),
                );
            }
        }
        match kind {
            "webhook" => {
                let url = match s.url.as_deref() {
                    Some(url) => match check_url(url) {
                        Ok(()) => url.to_owned(),
                        Err(why) => {
                            self.err(
                                k("url"),
                                format!("\"{}\" {why}", url_origin(url).escape_debug()),
                            );
                            return None;
                        }
                    },
                    None => {
                        self.err(
                            k("url"),
                            "is required for a webhook: where events are POSTed",
                        );
                        return None;
                    }
                };
                let Some(secret_file) = s.secret_file.as_deref().filter(|f| !f.trim().is_empty())
                else {
                    self.err(
                        k("secret_file"),
                        "is required for a webhook: the file holding the key events are signed with",
                    );
                    return None;
                };
                let secret_file = self.resolve(secret_file);
                let mut secret = match self.host.read_bytes(&secret_file) {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        self.err(
                            k("secret_file"),
                            format!("cannot read {}: {e}", secret_file.display()),
                        );
                        return None;
                    }
                };
                // Editors end files with a newline; it is no part of the key.
                if secret.ends_with(b"\n") {
                    secret.pop();
                    if secret.ends_with(b"\r") {
                        secret.pop();
                    }
                }
                if secret.len() < MIN_SECRET_BYTES {
                    self.err(
                        k("secret_file"),
                        format!(
                            "{} holds {} bytes; a signing key needs at least {MIN_SECRET_BYTES} \
                             (`vestibule keygen` prints one)",
                            secret_file.display(),
                            secret.len()
                        ),
                    );
                    return None;
                }
                Some(Destination::Webhook {
                    url,
                    secret: SinkSecret(secret),
                    secret_file,
                })
            }
            "redis_stream" => {
                let stream = s
                    .stream
                    .clone()
                    .unwrap_or_else(|| "vestibule:events".into());
                if stream.is_empty() || stream.len() > 256 || stream.chars().any(char::is_control) {
                    self.err(
                        k("stream"),
                        "must be 1 to 256 characters, without control characters",
                    );
                }
                let max_len = match s.max_len {
                    None => DEFAULT_MAX_LEN,
                    Some(n) if n >= 1 => n as u64,
                    Some(_) => {
                        self.err(k("max_len"), "must be at least 1");
                        DEFAULT_MAX_LEN
                    }
                };
                let redis = match s.redis.as_deref().map(str::trim) {
                    None | Some("") => {
                        if cluster.store != StoreKind::Redis {
                            self.err(
                                k("redis"),
                                "is required unless [cluster] store = \"redis\" (then the \
                                 cluster's Redis is used)",
                            );
                            return None;
                        }
                        None
                    }
                    Some(url) => match self.host.check_store_url(url) {
                        Ok(()) => Some(url.to_owned()),
                        Err(e) => {
                            self.err(
                                k("redis"),
                                format!(
                                    "is not a Redis URL like \"redis://10.0.0.5:6379/0\": {}",
                                    redact_url(&e)
                                ),
                            );
                            return None;
                        }
                    },
                };
                Some(Destination::RedisStream {
                    stream,
                    max_len,
                    redis,
                })
            }
            _ => {
                let path = match s.path.as_deref().map(str::trim) {
                    None => self.resolve("state/events.jsonl"),
                    Some("") => {
                        self.err(k("path"), "must name the file events are written to");
                        return None;
                    }
                    Some(p) => self.resolve(p),
                };
                let max_file_bytes = self.size(
                    k("max_file_bytes"),
                    s.max_file_bytes.as_deref().unwrap_or(DEFAULT_FILE_BYTES),
                    MIN_FILE_BYTES,
                    "4KiB",
                );
                Some(Destination::File {
                    path,
                    max_file_bytes,
                })
            }
        }
    }

    /// `types`: each a known event type (the `vestibule.` prefix is left out).
    fn event_types(&mut self, i: usize, types: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for (j, t) in types.iter().enumerate() {
            if EVENT_TYPES.contains(&t.as_str()) {
                out.push(t.clone());
            } else {
                let hint = match t.strip_prefix("vestibule.") {
                    Some(bare) if EVENT_TYPES.contains(&bare) => {
                        format!("; write it without the prefix: \"{bare}\"")
                    }
                    _ => String::new(),
                };
                self.err(
                    format!("events.sink[{i}].types[{j}]"),
                    format!(
                        "\"{}\" is no event type (they are {}){hint}",
                        t.escape_debug(),
                        EVENT_TYPES.join(", ")
                    ),
                );
            }
        }
        out
    }

    /// A size of at least `min` bytes.
    fn size(&mut self, key: String, text: &str, min: u64, min_text: &str) -> u64 {
        match parse_bytes(text) {
            Some(b) if b >= min => b,
            _ => {
                self.err(
                    key,
                    format!(
                        "must be a size of at least {min_text}, such as \"256MiB\" (got {text:?})"
                    ),
                );
                min
            }
        }
    }
}

/// Why `url` cannot be a webhook's, if it cannot: an absolute `http` or `https` URL with a host.
fn check_url(url: &str) -> Result<(), &'static str> {
    let uri: http::Uri = url.parse().map_err(|_| "is not a URL")?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(_) => return Err("must be an http:// or https:// URL"),
        None => return Err("must be an absolute http:// or https:// URL"),
    }
    match uri.host() {
        Some(h) if !h.is_empty() => Ok(()),
        _ => Err("names no host"),
    }
}
