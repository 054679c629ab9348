//! `[[events.sink]]`: where vestibule sends its events, and which ones. The edge's
//! `sinks` module delivers them; this is only what the file said, checked.

use std::path::PathBuf;
use std::time::Duration;

/// Every event type vestibule emits, as `types` names them (the CloudEvents `type` is
/// `vestibule.` and the name).
pub const EVENT_TYPES: &[&str] = &[
    "admission.granted",
    "session.updated",
    "serving.moved",
    "event.state_changed",
    "operator.action",
    "room.minute",
    "store.state_changed",
];

/// One `[[events.sink]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SinkConfig {
    /// Unique among the sinks: the `sink` label of the metrics, and the spool's default folder.
    pub name: String,
    pub destination: Destination,
    /// Event types sent (names from [`EVENT_TYPES`]); empty: all.
    pub types: Vec<String>,
    /// Rooms whose events are sent; empty: all, and the events of no room.
    pub rooms: Vec<String>,
    /// `admission.granted` carries the visitor's address.
    pub include_client_ip: bool,
    /// The sink's on-disk spool.
    pub spool_dir: PathBuf,
    /// Beyond this the spool's oldest events are dropped.
    pub max_spool_bytes: u64,
    /// An event not delivered within this of its first attempt is dropped.
    pub max_retry_age: Duration,
}

impl SinkConfig {
    /// Whether an event of `kind` (a name from [`EVENT_TYPES`]) about `room` goes to this sink.
    pub fn wants(&self, kind: &str, room: Option<&str>) -> bool {
        let type_ok = self.types.is_empty() || self.types.iter().any(|t| t == kind);
        let room_ok =
            self.rooms.is_empty() || room.is_some_and(|r| self.rooms.iter().any(|x| x == r));
        type_ok && room_ok
    }

    /// `webhook`, `redis_stream` or `file`.
    pub fn kind(&self) -> &'static str {
        match self.destination {
            Destination::Webhook { .. } => "webhook",
            Destination::RedisStream { .. } => "redis_stream",
            Destination::File { .. } => "file",
        }
    }
}

/// Where a sink's events go. `Debug` shows URLs without their credentials.
#[derive(Clone, PartialEq)]
pub enum Destination {
    /// One signed POST per event.
    Webhook {
        /// An `http://` or `https://` URL.
        url: String,
        /// The HMAC key of `Vestibule-Signature`, read from `secret_file`.
        secret: SinkSecret,
        secret_file: PathBuf,
    },
    /// XADD to a Redis stream.
    RedisStream {
        stream: String,
        /// `MAXLEN ~`.
        max_len: u64,
        /// `None`: the cluster's Redis (the first of `cluster.redis`).
        redis: Option<String>,
    },
    /// JSON lines in a file rotated by size.
    File { path: PathBuf, max_file_bytes: u64 },
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Webhook {
                url,
                secret,
                secret_file,
            } => f
                .debug_struct("Webhook")
                .field("url", &super::url_origin(url))
                .field("secret", secret)
                .field("secret_file", secret_file)
                .finish(),
            Destination::RedisStream {
                stream,
                max_len,
                redis,
            } => f
                .debug_struct("RedisStream")
                .field("stream", stream)
                .field("max_len", max_len)
                .field("redis", &redis.as_deref().map(super::redact_url))
                .finish(),
            Destination::File {
                path,
                max_file_bytes,
            } => f
                .debug_struct("File")
                .field("path", path)
                .field("max_file_bytes", max_file_bytes)
                .finish(),
        }
    }
}

/// A webhook's HMAC key. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct SinkSecret(pub Vec<u8>);

impl std::fmt::Debug for SinkSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SinkSecret(***)")
    }
}

/// The least `max_spool_bytes`: a few segments.
pub(crate) const MIN_SPOOL_BYTES: u64 = 64 << 10;
/// The least `max_file_bytes`.
pub(crate) const MIN_FILE_BYTES: u64 = 4 << 10;
/// The least length of a webhook secret, in bytes.
pub(crate) const MIN_SECRET_BYTES: usize = 16;
