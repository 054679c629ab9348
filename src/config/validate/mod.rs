//! From the file schema to the canonical [`Config`]: every check, every default, every error.

use std::collections::HashSet;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;

use super::error::{from_toml, ConfigError, ConfigErrors};
use super::file::{FileConfig, LimitText, RateLimitFile, RoomFile, UpstreamFile};
use super::locate::{line_of_key, Locator};
use super::*;
use crate::identity::{IdentityPolicy, Source};

const WINDOWS: [u64; 3] = [1, 10, 60];
const DEFAULT_MAX_KEYS: i64 = 16_384;
const MAX_MAX_KEYS: i64 = 50_000_000;
/// The largest `h2_reset_per_connection` / `h2_reset_per_client`.
const MAX_RESET_BUDGET: i64 = 1_000_000;

/// How `upstream.peers` names become addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// The system resolver (DNS), as a running proxy needs.
    System,
    /// Literal addresses only; a host name is an error. For fuzzing and tools that must not
    /// touch the network.
    Offline,
}

pub(super) fn parse(text: &str, path: &Path, resolve: Resolve) -> Result<Config, ConfigErrors> {
    // Unknown keys do not stop the parse: each is reported, and what did parse is validated
    // too, so one run lists every problem of the file.
    let mut unknown = Vec::new();
    let parsed =
        serde_ignored::deserialize(toml::Deserializer::new(text), |p| unknown.push(dotted(&p)));
    let mut v = Validator {
        resolve,
        locator: std::cell::OnceCell::new(),
        text,
        path,
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        errors: Vec::new(),
    };
    for key in unknown {
        let field = key.rsplit(['.', '[']).next().unwrap_or(&key).to_owned();
        let message = match super::suggest::did_you_mean(&key) {
            Some(known) => format!("unknown field `{field}`; did you mean `{known}`?"),
            None => format!("unknown field `{field}`"),
        };
        v.err(key, message);
    }
    let file: FileConfig = match parsed {
        Ok(file) => file,
        Err(e) => {
            v.errors.push(from_toml(path, text, &e, false));
            return Err(ConfigErrors(v.errors));
        }
    };
    let config = v.config(file);
    if v.errors.is_empty() {
        if let Some(config) = config {
            return Ok(config);
        }
    }
    Err(ConfigErrors(v.errors))
}

/// A key path as errors name it: `room[0].allow_percent`.
fn dotted(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", dotted(parent)),
        Path::Map { parent, key } => match dotted(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => dotted(parent),
    }
}

struct Validator<'a> {
    resolve: Resolve,
    /// Parsed on the first error only: a good file is never parsed twice.
    locator: std::cell::OnceCell<Locator<'a>>,
    text: &'a str,
    path: &'a Path,
    dir: PathBuf,
    errors: Vec<ConfigError>,
}

impl Validator<'_> {
    fn err(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        let text = self.text;
        let line = self.locator.get_or_init(|| Locator::new(text)).line(&key);
        self.errors
            .push(ConfigError::new(self.path, Some(key), message).at_line(line));
    }

    fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir.join(p)
        }
    }

    fn config(&mut self, file: FileConfig) -> Option<Config> {
        let server = self.server(&file);
        let admin = self.admin(&file);
        let identity = self.identity(&file);
        let upstream = match &file.upstream {
            Some(u) => self.upstream(u),
            None => {
                self.err(
                    "upstream.peers",
                    "is required: the origin servers to protect, e.g. [\"127.0.0.1:8000\"]",
                );
                None
            }
        };
        let rooms = self.rooms(&file.room);
        let rate_limits = self.rules(&file.rate_limit);
        let log = self.log(&file);
        let cluster = self.cluster(&file);
        let tls = self.tls(&file);
        let keys_file = self.resolve(&file.keys.file);
        if file.keys.file.trim().is_empty() {
            self.err("keys.file", "must name the key ring file");
        }
        Some(Config {
            path: self.path.to_path_buf(),
            server: server?,
            admin: admin?,
            identity: identity?,
            upstream: upstream?,
            keys_file,
            rooms,
            rate_limits,
            log: log?,
            cluster,
            tls,
        })
    }

    fn tls(&mut self, file: &FileConfig) -> TlsConfig {
        let t = &file.tls;
        let min_version = match t.min_version.as_str() {
            "1.2" => TlsVersion::Tls12,
            "1.3" => TlsVersion::Tls13,
            other => {
                self.err(
                    "tls.min_version",
                    format!("must be \"1.2\" or \"1.3\", got \"{other}\""),
                );
                TlsVersion::Tls12
            }
        };
        let mut certificates = Vec::new();
        for (i, c) in t.certificates.iter().enumerate() {
            for (what, p) in [("cert", &c.cert), ("key", &c.key)] {
                if p.trim().is_empty() {
                    self.err(
                        format!("tls.certificates[{i}].{what}"),
                        "must name a PEM file",
                    );
                }
            }
            certificates.push(CertificatePaths {
                cert: self.resolve(&c.cert),
                key: self.resolve(&c.key),
            });
        }
        if !file.server.tls_listen.is_empty() && t.certificates.is_empty() {
            self.err(
                "tls.certificates",
                "needs at least one { cert, key } pair: server.tls_listen is set",
            );
        }
        TlsConfig {
            certificates,
            min_version,
        }
    }

    fn cluster(&mut self, file: &FileConfig) -> ClusterConfig {
        let c = &file.cluster;
        let store = match c.store.as_str() {
            "local" => StoreKind::Local,
            "redis" => StoreKind::Redis,
            other => {
                self.err(
                    "cluster.store",
                    format!("must be \"local\" or \"redis\", got \"{other}\""),
                );
                StoreKind::Local
            }
        };
        let on_store_failure = match c.on_store_failure.as_str() {
            "last_share" => OnStoreFailure::LastShare,
            "open" => OnStoreFailure::Open,
            "closed" => OnStoreFailure::Closed,
            other => {
                self.err(
                    "cluster.on_store_failure",
                    format!("must be \"last_share\", \"open\" or \"closed\", got \"{other}\""),
                );
                OnStoreFailure::LastShare
            }
        };
        if c.sync_interval < Duration::from_millis(100) || c.sync_interval > Duration::from_secs(10)
        {
            self.err("cluster.sync_interval", "must be between 100ms and 10s");
        }
        let node = c.node.trim();
        if !node.is_empty() && !is_node_name(node) {
            self.err(
                "cluster.node",
                "may hold letters, digits and . _ - : only (at most 64)",
            );
        }
        if c.key_prefix.is_empty() || c.key_prefix.len() > 64 || c.key_prefix.contains(' ') {
            self.err(
                "cluster.key_prefix",
                "must be 1 to 64 characters, without spaces",
            );
        }
        let mut redis = Vec::new();
        if store == StoreKind::Redis {
            if c.redis.is_empty() {
                self.err("cluster.redis", "needs the Redis server's URL");
            }
            for (i, url) in c.redis.iter().enumerate() {
                match redis::Client::open(url.as_str()) {
                    Ok(_) => redis.push(url.clone()),
                    Err(e) => self.err(
                        format!("cluster.redis[{i}]"),
                        format!(
                            "is not a Redis URL like \"redis://10.0.0.5:6379/0\": {}",
                            crate::config::redact_url(&e.to_string())
                        ),
                    ),
                }
            }
        }
        ClusterConfig {
            store,
            redis,
            node: (!node.is_empty()).then(|| node.to_owned()),
            sync_interval: c.sync_interval,
            on_store_failure,
            key_prefix: c.key_prefix.clone(),
        }
    }

    fn socket_addr(&mut self, key: String, value: &str) -> Option<SocketAddr> {
        match value.trim().parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.err(
                    key,
                    format!("\"{value}\" is not an address like \"0.0.0.0:8080\" or \"[::]:8080\""),
                );
                None
            }
        }
    }

    fn cidrs(&mut self, key: &str, values: &[String]) -> Vec<IpNet> {
        let mut out = Vec::new();
        for (i, value) in values.iter().enumerate() {
            let v = value.trim();
            let parsed = v
                .parse::<IpNet>()
                .or_else(|_| v.parse::<std::net::IpAddr>().map(IpNet::from));
            match parsed {
                // Store networks in canonical form (host bits cleared, mapped IPv6 as IPv4).
                Ok(net) => out.push(canonical_net(net)),
                Err(_) => self.err(
                    format!("{key}[{i}]"),
                    format!("\"{value}\" is not a CIDR like \"10.0.0.0/8\" or an address"),
                ),
            }
        }
        out
    }

    fn server(&mut self, file: &FileConfig) -> Option<ServerConfig> {
        let s = &file.server;
        let mut listen = Vec::new();
        if s.listen.is_empty() {
            self.err("server.listen", "needs at least one address");
        }
        for (i, l) in s.listen.iter().enumerate() {
            if let Some(a) = self.socket_addr(format!("server.listen[{i}]"), l) {
                listen.push(a);
            }
        }
        if s.threads == 0 || s.threads > MAX_THREADS {
            self.err(
                "server.threads",
                format!("must be between 1 and {MAX_THREADS}, got {}", s.threads),
            );
        }
        if s.pid_file.trim().is_empty() {
            self.err("server.pid_file", "must not be empty");
        }
        if s.upgrade_sock.trim().is_empty() {
            self.err("server.upgrade_sock", "must not be empty");
        }
        if s.graceful_shutdown > Duration::from_secs(3600) {
            self.err("server.graceful_shutdown", "must be at most 1h");
        }
        for (key, d) in [
            ("server.keepalive_timeout", s.keepalive_timeout),
            ("server.header_timeout", s.header_timeout),
        ] {
            if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
                self.err(key, "must be between 1s and 1h");
            }
        }
        let mut tls_listen = Vec::new();
        for (i, l) in s.tls_listen.iter().enumerate() {
            if let Some(a) = self.socket_addr(format!("server.tls_listen[{i}]"), l) {
                if listen.contains(&a) {
                    self.err(
                        format!("server.tls_listen[{i}]"),
                        format!("{a} is also in server.listen"),
                    );
                }
                tls_listen.push(a);
            }
        }
        if s.redirect_to_https && s.tls_listen.is_empty() {
            self.err(
                "server.redirect_to_https",
                "needs server.tls_listen: there is no https listener to redirect to",
            );
        }
        let pages = s.pages.as_deref().map(|p| self.resolve(p));
        // A folder named must be there: one error at its line, not one per missing page.
        if let Some(dir) = pages.as_ref().filter(|d| !d.is_dir()) {
            self.err(
                "server.pages",
                format!(
                    "there is no folder {}; leave `pages` out to serve the built-in pages",
                    dir.display()
                ),
            );
        }
        let h2_resets = self.reset_budget(s);
        Some(ServerConfig {
            listen,
            threads: s.threads,
            pid_file: PathBuf::from(&s.pid_file),
            upgrade_sock: PathBuf::from(&s.upgrade_sock),
            graceful_shutdown: s.graceful_shutdown,
            work_stealing: s.work_stealing,
            keepalive_timeout: s.keepalive_timeout,
            header_timeout: s.header_timeout,
            pages,
            proxy_protocol: s.proxy_protocol,
            tls_listen,
            h2c: s.h2c,
            redirect_to_https: s.redirect_to_https,
            h2_resets,
            bypass_acme_challenge: s.bypass_acme_challenge,
        })
    }

    /// The `h2_reset_*` keys of `[server]`.
    fn reset_budget(&mut self, s: &super::file::ServerFile) -> ResetBudget {
        let per_connection =
            self.reset_count("server.h2_reset_per_connection", s.h2_reset_per_connection);
        let per_client = self.reset_count("server.h2_reset_per_client", s.h2_reset_per_client);
        for (key, d, min) in [
            (
                "server.h2_reset_window",
                s.h2_reset_window,
                Duration::from_secs(1),
            ),
            (
                "server.h2_reset_penalty",
                s.h2_reset_penalty,
                Duration::from_secs(1),
            ),
            (
                "server.h2_reset_within",
                s.h2_reset_within,
                Duration::from_millis(10),
            ),
        ] {
            if d < min || d > Duration::from_secs(3600) {
                self.err(
                    key,
                    format!("must be between {} and 1h", humantime::format_duration(min)),
                );
            }
        }
        ResetBudget {
            per_connection,
            per_client,
            window: s.h2_reset_window,
            penalty: s.h2_reset_penalty,
            within: s.h2_reset_within,
        }
    }

    fn reset_count(&mut self, key: &str, n: i64) -> u32 {
        if !(0..=MAX_RESET_BUDGET).contains(&n) {
            self.err(
                key,
                format!("must be between 0 (no limit) and {MAX_RESET_BUDGET}, got {n}"),
            );
        }
        n.clamp(0, MAX_RESET_BUDGET) as u32
    }

    fn admin(&mut self, file: &FileConfig) -> Option<AdminConfig> {
        let listen = self.socket_addr("admin.listen".into(), &file.admin.listen)?;
        let token = Some(file.admin.token.clone()).filter(|t| !t.is_empty());
        if let Some(message) = admin_token_missing(listen, token.as_deref()) {
            self.err("admin.token", message);
        }
        if token.as_ref().is_some_and(|t| t.len() < 16) {
            self.err("admin.token", "must be at least 16 characters");
        }
        let state_file = file.admin.state_file.trim();
        if state_file.is_empty() {
            self.err(
                "admin.state_file",
                "must name a file (operator actions are kept in it)",
            );
        }
        let state_file = self.resolve(state_file);
        Some(AdminConfig {
            listen,
            token,
            state_file,
        })
    }

    fn identity(&mut self, file: &FileConfig) -> Option<IdentityPolicy> {
        let i = &file.identity;
        let source = match i.source.as_str() {
            "client_ip" => Source::ClientIp,
            "header" => match http::HeaderName::from_bytes(i.header.trim().as_bytes()) {
                Ok(name) => Source::Header(name),
                Err(_) => {
                    self.err(
                        "identity.header",
                        format!("\"{}\" is not a valid header name", i.header),
                    );
                    return None;
                }
            },
            other => {
                self.err(
                    "identity.source",
                    format!("must be \"client_ip\" or \"header\", got \"{other}\""),
                );
                return None;
            }
        };
        if !(8..=128).contains(&i.ipv6_prefix) {
            self.err(
                "identity.ipv6_prefix",
                format!("must be between 8 and 128, got {}", i.ipv6_prefix),
            );
        }
        let trusted_proxies = self.cidrs("identity.trusted_proxies", &i.trusted_proxies);
        if matches!(source, Source::Header(_)) && i.trusted_proxies.is_empty() {
            self.err(
                "identity.source",
                format!(
                    "\"header\" needs identity.trusted_proxies: the {} header is believed only from a trusted proxy, and with none anyone could choose their identity",
                    i.header.trim()
                ),
            );
        }
        Some(IdentityPolicy {
            source,
            ipv6_prefix: i.ipv6_prefix,
            trusted_proxies,
        })
    }

    fn upstream(&mut self, u: &UpstreamFile) -> Option<UpstreamConfig> {
        if u.peers.is_empty() {
            self.err(
                "upstream.peers",
                "needs at least one origin, e.g. [\"127.0.0.1:8000\"]",
            );
        }
        let mut peers = Vec::new();
        for (i, p) in u.peers.iter().enumerate() {
            let key = format!("upstream.peers[{i}]");
            let name = p.trim();
            let Some((host, port)) = name.rsplit_once(':') else {
                self.err(key, format!("\"{p}\" needs a port, like \"{p}:80\""));
                continue;
            };
            if port.parse::<u16>().is_err() {
                self.err(key, format!("\"{p}\" has an invalid port"));
                continue;
            }
            let resolved = match self.resolve {
                Resolve::System => name.to_socket_addrs().map(|a| a.collect::<Vec<_>>()),
                Resolve::Offline => name
                    .parse::<SocketAddr>()
                    .map(|a| vec![a])
                    .map_err(|_| std::io::Error::other("host names are not resolved offline")),
            };
            match resolved {
                Ok(mut addrs) => {
                    addrs.dedup();
                    if addrs.is_empty() {
                        self.err(key, format!("\"{p}\" resolves to no address"));
                    } else {
                        let host = host
                            .trim_start_matches('[')
                            .trim_end_matches(']')
                            .to_owned();
                        peers.push(PeerConfig {
                            name: name.to_owned(),
                            host,
                            addrs,
                        });
                    }
                }
                Err(e) => self.err(key, format!("cannot resolve \"{p}\": {e}")),
            }
        }
        if u.connect_timeout.is_zero() {
            self.err("upstream.connect_timeout", "must be more than 0s");
        }
        if u.read_timeout.is_zero() {
            self.err("upstream.read_timeout", "must be more than 0s");
        }
        if !u.tls && !u.sni.is_empty() {
            self.err("upstream.sni", "only applies when upstream.tls = true");
        }
        let ca_file = Some(u.ca_file.trim())
            .filter(|f| !f.is_empty())
            .map(|f| self.resolve(f));
        if let Some(path) = &ca_file {
            if !u.tls {
                self.err("upstream.ca_file", "only applies when upstream.tls = true");
            }
            match std::fs::read_to_string(path) {
                Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => {}
                Ok(_) => self.err(
                    "upstream.ca_file",
                    format!("{} holds no PEM certificate", path.display()),
                ),
                Err(e) => self.err(
                    "upstream.ca_file",
                    format!("cannot read {}: {e}", path.display()),
                ),
            }
        }
        if u.keepalive_pool_size == 0 || u.keepalive_pool_size > 65_536 {
            self.err(
                "upstream.keepalive_pool_size",
                format!("must be between 1 and 65536, got {}", u.keepalive_pool_size),
            );
        }
        Some(UpstreamConfig {
            peers,
            tls: u.tls,
            sni: u.sni.clone(),
            ca_file,
            connect_timeout: u.connect_timeout,
            read_timeout: u.read_timeout,
            health_check: u.health_check,
            keepalive_pool_size: u.keepalive_pool_size,
        })
    }

    /// Path prefixes, in the normalised form request paths are matched in (`crate::path`).
    fn prefixes(&mut self, key: &str, values: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(values.len());
        for (i, p) in values.iter().enumerate() {
            if !p.starts_with('/') {
                self.err(
                    format!("{key}[{i}]"),
                    format!("\"{p}\" must start with '/'"),
                );
            }
            // Requests are matched with their `;` parameters dropped, so a prefix holding one
            // would never match.
            if p.contains(';') || p.to_ascii_lowercase().contains("%3b") {
                self.err(
                    format!("{key}[{i}]"),
                    format!(
                        "\"{p}\" holds a ';' parameter, which request paths are matched without"
                    ),
                );
                continue;
            }
            match crate::path::normalize(p) {
                Ok(normal) => out.push(normal.as_str().to_owned()),
                Err(e) => self.err(
                    format!("{key}[{i}]"),
                    format!("\"{}\": {e}", p.escape_debug()),
                ),
            }
        }
        out
    }

    fn rooms(&mut self, rooms: &[RoomFile]) -> Vec<RoomConfig> {
        let mut out: Vec<RoomConfig> = Vec::new();
        let mut names = HashSet::new();
        let mut cookies = HashSet::new();
        let mut default_cookie_taken = false;
        for (i, r) in rooms.iter().enumerate() {
            let k = |field: &str| format!("room[{i}].{field}");
            let name = r.name.clone().unwrap_or_else(|| "default".into());
            if !is_label(&name) {
                self.err(
                    k("name"),
                    format!(
                        "\"{name}\" may use only letters, digits, '_', '-' and '.' (at most 64)"
                    ),
                );
            }
            if !names.insert(name.clone()) {
                self.err(
                    k("name"),
                    format!("another room is already named \"{name}\""),
                );
            }
            // A room that names no cookie gets one of its own, so several rooms need no cookie
            // names to be written. The first such room keeps `waiting_room`, the name every room
            // had before, so visitors holding that cookie keep their place.
            let (cookie_name, written) = match &r.cookie_name {
                Some(c) => (c.clone(), true),
                None if default_cookie_taken => (format!("waiting_room_{name}"), false),
                None => {
                    default_cookie_taken = true;
                    ("waiting_room".to_owned(), false)
                }
            };
            if written && !is_cookie_name(&cookie_name) {
                self.err(
                    k("cookie_name"),
                    format!("\"{cookie_name}\" is not a valid cookie name"),
                );
            } else if !cookies.insert(cookie_name.clone()) {
                let whose = if written {
                    ""
                } else {
                    "this room's default cookie name "
                };
                self.err(
                    k("cookie_name"),
                    format!(
                        "{whose}\"{cookie_name}\" is used by another room; each room needs its own cookie"
                    ),
                );
            }
            let hosts = r
                .hosts
                .clone()
                .unwrap_or_default()
                .iter()
                .map(|h| {
                    let h = h.trim().to_ascii_lowercase();
                    match h.strip_prefix("*.") {
                        Some(rest) => HostPattern::Suffix(format!(".{rest}")),
                        None => HostPattern::Exact(h),
                    }
                })
                .collect();
            let paths = self.prefixes(
                &k("paths"),
                &r.paths.clone().unwrap_or_else(|| vec!["/".into()]),
            );
            if paths.is_empty() {
                self.err(
                    k("paths"),
                    "needs at least one path prefix (\"/\" guards everything)",
                );
            }
            let bypass_paths = self.prefixes(
                &k("bypass_paths"),
                &r.bypass_paths.clone().unwrap_or_default(),
            );
            let bypass_cidrs = self.cidrs(
                &k("bypass_cidrs"),
                &r.bypass_cidrs.clone().unwrap_or_default(),
            );
            let admission = self.admission(i, r);
            let same_site = match r.cookie_same_site.as_deref().unwrap_or("lax") {
                "lax" => SameSite::Lax,
                "strict" => SameSite::Strict,
                "none" => SameSite::None,
                other => {
                    self.err(
                        k("cookie_same_site"),
                        format!("must be \"lax\", \"strict\" or \"none\", got \"{other}\""),
                    );
                    SameSite::Lax
                }
            };
            let mut secure = match r.cookie_secure.as_deref().unwrap_or("auto") {
                "auto" => CookieSecure::Auto,
                "always" => CookieSecure::Always,
                "never" => CookieSecure::Never,
                other => {
                    self.err(
                        k("cookie_secure"),
                        format!("must be \"auto\", \"always\" or \"never\", got \"{other}\""),
                    );
                    CookieSecure::Auto
                }
            };
            if same_site == SameSite::None {
                if secure == CookieSecure::Never {
                    self.err(k("cookie_secure"), "cannot be \"never\" with cookie_same_site = \"none\": browsers drop such cookies");
                }
                secure = CookieSecure::Always;
            }
            let lifetime = r.cookie_lifetime.unwrap_or(Duration::from_secs(7200));
            if lifetime < Duration::from_secs(1) {
                self.err(k("cookie_lifetime"), "must be at least 1s");
            }
            let wait_status = r.wait_status.unwrap_or(200);
            if !((200..300).contains(&wait_status) || wait_status == 429 || wait_status == 503) {
                self.err(
                    k("wait_status"),
                    format!("must be a 2xx status, 429 or 503, got {wait_status}"),
                );
            }
            // A folder the room names must be there: a typo in it would otherwise serve other
            // pages than the operator wrote. A room that names none takes `pages` beside the
            // config if there is one, else the pages built into the binary, so a first config
            // needs no copied files.
            let pages = match r.pages.as_deref() {
                Some(p) => {
                    let dir = self.resolve(p);
                    if !dir.is_dir() {
                        self.err(
                            k("pages"),
                            format!(
                                "there is no folder {}; leave `pages` out to serve the built-in pages",
                                dir.display()
                            ),
                        );
                    }
                    Some(dir)
                }
                None => Some(self.resolve("pages")).filter(|dir| dir.is_dir()),
            };
            let title = r
                .title
                .as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .unwrap_or(&name)
                .to_owned();
            if title.chars().count() > 200 || title.chars().any(char::is_control) {
                self.err(
                    k("title"),
                    "must be at most 200 characters, without control characters",
                );
            }
            let default_language = r.default_language.clone().unwrap_or_else(|| "en".into());
            if default_language
                .parse::<unic_langid::LanguageIdentifier>()
                .is_err()
            {
                self.err(
                    k("default_language"),
                    format!("\"{default_language}\" is not a language tag (en, de, pt-BR, …)"),
                );
            }
            let mode = match r.mode.as_deref().unwrap_or("enforce") {
                "enforce" => RoomMode::Enforce,
                "shadow" => RoomMode::Shadow,
                other => {
                    self.err(
                        k("mode"),
                        format!("must be \"enforce\" or \"shadow\", got \"{other}\""),
                    );
                    RoomMode::Enforce
                }
            };
            let capacity = matches!(admission, Some(Admission::Capacity(_)));
            let (events, problems) =
                super::event::check_events(&r.event, capacity, &|p| self.resolve(p));
            for (key, message) in problems {
                self.err(k(&key), message);
            }
            let autopilot = self.autopilot(i, r, admission.as_ref());
            let challenge = self.challenge(i, r);
            let (access, max_invitations) = self.access(i, r);
            let revoked_invitations = self.revoked_invitations(i, r);
            let Some(admission) = admission else { continue };
            out.push(RoomConfig {
                name,
                enabled: r.enabled.unwrap_or(true),
                hosts,
                paths,
                bypass_paths,
                bypass_cidrs,
                admission,
                cookie: CookieConfig {
                    name: cookie_name,
                    lifetime,
                    same_site,
                    secure,
                },
                wait_status,
                pages,
                queue_all: r.queue_all.unwrap_or(false),
                title,
                sold_out: r.sold_out.unwrap_or(false),
                default_language,
                mode,
                events,
                autopilot,
                challenge,
                access,
                max_invitations,
                revoked_invitations,
            });
        }
        out
    }

    /// `revoked_invitations`: each an invitation's id (its third field, 16 hex digits) or a
    /// whole code.
    fn revoked_invitations(&mut self, i: usize, r: &RoomFile) -> std::collections::BTreeSet<u64> {
        let mut out = std::collections::BTreeSet::new();
        for (j, entry) in r.revoked_invitations.iter().flatten().enumerate() {
            match crate::invite::id_of(entry) {
                Some(id) => {
                    out.insert(id);
                }
                None => self.err(
                    format!("room[{i}].revoked_invitations[{j}]"),
                    format!(
                        "\"{}\" is neither an invitation's id (16 hex digits) nor a code",
                        entry.chars().take(40).collect::<String>()
                    ),
                ),
            }
        }
        out
    }

    /// `lanes`: names as invitations write them, weights 1 to [`MAX_LANE_WEIGHT`],
    /// and `public` among them, the lane of everyone without an invitation's lane.
    fn lanes(&mut self, i: usize, r: &RoomFile) -> Vec<Lane> {
        let k = |field: &str| format!("room[{i}].lanes{field}");
        let Some(lanes) = r.lanes.as_ref().filter(|l| !l.is_empty()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, weight) in lanes {
            if !crate::invite::is_valid_lane(name) {
                self.err(
                    k(&format!(".{name}")),
                    "a lane's name is 1-32 of a-z, 0-9, '_' and '-' (as `vestibule invite --lane` takes it)",
                );
                continue;
            }
            if !(1..=i64::from(MAX_LANE_WEIGHT)).contains(weight) {
                self.err(
                    k(&format!(".{name}")),
                    format!(
                        "a lane's weight must be between 1 and {MAX_LANE_WEIGHT}, got {weight}"
                    ),
                );
                continue;
            }
            out.push(Lane {
                name: std::sync::Arc::from(name.as_str()),
                weight: *weight as u32,
            });
        }
        if lanes.len() > MAX_LANES {
            self.err(
                k(""),
                format!("at most {MAX_LANES} lanes, got {}", lanes.len()),
            );
        }
        if !lanes.contains_key(crate::invite::PUBLIC_LANE) {
            self.err(
                k(""),
                "needs a \"public\" lane: visitors without an invitation's lane wait in it",
            );
        }
        out.sort_by_key(|l| (&*l.name != crate::invite::PUBLIC_LANE, l.name.clone()));
        out
    }

    /// `access` and `max_invitations`.
    fn access(&mut self, i: usize, r: &RoomFile) -> (Access, usize) {
        let k = |field: &str| format!("room[{i}].{field}");
        let access = match r.access.as_deref().unwrap_or("open") {
            "open" => Access::Open,
            "invite" => Access::Invite,
            other => {
                self.err(
                    k("access"),
                    format!("must be \"open\" or \"invite\", got \"{other}\""),
                );
                Access::Open
            }
        };
        let max = r.max_invitations.unwrap_or(DEFAULT_MAX_INVITATIONS as i64);
        if !(1..=10_000_000).contains(&max) {
            self.err(
                k("max_invitations"),
                format!("must be between 1 and 10000000 (invitations in use remembered at once), got {max}"),
            );
        }
        (access, max.clamp(1, 10_000_000) as usize)
    }

    /// The `challenge*` keys, checked whether or not `challenge` is on.
    fn challenge(&mut self, i: usize, r: &RoomFile) -> Option<ChallengeConfig> {
        use crate::challenge::{MAX_DIFFICULTY, MIN_DIFFICULTY};
        let k = |field: &str| format!("room[{i}].{field}");
        let difficulty = r.challenge_difficulty.unwrap_or(16);
        if !(i64::from(MIN_DIFFICULTY)..=i64::from(MAX_DIFFICULTY)).contains(&difficulty) {
            self.err(
                k("challenge_difficulty"),
                format!(
                    "must be between {MIN_DIFFICULTY} and {MAX_DIFFICULTY} (leading zero bits; each one doubles the work), got {difficulty}"
                ),
            );
        }
        let ttl = r.challenge_ttl.unwrap_or(Duration::from_secs(300));
        if ttl < Duration::from_secs(10)
            || ttl > Duration::from_secs(3600)
            || ttl.subsec_nanos() != 0
        {
            self.err(
                k("challenge_ttl"),
                "must be a whole number of seconds between 10s and 1h",
            );
        }
        let on_failure = match r.on_challenge_failure.as_deref().unwrap_or("retry") {
            "retry" => OnChallengeFailure::Retry,
            "infinite_queue" => OnChallengeFailure::InfiniteQueue,
            other => {
                self.err(
                    k("on_challenge_failure"),
                    format!("must be \"retry\" or \"infinite_queue\", got \"{other}\""),
                );
                OnChallengeFailure::Retry
            }
        };
        match r.challenge.as_deref().unwrap_or("none") {
            "none" => None,
            "pow" => Some(ChallengeConfig {
                difficulty: difficulty.clamp(i64::from(MIN_DIFFICULTY), i64::from(MAX_DIFFICULTY))
                    as u8,
                ttl,
                on_failure,
            }),
            other => {
                self.err(
                    k("challenge"),
                    format!("must be \"none\" or \"pow\", got \"{other}\""),
                );
                None
            }
        }
    }

    /// The `autopilot*` keys. They are checked whether or not `autopilot` is on, so a
    /// room can be switched on by one line; they steer only when it is.
    fn autopilot(
        &mut self,
        i: usize,
        r: &RoomFile,
        admission: Option<&Admission>,
    ) -> Option<AutopilotConfig> {
        let k = |field: &str| format!("room[{i}].{field}");
        let target_latency = r
            .autopilot_target_latency
            .unwrap_or(Duration::from_millis(500));
        if target_latency < Duration::from_millis(1) || target_latency > Duration::from_secs(60) {
            self.err(k("autopilot_target_latency"), "must be between 1ms and 60s");
        }
        let max_error_rate = r.autopilot_max_error_rate.unwrap_or(0.02);
        if !(0.0..=1.0).contains(&max_error_rate) {
            self.err(
                k("autopilot_max_error_rate"),
                format!("must be a share between 0 and 1 (0.02 = 2 %), got {max_error_rate}"),
            );
        }
        let interval = r.autopilot_interval.unwrap_or(Duration::from_secs(10));
        if interval < Duration::from_secs(1)
            || interval > Duration::from_secs(300)
            || interval.subsec_nanos() != 0
        {
            self.err(
                k("autopilot_interval"),
                "must be a whole number of seconds between 1s and 5m",
            );
        }
        let lottery = matches!(admission, Some(Admission::Lottery { .. }));
        // Lottery rooms steer a percentage, which may go as low as 0 % (a crowd much larger
        // than the origin needs a tiny share); capacity rooms a pace of at least 1 a minute.
        let (lowest, highest) = if lottery { (0, 100) } else { (1, 10_000_000) };
        let mut bound = |field: &str, v: Option<i64>, default: i64| -> u32 {
            let v = v.unwrap_or(default);
            if !(lowest..=highest).contains(&v) {
                self.err(
                    k(field),
                    format!("must be between {lowest} and {highest}, got {v}"),
                );
                return default as u32;
            }
            v as u32
        };
        let min = bound("autopilot_min", r.autopilot_min, 1);
        let max = bound("autopilot_max", r.autopilot_max, 100);
        if min > max {
            self.err(
                k("autopilot_min"),
                format!("must not be over autopilot_max ({min} > {max})"),
            );
        }
        if !r.autopilot.unwrap_or(false) {
            return None;
        }
        let session = r.session_duration.unwrap_or(Duration::from_secs(300));
        if lottery
            && (session < Duration::from_secs(60) || session > Duration::from_secs(24 * 3600))
        {
            self.err(
                k("session_duration"),
                "must be between 1m and 24h (how long an admitted user counts as active)",
            );
        }
        match admission {
            Some(Admission::Lottery {
                allow_percentage: 0,
                ..
            }) => {
                self.err(
                    k("autopilot"),
                    "steers allow_percentage from where it is configured, and 0 closes the room: set the percentage to start from",
                );
                None
            }
            Some(Admission::Lottery { .. }) => Some(AutopilotConfig {
                target_latency,
                max_error_rate,
                min,
                max,
                interval,
                session,
            }),
            Some(Admission::Capacity(c)) if c.new_users_per_minute == 0 => {
                self.err(
                    k("autopilot"),
                    "steers new_users_per_minute: set it to the value to start from",
                );
                None
            }
            Some(Admission::Capacity(c)) => Some(AutopilotConfig {
                target_latency,
                max_error_rate,
                min,
                max,
                interval,
                session: c.session_duration,
            }),
            None => None,
        }
    }

    fn admission(&mut self, i: usize, r: &RoomFile) -> Option<Admission> {
        let k = |field: &str| format!("room[{i}].{field}");
        let method = r.admission.as_deref().unwrap_or("lottery");
        let lottery_only = [
            ("allow_percentage", r.allow_percentage.is_some()),
            ("wait_period", r.wait_period.is_some()),
            ("allow_period", r.allow_period.is_some()),
            ("closed_refresh", r.closed_refresh.is_some()),
        ];
        let capacity_only = [
            ("new_users_per_minute", r.new_users_per_minute.is_some()),
            ("total_active_users", r.total_active_users.is_some()),
            ("session_duration", r.session_duration.is_some()),
            ("refresh", r.refresh.is_some()),
            ("rejoin_grace", r.rejoin_grace.is_some()),
            ("max_waiting_users", r.max_waiting_users.is_some()),
            ("lanes", r.lanes.is_some()),
        ];
        match method {
            "lottery" => {
                for (field, set) in capacity_only {
                    // The autopilot of a lottery room counts admitted users for this long.
                    let autopilot_key = field == "session_duration" && r.autopilot == Some(true);
                    if set && !autopilot_key {
                        self.err(k(field), "only applies when admission is \"random\" or \"fifo\" (this room uses \"lottery\")");
                    }
                }
                let pct = r.allow_percentage.unwrap_or(50);
                if !(0..=100).contains(&pct) {
                    self.err(
                        k("allow_percentage"),
                        format!("must be between 0 and 100, got {pct}"),
                    );
                }
                let wait_period = r.wait_period.unwrap_or(Duration::from_secs(30));
                let allow_period = r.allow_period.unwrap_or(Duration::from_secs(3600));
                for (field, d) in [("wait_period", wait_period), ("allow_period", allow_period)] {
                    if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
                        self.err(k(field), "must be a whole number of seconds, at least 1s");
                    }
                }
                let closed_refresh = r.closed_refresh.unwrap_or(Duration::from_secs(60));
                if closed_refresh < Duration::from_secs(5)
                    || closed_refresh > Duration::from_secs(3600)
                    || closed_refresh.subsec_nanos() != 0
                {
                    self.err(
                        k("closed_refresh"),
                        "must be a whole number of seconds between 5s and 1h",
                    );
                }
                Some(Admission::Lottery {
                    allow_percentage: pct.clamp(0, 100) as u8,
                    wait_period,
                    allow_period,
                    closed_refresh,
                })
            }
            "random" | "fifo" => {
                for (field, set) in lottery_only {
                    if set {
                        self.err(k(field), format!("only applies when admission is \"lottery\" (this room uses \"{method}\")"));
                    }
                }
                let mut limit = |field: &str, v: Option<i64>| -> u32 {
                    let v = v.unwrap_or(0);
                    if !(0..=10_000_000).contains(&v) {
                        self.err(
                            k(field),
                            format!("must be between 0 (no limit) and 10000000, got {v}"),
                        );
                        return 0;
                    }
                    v as u32
                };
                let new_users_per_minute = limit("new_users_per_minute", r.new_users_per_minute);
                let max_waiting_users = limit("max_waiting_users", r.max_waiting_users);
                let total_active_users = limit("total_active_users", r.total_active_users);
                if new_users_per_minute == 0 && total_active_users == 0 {
                    self.err(
                        k("admission"),
                        format!("\"{method}\" needs a capacity: set new_users_per_minute, total_active_users or both"),
                    );
                }
                let session_duration = r.session_duration.unwrap_or(Duration::from_secs(300));
                if session_duration < Duration::from_secs(60)
                    || session_duration > Duration::from_secs(24 * 3600)
                {
                    self.err(
                        k("session_duration"),
                        "must be between 1m and 24h (activity is counted per minute)",
                    );
                }
                let refresh = r.refresh.unwrap_or(Duration::from_secs(20));
                if refresh < Duration::from_secs(5) || refresh > Duration::from_secs(300) {
                    self.err(k("refresh"), "must be between 5s and 5m");
                }
                let rejoin_grace = r.rejoin_grace.unwrap_or(Duration::from_secs(300));
                if rejoin_grace < refresh.mul_f64(2.0) || rejoin_grace > Duration::from_secs(86_400)
                {
                    self.err(
                        k("rejoin_grace"),
                        "must be between twice the refresh and 24h (a visitor checks in every refresh)",
                    );
                }
                Some(Admission::Capacity(CapacityConfig {
                    order: if method == "fifo" {
                        QueueOrder::Fifo
                    } else {
                        QueueOrder::Random
                    },
                    new_users_per_minute,
                    total_active_users,
                    session_duration,
                    refresh,
                    rejoin_grace,
                    max_waiting_users,
                    lanes: self.lanes(i, r),
                }))
            }
            other => {
                self.err(
                    k("admission"),
                    format!("must be \"lottery\", \"random\" or \"fifo\", got \"{other}\""),
                );
                None
            }
        }
    }

    fn rules(&mut self, rules: &[RateLimitFile]) -> Vec<RuleConfig> {
        let mut out = Vec::new();
        let mut names = HashSet::new();
        for (i, r) in rules.iter().enumerate() {
            let k = |field: &str| format!("rate_limit[{i}].{field}");
            let name = r.name.clone().unwrap_or_else(|| "per-ip".into());
            if !is_label(&name) || name.contains('"') {
                self.err(
                    k("name"),
                    format!(
                        "\"{name}\" may use only letters, digits, '_', '-' and '.' (at most 64)"
                    ),
                );
            }
            if !names.insert(name.clone()) {
                self.err(
                    k("name"),
                    format!("another rule is already named \"{name}\""),
                );
            }
            let mut key = Vec::new();
            let parts = r.key.clone().unwrap_or_else(|| vec!["client_ip".into()]);
            if parts.is_empty() {
                self.err(k("key"), "needs at least one part, e.g. [\"client_ip\"]");
            }
            for (j, part) in parts.iter().enumerate() {
                match parse_key_part(part) {
                    Ok(p) => key.push(p),
                    Err(msg) => self.err(format!("rate_limit[{i}].key[{j}]"), msg),
                }
            }
            let paths = self.prefixes(
                &k("paths"),
                &r.paths.clone().unwrap_or_else(|| vec!["/".into()]),
            );
            let mut methods = Vec::new();
            for (j, m) in r.methods.clone().unwrap_or_default().iter().enumerate() {
                match http::Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes()) {
                    Ok(m) => methods.push(m),
                    Err(_) => self.err(
                        format!("rate_limit[{i}].methods[{j}]"),
                        format!("\"{m}\" is not an HTTP method"),
                    ),
                }
            }
            let scope = match r.scope.as_deref().unwrap_or("all") {
                "all" => Scope::All,
                "origin" => Scope::Origin,
                other => {
                    self.err(
                        k("scope"),
                        format!("must be \"all\" or \"origin\", got \"{other}\""),
                    );
                    Scope::All
                }
            };
            let action = match r.action.as_deref().unwrap_or("block") {
                "block" => Action::Block,
                "log" => Action::Log,
                other => {
                    self.err(
                        k("action"),
                        format!("must be \"block\" or \"log\" (dry run), got \"{other}\""),
                    );
                    Action::Block
                }
            };
            let bypass_cidrs = self.cidrs(
                &k("bypass_cidrs"),
                &r.bypass_cidrs.clone().unwrap_or_default(),
            );
            let max_keys = r.max_keys.unwrap_or(DEFAULT_MAX_KEYS);
            if !(1..=MAX_MAX_KEYS).contains(&max_keys) {
                self.err(
                    k("max_keys"),
                    format!("must be between 1 and {MAX_MAX_KEYS}, got {max_keys}"),
                );
            }
            let Some(algorithm) = self.algorithm(i, r) else {
                continue;
            };
            let shared = r.shared.unwrap_or(false);
            if shared && !matches!(algorithm, Algorithm::Window { .. }) {
                self.err(
                    k("shared"),
                    "applies to window rules only: token buckets and concurrency caps count per node",
                );
            }
            out.push(RuleConfig {
                name,
                key,
                paths,
                methods,
                algorithm,
                scope,
                action,
                bypass_cidrs,
                max_keys: max_keys.clamp(1, MAX_MAX_KEYS) as usize,
                shared,
            });
        }
        out
    }

    fn algorithm(&mut self, i: usize, r: &RateLimitFile) -> Option<Algorithm> {
        let k = |field: &str| format!("rate_limit[{i}].{field}");
        let algorithm = r.algorithm.as_deref().unwrap_or("window");
        let not_for = |v: &mut Self, field: &str, set: bool, why: &str| {
            if set {
                v.err(
                    k(field),
                    format!("does not apply to a \"{algorithm}\" rule: {why}"),
                );
            }
        };
        // A rate ("5/10s") carries the duration its count is over, which then replaces the
        // `window` or `period` key instead of competing with it.
        let (limit, rate) = match &r.limit {
            None => (100, None),
            Some(LimitText::Count(n)) => (*n, None),
            Some(LimitText::Rate(text)) => match parse_rate(text) {
                Ok((n, per)) => (n, Some((text.as_str(), per))),
                Err(message) => {
                    self.err(k("limit"), message);
                    (100, None)
                }
            },
        };
        if !(1..=100_000_000).contains(&limit) {
            self.err(
                k("limit"),
                format!("must be between 1 and 100000000, got {limit}"),
            );
        }
        let limit = limit.clamp(1, 100_000_000) as u32;
        let penalty = r.penalty.unwrap_or(Duration::from_secs(15 * 60));
        if penalty > Duration::from_secs(7 * 24 * 3600) {
            self.err(k("penalty"), "must be at most 7 days");
        }
        let implied = |v: &mut Self, field: &str, set: bool, text: &str| {
            if set {
                v.err(
                    k(field),
                    format!("is already given by limit = \"{text}\": remove one of them"),
                );
            }
        };
        match algorithm {
            "window" => {
                not_for(
                    self,
                    "period",
                    r.period.is_some(),
                    "windows are 1s, 10s or 60s, set with `window`",
                );
                let (window, quota) = match rate {
                    Some((text, per)) => {
                        implied(self, "window", r.window.is_some(), text);
                        if per.subsec_nanos() != 0 || !WINDOWS.contains(&per.as_secs()) {
                            self.err(
                                k("limit"),
                                format!(
                                    "\"{text}\": a window rule counts over 1s, 10s or 60s, got {}",
                                    humantime::format_duration(per)
                                ),
                            );
                        }
                        (per, u64::from(limit))
                    }
                    None => {
                        let window = r.window.unwrap_or(Duration::from_secs(10));
                        if window.subsec_nanos() != 0 || !WINDOWS.contains(&window.as_secs()) {
                            self.err(
                                k("window"),
                                format!(
                                    "must be \"1s\", \"10s\" or \"60s\", got {}",
                                    humantime::format_duration(window)
                                ),
                            );
                        }
                        // A number is requests per second, averaged over the window.
                        (window, u64::from(limit) * window.as_secs().max(1))
                    }
                };
                Some(Algorithm::Window {
                    window,
                    quota,
                    penalty,
                })
            }
            "token_bucket" => {
                not_for(
                    self,
                    "window",
                    r.window.is_some(),
                    "a bucket refills `limit` tokens per `period`",
                );
                let period = match rate {
                    Some((text, per)) => {
                        implied(self, "period", r.period.is_some(), text);
                        if per < Duration::from_secs(1) || per > Duration::from_secs(24 * 3600) {
                            self.err(
                                k("limit"),
                                format!("\"{text}\": the period must be between 1s and 24h"),
                            );
                        }
                        per
                    }
                    None => {
                        let period = r.period.unwrap_or(Duration::from_secs(10));
                        if period < Duration::from_secs(1)
                            || period > Duration::from_secs(24 * 3600)
                        {
                            self.err(k("period"), "must be between 1s and 24h");
                        }
                        period
                    }
                };
                Some(Algorithm::TokenBucket {
                    limit,
                    period,
                    penalty,
                })
            }
            "concurrency" => {
                not_for(
                    self,
                    "window",
                    r.window.is_some(),
                    "it caps requests in flight, with no time window",
                );
                not_for(
                    self,
                    "period",
                    r.period.is_some(),
                    "it caps requests in flight, with no time window",
                );
                not_for(
                    self,
                    "penalty",
                    r.penalty.is_some(),
                    "a slot frees as soon as a request ends",
                );
                if let Some((text, _)) = rate {
                    self.err(
                        k("limit"),
                        format!("\"{text}\" is a rate; a concurrency rule's limit is a number of requests in flight"),
                    );
                }
                Some(Algorithm::Concurrency { limit })
            }
            other => {
                self.err(
                    k("algorithm"),
                    format!(
                        "must be \"window\", \"token_bucket\" or \"concurrency\", got \"{other}\""
                    ),
                );
                None
            }
        }
    }

    fn log(&mut self, file: &FileConfig) -> Option<LogConfig> {
        let level = match file.log.level.parse::<log::LevelFilter>() {
            Ok(l) => l,
            Err(_) => {
                self.err(
                    "log.level",
                    format!(
                        "must be one of off, error, warn, info, debug, trace; got \"{}\"",
                        file.log.level
                    ),
                );
                log::LevelFilter::Info
            }
        };
        let format = match file.log.format.as_str() {
            "plain" => LogFormat::Plain,
            "json" => LogFormat::Json,
            other => {
                self.err(
                    "log.format",
                    format!("must be \"plain\" or \"json\", got \"{other}\""),
                );
                LogFormat::Plain
            }
        };
        Some(LogConfig {
            level,
            format,
            access: file.log.access,
        })
    }
}

/// Why the admin endpoint on `listen` cannot go without a token, if it cannot.
fn admin_token_missing(listen: SocketAddr, token: Option<&str>) -> Option<String> {
    (!listen.ip().is_loopback() && token.is_none())
        .then(|| format!("is required because admin.listen ({listen}) is not a loopback address"))
}

/// Checks of a config as it will run after a reload: the restart-only settings of the config
/// in service (sockets already open) with everything else from the new file. A reload must not
/// apply an edit that is only safe together with a socket change it cannot make.
pub(super) fn check_as_run(config: &Config) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    if let Some(message) = admin_token_missing(config.admin.listen, config.admin.token.as_deref()) {
        let text = std::fs::read_to_string(&config.path).unwrap_or_default();
        errors.push(
            ConfigError::new(
                &config.path,
                Some("admin.token".to_owned()),
                format!("{message} (the listener in service until a restart)"),
            )
            .at_line(line_of_key(&text, "admin.token")),
        );
    }
    errors
}

fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) => {
            if let Some(v4) = v6.addr().to_ipv4_mapped() {
                if v6.prefix_len() >= 96 {
                    if let Ok(n) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96) {
                        return IpNet::V4(n.trunc());
                    }
                }
            }
            IpNet::V6(v6.trunc())
        }
        IpNet::V4(v4) => IpNet::V4(v4.trunc()),
    }
}

/// Names that appear in metrics labels and headers.
fn is_node_name(s: &str) -> bool {
    s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
}

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// RFC 6265 cookie-name: an HTTP token.
fn is_cookie_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `"N/DURATION"`: N requests per DURATION (`"5/10s"`, `"100/1m"`; `"5/s"` reads as `"5/1s"`).
fn parse_rate(text: &str) -> Result<(i64, Duration), String> {
    let bad = || format!("\"{text}\" is not a number of requests or a rate like \"5/10s\"");
    let (count, per) = text.split_once('/').ok_or_else(bad)?;
    let count: i64 = count.trim().parse().map_err(|_| bad())?;
    let per = per.trim();
    let per = if per.starts_with(|c: char| c.is_ascii_alphabetic()) {
        humantime::parse_duration(&format!("1{per}"))
    } else {
        humantime::parse_duration(per)
    }
    .map_err(|_| bad())?;
    if per.is_zero() {
        return Err(bad());
    }
    Ok((count, per))
}

fn parse_key_part(part: &str) -> Result<KeyPart, String> {
    match part {
        "client_ip" => Ok(KeyPart::ClientIp),
        "host" => Ok(KeyPart::Host),
        "path" => Ok(KeyPart::Path),
        "method" => Ok(KeyPart::Method),
        _ => {
            if let Some(h) = part.strip_prefix("header:") {
                http::HeaderName::from_bytes(h.trim().as_bytes())
                    .map(KeyPart::Header)
                    .map_err(|_| format!("\"{h}\" is not a valid header name"))
            } else if let Some(c) = part.strip_prefix("cookie:") {
                if is_cookie_name(c) {
                    Ok(KeyPart::Cookie(c.to_owned()))
                } else {
                    Err(format!("\"{c}\" is not a valid cookie name"))
                }
            } else {
                Err(format!(
                    "\"{part}\" is not a key part; use client_ip, host, path, method, header:<name> or cookie:<name>"
                ))
            }
        }
    }
}
