//! The configuration: one canonical [`Config`], independent of file syntax.
//!
//! `file.rs` is the TOML schema, and `validate/` turns a file's text into a `Config`
//! (collecting every problem, each naming the file, the key and the line). Parsing reads no
//! file and resolves no name itself: what it needs from the machine (the files a config names,
//! whether a folder exists, the addresses of a peer's name, whether the store's client takes a
//! URL) it asks of a [`Host`], which the edge implements on the real system.
//! Paths inside a config file are relative to that file's folder.

pub mod diff;
pub mod event;
mod file;
pub mod sinks;
mod suggest;
mod validate;

pub use crate::problem::{error, locate};
pub use suggest::schema;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;

pub use error::{ConfigError, ConfigErrors};
pub use event::{DrawKind, EventConfig, EventOverrides};

use crate::identity::IdentityPolicy;

/// Default config path, relative to the working directory.
pub const DEFAULT_PATH: &str = "conf/vestibule.toml";
/// The most `[server] threads` may be.
pub const MAX_THREADS: usize = 1024;
/// `upstream.connect_timeout` when the file leaves it out.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// `upstream.read_timeout` when the file leaves it out.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a config file says, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file this came from; relative paths below were resolved against its folder.
    pub path: PathBuf,
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub identity: IdentityPolicy,
    pub upstream: UpstreamConfig,
    pub keys_file: PathBuf,
    pub rooms: Vec<RoomConfig>,
    pub rate_limits: Vec<RuleConfig>,
    pub log: LogConfig,
    pub cluster: ClusterConfig,
    pub tls: TlsConfig,
    /// `[jwt]`: the JWTs of rooms with `jwt = true`.
    pub jwt: JwtConfig,
    /// `[oidc]`: the OpenID Provider for one room; `None` unless `enabled = true`.
    pub oidc: Option<OidcConfig>,
    /// `[[events.sink]]`: where events are sent. Restart-only.
    pub sinks: Vec<sinks::SinkConfig>,
}

/// `[oidc]` with `enabled = true`: vestibule is an OpenID Provider whose sign-in is a wait in
/// one room (see `crate::oidc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcConfig {
    /// The public URL of `{api_prefix}/oidc`: the `iss` of every ID token, and the base of
    /// every endpoint discovery names.
    pub issuer: String,
    /// The room visitors wait in before they are signed in (an `api = true` room).
    pub room: String,
    /// The relying parties.
    pub clients: Vec<OidcClient>,
}

impl OidcConfig {
    /// The client of this id, if one is registered.
    pub fn client(&self, id: &str) -> Option<&OidcClient> {
        self.clients.iter().find(|c| c.id == id)
    }
}

/// One relying party of `[oidc]`. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct OidcClient {
    /// `client_id`.
    pub id: String,
    /// `client_secret` (never in logs, `/status` or metrics).
    pub secret: String,
    /// Where the authorization endpoint may send the visitor back to, exactly as registered.
    pub redirect_uris: Vec<String>,
}

impl std::fmt::Debug for OidcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcClient")
            .field("id", &self.id)
            .field("secret", &"***")
            .field("redirect_uris", &self.redirect_uris)
            .finish()
    }
}

/// `[jwt]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtConfig {
    /// The `iss` claim of every JWT vestibule signs, and the only issuer it accepts.
    pub issuer: String,
}

/// A room's JWTs (`jwt = true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomJwt {
    /// The `aud` claim (`jwt_audience`; the room's name unless set).
    pub audience: String,
    /// `exp - iat` (`jwt_validity`).
    pub validity: Duration,
}

/// A room's public queue API (`api = true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomApi {
    /// `queue_position_expiry`: how long a number the room reached stays redeemable; zero
    /// for as long as a session lasts.
    pub position_expiry: Duration,
}

/// A room's enqueue tokens (`enqueue = "optional"` or `"required"`): see
/// [`crate::enqueue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomEnqueue {
    /// `optional` or `required` (a room with `enqueue = "off"` has no `RoomEnqueue`).
    pub mode: crate::enqueue::Mode,
    /// The key read from [`RoomEnqueue::key_file`] when the config was checked.
    pub key: crate::enqueue::EnqueueKey,
    /// `enqueue_key`, resolved against the config's folder: watched, and read again on reload.
    pub key_file: PathBuf,
}

/// `[tls]`: the certificates of the TLS listeners. The files are loaded and checked
/// with the snapshot (`crate::tls`), and reload like the key ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConfig {
    pub certificates: Vec<CertificatePaths>,
    pub min_version: TlsVersion,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            certificates: Vec::new(),
            min_version: TlsVersion::Tls12,
        }
    }
}

/// One `tls.certificates` entry: a PEM chain (leaf first) and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificatePaths {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The oldest TLS version the TLS listeners accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "1.2",
            TlsVersion::Tls13 => "1.3",
        }
    }
}

/// `[cluster]`: where counters live. Restart-only.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    pub store: StoreKind,
    /// The Redis (or Valkey) server as a `redis://` or `valkey://` URL; several: the seed nodes
    /// of a Redis Cluster.
    pub redis: Vec<String>,
    /// This node's name; `None`: the host name and the first listen port.
    pub node: Option<String>,
    pub sync_interval: Duration,
    pub on_store_failure: OnStoreFailure,
    pub key_prefix: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            store: StoreKind::Local,
            redis: Vec::new(),
            node: None,
            sync_interval: Duration::from_secs(1),
            on_store_failure: OnStoreFailure::LastShare,
            key_prefix: "vestibule:".into(),
        }
    }
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("store", &self.store)
            .field(
                "redis",
                &self.redis.iter().map(|u| redact_url(u)).collect::<Vec<_>>(),
            )
            .field("node", &self.node)
            .field("sync_interval", &self.sync_interval)
            .field("on_store_failure", &self.on_store_failure)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

/// A window rule's limit as people read it: requests per second when the quota divides evenly
/// over the window (every limit written as a number), else the rate (`"5/10s"`).
pub fn window_limit_text(window: Duration, quota: u64) -> String {
    let w = window.as_secs().max(1);
    if quota % w == 0 {
        (quota / w).to_string()
    } else {
        format!("{quota}/{w}s")
    }
}

/// A URL without its credentials (`redis://:secret@host` → `redis://***@host`): secrets never
/// reach logs or `/status`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s + 3 => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_owned(),
    }
}

/// Only where a URL goes: `scheme://host[:port]`, and `/…` when it had a path or a query.
/// Webhook URLs often carry their token in the path or the query (Slack, Discord), so logs,
/// reload diffs and `--check` show no more than this of them.
pub fn url_origin(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let hidden = if matches!(&rest[end..], "" | "/") {
        &rest[end..]
    } else {
        "/…"
    };
    format!("{scheme}{host}{hidden}")
}

impl ClusterConfig {
    /// The node name in service: the configured one, or `hostname` (the machine's name, when
    /// it has one) and the first port.
    pub fn node_name(&self, listen: &[SocketAddr], hostname: Option<&str>) -> String {
        if let Some(n) = &self.node {
            return n.clone();
        }
        let host = hostname
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .unwrap_or("node")
            .to_owned();
        match listen.first() {
            Some(a) => format!("{host}:{}", a.port()),
            None => host,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// This process only.
    Local,
    /// Shared through Redis, synced in the background.
    Redis,
}

/// What capacity rooms do while the shared store cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStoreFailure {
    /// Keep deciding on the last share and this node's own counts.
    LastShare,
    /// Admit without capacity limits.
    Open,
    /// Admit no new users (admitted users keep access).
    Closed,
}

impl OnStoreFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnStoreFailure::LastShare => "last_share",
            OnStoreFailure::Open => "open",
            OnStoreFailure::Closed => "closed",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub listen: Vec<SocketAddr>,
    pub threads: usize,
    pub pid_file: PathBuf,
    pub upgrade_sock: PathBuf,
    /// SIGTERM: stop accepting, finish in-flight requests, and exit within this time.
    pub graceful_shutdown: Duration,
    /// Tokio work stealing between the worker threads. Off, each connection stays on the
    /// thread that accepted it: its memory is freed where it was taken (so it goes back to the
    /// OS after a surge), and no cache lines move between cores.
    pub work_stealing: bool,
    /// Idle client connections are closed after this.
    pub keepalive_timeout: Duration,
    /// A request head must arrive whole within this of its first byte (and a new connection
    /// must send its first byte within it).
    pub header_timeout: Duration,
    /// Pages (`error.html`, `ratelimited.html`) for requests outside every room; `None` uses
    /// the pages built into the binary.
    pub pages: Option<PathBuf>,
    /// Every connection opens with a PROXY v1 or v2 header, believed from
    /// `identity.trusted_proxies` only.
    pub proxy_protocol: bool,
    /// TLS listeners (HTTP/2 and HTTP/1.1 by ALPN). Restart-only, like `listen`.
    pub tls_listen: Vec<SocketAddr>,
    /// Plain listeners also take HTTP/2 with prior knowledge. Restart-only.
    pub h2c: bool,
    /// Plain listeners answer 308 to the https URL, except for ACME challenges.
    pub redirect_to_https: bool,
    /// How many HTTP/2 streams a client may cancel early (`h2_reset_*`).
    pub h2_resets: ResetBudget,
    /// Requests under `/.well-known/acme-challenge/` pass every room, proof-of-work challenge
    /// and invitation gate (rate limit rules still apply), so that certificate renewals by
    /// HTTP-01 keep working while a room holds the site.
    pub bypass_acme_challenge: bool,
    /// The API's reserved path (`api_prefix`): never proxied, on every proxy listener.
    pub api_prefix: String,
    /// Origins whose pages may call the API from a browser (`"*"`: any).
    pub api_cors_origins: Vec<String>,
    /// Visitors' streams open at once on this node; past it a stream answers 503 and the page
    /// polls. 0 = no streams.
    pub max_streams: u32,
}

/// The budgets of HTTP/2 clients that reset streams they opened before the answer is complete
/// (see `crate::resets`). Reloadable: read when a reset or a request is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResetBudget {
    /// Premature resets after which a connection gets GOAWAY, once they are also more than half
    /// of its streams. 0 = no limit per connection.
    pub per_connection: u32,
    /// Premature resets a client identity may make across its connections per `window`; past
    /// it, the client is refused for `penalty`. 0 = no limit per client.
    pub per_client: u32,
    /// The per-client budget refills over this.
    pub window: Duration,
    /// How long a client that spent its budget is refused.
    pub penalty: Duration,
    /// A reset counts as premature within this of the request's start.
    pub within: Duration,
}

impl Default for ResetBudget {
    fn default() -> Self {
        ResetBudget {
            per_connection: 100,
            per_client: 200,
            window: Duration::from_secs(60),
            penalty: Duration::from_secs(60),
            within: Duration::from_secs(1),
        }
    }
}

#[derive(Clone, PartialEq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// Bearer token; required when `listen` is not a loopback address.
    pub token: Option<String>,
    /// The file the token was read from (`token_file`), watched like the config so a rotated
    /// secret applies on the next reload.
    pub token_file: Option<PathBuf>,
    /// Where operator actions are kept across restarts.
    pub state_file: PathBuf,
    /// Who may use the admin listener: the named `operators`, and the plain `token` as an
    /// operator named `admin`. Empty: nobody signs in, and operator actions are off.
    pub operators: Vec<Operator>,
    /// The append-only record of every operator action.
    pub audit_file: PathBuf,
    /// The console's session cookie is `Secure`.
    pub cookie_secure: bool,
    /// Where this node keeps one record per room per minute (`vestibule report` reads them);
    /// `None` (`history_dir = ""`): no history.
    pub history_dir: Option<PathBuf>,
    /// Days of history kept (today counts as one).
    pub history_days: u32,
    /// Bytes of history kept at most: beyond them the oldest days go first.
    pub max_history_bytes: u64,
}

/// What an operator may do on the admin listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sees everything and acts.
    Operator,
    /// Sees everything, acts on nothing.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }
}

/// One named operator: the SHA-256 of their token (the token itself is never kept), and their
/// role.
#[derive(Clone, PartialEq, Eq)]
pub struct Operator {
    pub name: String,
    pub token_sha256: [u8; 32],
    pub role: Role,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("token_file", &self.token_file)
            .field("state_file", &self.state_file)
            .field("operators", &self.operators)
            .field("audit_file", &self.audit_file)
            .field("cookie_secure", &self.cookie_secure)
            .field("history_dir", &self.history_dir)
            .field("history_days", &self.history_days)
            .field("max_history_bytes", &self.max_history_bytes)
            .finish()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamConfig {
    pub peers: Vec<PeerConfig>,
    pub tls: bool,
    /// SNI and certificate name for TLS; empty means the host name of each peer.
    pub sni: String,
    /// PEM bundle of CAs to trust for origin certificates instead of the system roots.
    pub ca_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// Probe interval; zero turns probing off (every peer counts as healthy).
    pub health_check: Duration,
    /// Idle origin connections kept for reuse, per worker thread. Restart-only.
    pub keepalive_pool_size: usize,
}

/// One `upstream.peers` entry, resolved when the config was loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    /// As written (`origin.internal:8000`).
    pub name: String,
    /// The host part of `name`, the default SNI.
    pub host: String,
    pub addrs: Vec<SocketAddr>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RoomConfig {
    pub name: String,
    pub enabled: bool,
    pub hosts: Vec<HostPattern>,
    pub paths: Vec<String>,
    pub bypass_paths: Vec<String>,
    pub bypass_cidrs: Vec<IpNet>,
    pub admission: Admission,
    pub cookie: CookieConfig,
    pub wait_status: u16,
    /// The room's page folder; `None` serves the pages built into the binary (the room names
    /// no `pages` and there is no `pages` folder beside the config).
    pub pages: Option<PathBuf>,
    /// Hold every new or waiting user; admitted users keep access.
    pub queue_all: bool,
    /// What visitors are told they are waiting for (the room's name unless set).
    pub title: String,
    /// Admit nobody new; waiting visitors see `soldout.html` and keep their place.
    pub sold_out: bool,
    /// The pages' language when `Accept-Language` names none the catalogs have.
    pub default_language: String,
    /// `shadow`: decide, set cookies and count as usual, but forward every request.
    pub mode: RoomMode,
    /// Scheduled events, in time order; they never overlap.
    pub events: Vec<EventConfig>,
    /// `autopilot = true`: admission steered by the origin's health.
    pub autopilot: Option<AutopilotConfig>,
    /// `challenge = "pow"`: a new arrival proves some work before it gets a place.
    pub challenge: Option<ChallengeConfig>,
    /// `access = "invite"`: only visitors holding an invitation may join.
    pub access: Access,
    /// The most invitations in use the room remembers at once (each until it expires): a new
    /// one beyond it is refused, a used one never forgotten early.
    pub max_invitations: usize,
    /// Invitations refused from now on (a leaked link), by id; their holders keep their places.
    pub revoked_invitations: std::collections::BTreeSet<u64>,
    /// `jwt = true`: admitted visitors also get a JWT, and a valid one is admission.
    /// `api = true`: the public queue API, queue numbers and the serving counter.
    pub api: Option<RoomApi>,
    pub jwt: Option<RoomJwt>,
    /// `enqueue = "optional"` or `"required"`: places bound to the site's accounts.
    pub enqueue: Option<RoomEnqueue>,
}

/// Who may join a room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Everyone; an invitation only chooses a lane.
    #[default]
    Open,
    /// Only visitors holding a valid invitation.
    Invite,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Open => "open",
            Access::Invite => "invite",
        }
    }
}

/// `max_invitations` unless set.
pub(crate) const DEFAULT_MAX_INVITATIONS: usize = 100_000;

/// A room's proof-of-work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChallengeConfig {
    /// Leading zero bits of SHA-256(value ":" nonce), 8-28: about `2^difficulty` hashes.
    pub difficulty: u8,
    /// How long a challenge may be answered.
    pub ttl: Duration,
    pub on_failure: OnChallengeFailure,
}

/// What a visitor whose solution fails gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnChallengeFailure {
    /// A fresh challenge.
    Retry,
    /// A waiting page whose place never moves, for as long as the failed solution is sent.
    InfiniteQueue,
}

impl OnChallengeFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnChallengeFailure::Retry => "retry",
            OnChallengeFailure::InfiniteQueue => "infinite_queue",
        }
    }
}

/// What the autopilot of a room steers toward and within.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutopilotConfig {
    /// The p95 latency of the room's origin answers to stay under.
    pub target_latency: Duration,
    /// The share of origin answers that may be 5xx.
    pub max_error_rate: f64,
    /// Bounds of what it steers: `new_users_per_minute` (capacity rooms) or `allow_percentage`
    /// (lottery rooms).
    pub min: u32,
    pub max: u32,
    /// How often it steps.
    pub interval: Duration,
    /// Lottery rooms: how long an admitted user loads the origin (`session_duration`; capacity
    /// rooms count their active users with their own).
    pub session: Duration,
}

/// Whether a room holds visitors or only shows what it would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomMode {
    Enforce,
    Shadow,
}

impl RoomMode {
    /// The `mode` label and `/status` value.
    pub fn as_str(self) -> &'static str {
        match self {
            RoomMode::Enforce => "enforce",
            RoomMode::Shadow => "shadow",
        }
    }
}

/// How a room lets people in.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// The seed pattern: wait a period, then win a lottery drawn once per token.
    Lottery {
        allow_percentage: u8,
        wait_period: Duration,
        allow_period: Duration,
        /// At 0 %: how often the `deny` page checks again.
        closed_refresh: Duration,
    },
    /// Admission follows capacity: new users per minute and total active users.
    Capacity(CapacityConfig),
}

#[derive(Clone, Debug, PartialEq)]
pub struct CapacityConfig {
    pub order: QueueOrder,
    /// 0 = no limit of that kind.
    pub new_users_per_minute: u32,
    /// 0 = no limit of that kind.
    pub total_active_users: u32,
    pub session_duration: Duration,
    pub refresh: Duration,
    /// A waiting visitor who stops checking in and comes back within this keeps their place.
    pub rejoin_grace: Duration,
    /// New arrivals get `queuefull.html` once this many wait; 0 = no limit.
    pub max_waiting_users: u32,
    /// Priority lanes, `public` first, then by name; empty: one line for everyone.
    pub lanes: Vec<Lane>,
}

/// A priority lane of a capacity room: while several lanes have visitors waiting, the free
/// slots are split by weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    pub name: std::sync::Arc<str>,
    pub weight: u32,
}

/// The most a lane may weigh against another.
pub(crate) const MAX_LANE_WEIGHT: u32 = 1_000;
/// Lanes a room may have.
pub(crate) const MAX_LANES: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOrder {
    Random,
    Fifo,
}

impl QueueOrder {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueOrder::Random => "random",
            QueueOrder::Fifo => "fifo",
        }
    }
}

impl Admission {
    /// `lottery`, `random` or `fifo`, as in the config and the JSON body.
    pub fn method(&self) -> &'static str {
        match self {
            Admission::Lottery { .. } => "lottery",
            Admission::Capacity(c) => c.order.as_str(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CookieConfig {
    pub name: String,
    pub lifetime: Duration,
    pub same_site: SameSite,
    pub secure: CookieSecure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameSite {
    Lax,
    Strict,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CookieSecure {
    /// When the request arrived over TLS (directly, or per a trusted proxy's
    /// `X-Forwarded-Proto`).
    Auto,
    Always,
    Never,
}

/// A `hosts` entry: an exact host, or `*.example.com` for any subdomain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    Suffix(String),
}

impl HostPattern {
    /// `host` must already be lowercase and without a port.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(h) => h == host,
            HostPattern::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RuleConfig {
    pub name: String,
    pub key: Vec<KeyPart>,
    pub paths: Vec<String>,
    pub methods: Vec<http::Method>,
    pub algorithm: Algorithm,
    pub scope: Scope,
    pub action: Action,
    pub bypass_cidrs: Vec<IpNet>,
    /// Keys the rule expects to track at once: sizes estimators and caps its tables.
    pub max_keys: usize,
    /// Window rules: count every cluster node's requests for a key, and honour every node's
    /// penalty box. Without a shared store it counts this node's alone.
    pub shared: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyPart {
    ClientIp,
    Host,
    Path,
    Method,
    Header(http::HeaderName),
    Cookie(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Requests estimated over a sliding window; over `quota` (requests per `window`, whether
    /// written as a rate per second or as `"N/window"`) trips the penalty box. A count per window
    /// rather than a rate per second, so `"5/10s"` is exact.
    Window {
        window: Duration,
        quota: u64,
        penalty: Duration,
    },
    /// `limit` tokens per `period`, refilled continuously (vsthrottle).
    TokenBucket {
        limit: u32,
        period: Duration,
        penalty: Duration,
    },
    /// At most `limit` requests in flight per key.
    Concurrency { limit: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    All,
    /// Only requests that would be forwarded to the origin.
    Origin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Block,
    /// Dry run: count what would be limited, never block.
    Log,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub level: log::LevelFilter,
    pub format: LogFormat,
    /// One line per request (room, decision, rule outcomes, status, upstream time).
    pub access: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Plain,
    Json,
}

/// What checking a config needs from the machine it will run on. The edge answers from the
/// real system; tests and fuzzing answer from memory.
pub trait Host {
    /// The text of a file the config names (`admin.token_file`, a peer list).
    fn read(&self, path: &Path) -> std::io::Result<String>;
    /// The bytes of a file the config names that need not be text (a room's `enqueue_key`).
    fn read_bytes(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        self.read(path).map(String::into_bytes)
    }
    /// Whether `path` is a folder (a room's default `pages/` is used only when it exists).
    fn is_dir(&self, path: &Path) -> bool;
    /// The addresses of a peer's `host:port`. A host that must not touch the network answers
    /// literal addresses only.
    fn resolve(&self, name: &str) -> std::io::Result<Vec<SocketAddr>>;
    /// Whether the cluster store's client takes `url`: `Err` says why not.
    fn check_store_url(&self, url: &str) -> Result<(), String>;
}

/// The addresses of a literal `ip:port`; a host name is an error. For hosts that must not
/// touch the network.
pub fn literal_address(name: &str) -> std::io::Result<Vec<SocketAddr>> {
    name.parse::<SocketAddr>()
        .map(|a| vec![a])
        .map_err(|_| std::io::Error::other("host names are not resolved offline"))
}

/// Hosts for tests and tools.
#[doc(hidden)]
pub mod testing {
    use super::*;

    /// A machine with no files and no resolver: literal peer addresses only, and any
    /// `redis://` or `valkey://` URL (as the edge's Redis client, built without TLS).
    pub(crate) struct Bare;

    impl Host for Bare {
        fn read(&self, path: &Path) -> std::io::Result<String> {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: no files here", path.display()),
            ))
        }

        fn is_dir(&self, _: &Path) -> bool {
            false
        }

        fn resolve(&self, name: &str) -> std::io::Result<Vec<SocketAddr>> {
            literal_address(name)
        }

        fn check_store_url(&self, url: &str) -> Result<(), String> {
            if url.starts_with("redis://") || url.starts_with("valkey://") {
                Ok(())
            } else {
                Err(format!("{url}: not a redis:// URL"))
            }
        }
    }
}

impl Config {
    /// Validates a config text; `path` labels errors and anchors relative paths, and `host`
    /// answers for the files and names the text refers to.
    pub fn parse(text: &str, path: &Path, host: &dyn Host) -> Result<Config, ConfigErrors> {
        validate::parse(text, path, host)
    }

    /// Takes the restart-only settings of `serving` (the sockets already open) and checks that
    /// the result is sound as it will run. Returns the settings the edit would change, as
    /// `(key, old, new)`, which wait for a restart.
    /// `host` reads the file again for the lines errors name.
    pub fn keep_restart_settings(
        &mut self,
        serving: &Config,
        host: &dyn Host,
    ) -> Result<Vec<(&'static str, String, String)>, ConfigErrors> {
        let pending = diff::needs_restart(serving, self);
        diff::keep_restart_settings(self, serving);
        let errors = validate::check_as_run(self, host);
        if errors.is_empty() {
            Ok(pending)
        } else {
            Err(ConfigErrors(errors))
        }
    }
}

#[cfg(test)]
mod tests;
