//! The file schema, exactly as written in TOML. Nothing here is trusted yet: `validate/` turns
//! it into the canonical [`super::Config`].
//!
//! Unknown keys are collected while parsing (`serde_ignored`, in `validate/`) and each is an
//! error, so a typo is never a silent no-op, and every one of them is reported in one run, next
//! to whatever else is wrong with the file. Keys that
//! only apply to one choice (a `period` only means something to a `token_bucket` rule) are
//! `Option`s, so validation can tell "written" from "defaulted" and say why a key does not apply.

use std::time::Duration;

use serde::Deserialize;

use super::ResetBudget;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct FileConfig {
    #[serde(default)]
    pub server: ServerFile,
    #[serde(default)]
    pub admin: AdminFile,
    #[serde(default)]
    pub identity: IdentityFile,
    pub upstream: Option<UpstreamFile>,
    #[serde(default)]
    pub keys: KeysFile,
    #[serde(default)]
    pub room: Vec<RoomFile>,
    #[serde(default)]
    pub rate_limit: Vec<RateLimitFile>,
    #[serde(default)]
    pub log: LogFile,
    #[serde(default)]
    pub cluster: ClusterFile,
    #[serde(default)]
    pub tls: TlsFile,
    #[serde(default)]
    pub jwt: JwtFile,
    #[serde(default)]
    pub oidc: OidcFile,
    #[serde(default)]
    pub events: EventsFile,
}

/// `[events]`: where events go.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct EventsFile {
    pub sink: Vec<SinkFile>,
}

/// One `[[events.sink]]`. Keys of one kind only are `Option`s, so validation can say that a
/// key written for another kind does not apply.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SinkFile {
    pub name: Option<String>,
    pub kind: Option<String>,
    pub url: Option<String>,
    pub secret_file: Option<String>,
    pub stream: Option<String>,
    pub max_len: Option<i64>,
    pub redis: Option<String>,
    pub path: Option<String>,
    pub max_file_bytes: Option<String>,
    #[serde(default)]
    pub types: Vec<String>,
    #[serde(default)]
    pub rooms: Vec<String>,
    #[serde(default)]
    pub include_client_ip: bool,
    #[serde(default)]
    pub spool_dir: String,
    pub max_spool_bytes: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub max_retry_age: Option<Duration>,
}

/// `[oidc]`: the OpenID Provider for one room.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OidcFile {
    pub enabled: bool,
    pub issuer: Option<String>,
    pub room: Option<String>,
    pub clients: Vec<OidcClientFile>,
}

/// One `oidc.clients` entry: a relying party.
#[derive(Deserialize)]
pub(crate) struct OidcClientFile {
    pub id: String,
    pub secret: String,
    #[serde(default)]
    pub redirect_uris: Vec<String>,
}

impl std::fmt::Debug for OidcClientFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcClientFile")
            .field("id", &self.id)
            .field("redirect_uris", &self.redirect_uris)
            .finish_non_exhaustive()
    }
}

/// `[jwt]`: the JWTs admitted visitors get.
#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct JwtFile {
    pub issuer: String,
}

impl Default for JwtFile {
    fn default() -> Self {
        JwtFile {
            issuer: "vestibule".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct TlsFile {
    pub certificates: Vec<CertificateFile>,
    pub min_version: String,
}

impl Default for TlsFile {
    fn default() -> Self {
        TlsFile {
            certificates: Vec::new(),
            min_version: "1.2".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct CertificateFile {
    pub cert: String,
    pub key: String,
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct ClusterFile {
    pub store: String,
    pub redis: Vec<String>,
    pub node: String,
    #[serde(with = "humantime_serde")]
    pub sync_interval: Duration,
    pub on_store_failure: String,
    pub key_prefix: String,
}

impl Default for ClusterFile {
    fn default() -> Self {
        ClusterFile {
            store: "local".into(),
            redis: vec!["redis://127.0.0.1:6379/0".into()],
            node: String::new(),
            sync_interval: Duration::from_secs(1),
            on_store_failure: "last_share".into(),
            key_prefix: "vestibule:".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct ServerFile {
    pub listen: Vec<String>,
    pub threads: usize,
    pub pid_file: String,
    pub upgrade_sock: String,
    #[serde(with = "humantime_serde")]
    pub graceful_shutdown: Duration,
    pub work_stealing: bool,
    #[serde(with = "humantime_serde")]
    pub keepalive_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    /// Pages for requests outside every room (502 and 429); built-in pages when unset.
    pub pages: Option<String>,
    pub proxy_protocol: bool,
    pub tls_listen: Vec<String>,
    pub h2c: bool,
    pub redirect_to_https: bool,
    pub h2_reset_per_connection: i64,
    pub h2_reset_per_client: i64,
    #[serde(with = "humantime_serde")]
    pub h2_reset_window: Duration,
    #[serde(with = "humantime_serde")]
    pub h2_reset_penalty: Duration,
    #[serde(with = "humantime_serde")]
    pub h2_reset_within: Duration,
    pub bypass_acme_challenge: bool,
    /// The API's reserved path on every proxy listener.
    pub api_prefix: String,
    pub api_cors_origins: Vec<String>,
    /// Visitors' streams (`{api_prefix}/rooms/<room>/stream`) open at once on this node.
    pub max_streams: u32,
}

impl Default for ServerFile {
    fn default() -> Self {
        ServerFile {
            listen: vec!["0.0.0.0:8080".into()],
            threads: 2,
            pid_file: "/tmp/vestibule.pid".into(),
            upgrade_sock: "/tmp/vestibule_upgrade.sock".into(),
            graceful_shutdown: Duration::from_secs(5),
            work_stealing: false,
            keepalive_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            pages: None,
            proxy_protocol: false,
            tls_listen: Vec::new(),
            h2c: false,
            redirect_to_https: false,
            h2_reset_per_connection: i64::from(ResetBudget::default().per_connection),
            h2_reset_per_client: i64::from(ResetBudget::default().per_client),
            h2_reset_window: ResetBudget::default().window,
            h2_reset_penalty: ResetBudget::default().penalty,
            h2_reset_within: ResetBudget::default().within,
            bypass_acme_challenge: true,
            api_prefix: "/.vestibule".into(),
            api_cors_origins: Vec::new(),
            max_streams: 10_000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct AdminFile {
    pub listen: String,
    pub token: String,
    pub token_file: String,
    pub state_file: String,
    pub operators: Vec<OperatorFile>,
    pub audit_file: String,
    pub cookie_secure: bool,
    pub history_dir: String,
    pub history_days: u32,
    pub max_history_bytes: String,
}

/// One `admin.operators` entry: a named person and the SHA-256 of their token.
#[derive(Debug, Deserialize)]
pub(crate) struct OperatorFile {
    pub name: String,
    pub token_sha256: String,
    #[serde(default = "operator_role")]
    pub role: String,
}

fn operator_role() -> String {
    "operator".into()
}

impl Default for AdminFile {
    fn default() -> Self {
        AdminFile {
            listen: "127.0.0.1:9901".into(),
            token: String::new(),
            token_file: String::new(),
            state_file: "state/overrides.json".into(),
            operators: Vec::new(),
            audit_file: "state/audit.jsonl".into(),
            cookie_secure: false,
            history_dir: "state/history".into(),
            history_days: 30,
            max_history_bytes: "1GiB".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct IdentityFile {
    pub source: String,
    pub header: String,
    pub ipv6_prefix: u8,
    pub trusted_proxies: Vec<String>,
}

impl Default for IdentityFile {
    fn default() -> Self {
        IdentityFile {
            source: "client_ip".into(),
            header: "auth-user-id".into(),
            ipv6_prefix: 64,
            trusted_proxies: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct UpstreamFile {
    pub peers: Vec<String>,
    #[serde(default)]
    pub tls: bool,
    #[serde(default)]
    pub sni: String,
    #[serde(default)]
    pub ca_file: String,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(default = "default_read_timeout", with = "humantime_serde")]
    pub read_timeout: Duration,
    #[serde(default = "default_health_check", with = "humantime_serde")]
    pub health_check: Duration,
    #[serde(default = "default_keepalive_pool_size")]
    pub keepalive_pool_size: usize,
}

fn default_keepalive_pool_size() -> usize {
    1024
}

fn default_connect_timeout() -> Duration {
    super::DEFAULT_CONNECT_TIMEOUT
}
fn default_read_timeout() -> Duration {
    super::DEFAULT_READ_TIMEOUT
}
fn default_health_check() -> Duration {
    Duration::from_secs(5)
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct KeysFile {
    pub file: String,
}

impl Default for KeysFile {
    fn default() -> Self {
        KeysFile {
            file: "keys.toml".into(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RoomFile {
    pub name: Option<String>,
    pub enabled: Option<bool>,
    pub hosts: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    pub bypass_paths: Option<Vec<String>>,
    pub bypass_cidrs: Option<Vec<String>>,
    pub admission: Option<String>,
    pub allow_percentage: Option<i64>,
    #[serde(default, with = "humantime_serde")]
    pub wait_period: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub allow_period: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub closed_refresh: Option<Duration>,
    pub cookie_name: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub cookie_lifetime: Option<Duration>,
    pub cookie_same_site: Option<String>,
    pub cookie_secure: Option<String>,
    pub wait_status: Option<u16>,
    pub pages: Option<String>,
    pub new_users_per_minute: Option<i64>,
    pub total_active_users: Option<i64>,
    #[serde(default, with = "humantime_serde")]
    pub session_duration: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub refresh: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub rejoin_grace: Option<Duration>,
    pub queue_all: Option<bool>,
    pub title: Option<String>,
    pub max_waiting_users: Option<i64>,
    pub sold_out: Option<bool>,
    pub default_language: Option<String>,
    pub mode: Option<String>,
    /// The autopilot.
    pub autopilot: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    pub autopilot_target_latency: Option<Duration>,
    pub autopilot_max_error_rate: Option<f64>,
    pub autopilot_min: Option<i64>,
    pub autopilot_max: Option<i64>,
    #[serde(default, with = "humantime_serde")]
    pub autopilot_interval: Option<Duration>,
    /// Proof-of-work before a place in line.
    pub challenge: Option<String>,
    pub challenge_difficulty: Option<i64>,
    #[serde(default, with = "humantime_serde")]
    pub challenge_ttl: Option<Duration>,
    pub on_challenge_failure: Option<String>,
    /// Who may join: `open` or `invite`.
    pub access: Option<String>,
    /// Invitations in use a room remembers at once.
    pub max_invitations: Option<i64>,
    /// Invitations no longer taken: their ids, or whole codes.
    pub revoked_invitations: Option<Vec<String>>,
    /// Priority lanes: lane name → weight in the split of the free slots.
    pub lanes: Option<std::collections::BTreeMap<String, i64>>,
    /// The room's public queue API (queue numbers, the serving counter).
    pub api: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    pub queue_position_expiry: Option<Duration>,
    /// Admitted visitors also get a JWT.
    pub jwt: Option<bool>,
    pub jwt_audience: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub jwt_validity: Option<Duration>,
    /// Enqueue tokens: `off`, `optional` or `required`.
    pub enqueue: Option<String>,
    /// The site's key for enqueue tokens: an HS256 secret file or a public key PEM.
    pub enqueue_key: Option<String>,
    /// `[[room.event]]`: scheduled events.
    #[serde(default)]
    pub event: Vec<EventFile>,
}

/// One `[[room.event]]`. Times are RFC 3339 text (or TOML date-times) with a zone.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct EventFile {
    pub name: Option<String>,
    pub prequeue_start: Option<TimeText>,
    pub start: Option<TimeText>,
    pub end: Option<TimeText>,
    pub shuffle_at_start: Option<bool>,
    /// `keyed` (the default) or `verifiable`.
    pub draw: Option<String>,
    pub pages: Option<String>,
    pub new_users_per_minute: Option<i64>,
    pub total_active_users: Option<i64>,
    #[serde(default, with = "humantime_serde")]
    pub session_duration: Option<Duration>,
    pub allow_percentage: Option<i64>,
    pub admission: Option<String>,
    pub title: Option<String>,
}

/// A time as written: quoted RFC 3339 text, or a TOML date-time (which may lack a zone, and is
/// then refused by validation like text without one).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub(crate) enum TimeText {
    Text(String),
    Toml(toml::value::Datetime),
}

impl TimeText {
    pub fn text(&self) -> String {
        match self {
            TimeText::Text(s) => s.clone(),
            TimeText::Toml(d) => d.to_string(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RateLimitFile {
    pub name: Option<String>,
    pub key: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    pub methods: Option<Vec<String>>,
    pub algorithm: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub window: Option<Duration>,
    pub limit: Option<LimitText>,
    #[serde(default, with = "humantime_serde")]
    pub period: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub penalty: Option<Duration>,
    pub scope: Option<String>,
    pub action: Option<String>,
    pub bypass_cidrs: Option<Vec<String>>,
    pub max_keys: Option<i64>,
    pub shared: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(default)]
pub(crate) struct LogFile {
    pub level: String,
    pub format: String,
    pub access: bool,
}

impl Default for LogFile {
    fn default() -> Self {
        LogFile {
            level: "info".into(),
            format: "plain".into(),
            access: true,
        }
    }
}

/// A rule's `limit` as written: a number, or a rate such as `"5/10s"` (requests per duration),
/// which also says the duration the number counts over, so no other key has to.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LimitText {
    Count(i64),
    Rate(String),
}

impl<'de> Deserialize<'de> for LimitText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = LimitText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or a rate such as \"5/10s\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<LimitText, E> {
                Ok(LimitText::Count(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<LimitText, E> {
                Ok(LimitText::Count(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LimitText, E> {
                Ok(LimitText::Rate(v.to_owned()))
            }
        }
        d.deserialize_any(Visit)
    }
}
