//! Process logging: plain or JSON lines on stderr, reloadable.
//!
//! `[log] level` and `[log] format` apply at start and on every reload. `VESTIBULE_LOG`
//! (env_logger-style filter syntax, e.g. `debug` or `info,pingora=warn`) overrides the level while it
//! is set. Access lines (target `vestibule::access`) are written when `[log] access` is true,
//! whatever the level, one per request: client, method, path (never the query string), status,
//! room, decision, each rule's outcome, origin and total time. Cookie values, keys and tokens
//! never appear in any line.
//!
//! Access lines are buffered per thread (at most [`BUFFER_LIMIT`] bytes each) and written by
//! [`flush`], which the housekeeping task calls every 100 ms, instead of one `write(2)` per
//! request and without a lock that every thread takes. Any other line flushes the buffers and
//! is written at once, so order is kept and errors are never delayed. Until the housekeeping task turns buffering on (and after it turns
//! it off at shutdown) everything is written straight through.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;

use crate::config::{LogConfig, LogFormat};
use crate::time::Timestamp;

/// The environment variable that overrides the configured level.
pub const ENV_FILTER: &str = "VESTIBULE_LOG";
/// The target of access lines.
pub const ACCESS_TARGET: &str = "vestibule::access";

struct Logger {
    level: AtomicUsize,
    json: AtomicBool,
    access: AtomicBool,
    env: Option<env_filter::Filter>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();
/// Access lines waiting to be written: one buffer per thread, so request threads never wait on
/// each other's lines (one shared buffer was a lock every request of every thread took). The
/// list is what [`flush`] writes; a thread's buffer stays in it after the thread ends.
static BUFFERS: Mutex<Vec<Arc<Mutex<Vec<u8>>>>> = Mutex::new(Vec::new());
static BUFFERING: AtomicBool = AtomicBool::new(false);
/// Buffered bytes (in one thread's buffer) that force a write.
pub const BUFFER_LIMIT: usize = 64 * 1024;

thread_local! {
    static BUFFER: Arc<Mutex<Vec<u8>>> = {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        lock(&BUFFERS).push(buffer.clone());
        buffer
    };
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes and empties a buffer: whole lines in one `write(2)`, under stderr's lock so lines of
/// different threads never interleave.
fn write_out(buffer: &mut Vec<u8>) {
    if !buffer.is_empty() {
        let _ = std::io::stderr().lock().write_all(buffer);
        buffer.clear();
    }
}

/// Writes one line: access lines may wait in this thread's buffer, anything else goes out at
/// once, after every buffered line.
fn emit(line: &[u8], access: bool) {
    if access && BUFFERING.load(Ordering::Relaxed) {
        let buffered = BUFFER.try_with(|b| {
            let mut b = lock(b);
            b.extend_from_slice(line);
            if b.len() >= BUFFER_LIMIT {
                write_out(&mut b);
            }
        });
        if buffered.is_ok() {
            return;
        }
    }
    flush();
    let _ = std::io::stderr().lock().write_all(line);
}

/// Writes whatever is buffered, every thread's.
pub fn flush() {
    let buffers: Vec<_> = lock(&BUFFERS).clone();
    for b in buffers {
        write_out(&mut lock(&b));
    }
}

/// Turns buffering of access lines on (a task will call [`flush`]) or off (flushing).
pub fn set_buffering(on: bool) {
    BUFFERING.store(on, Ordering::Relaxed);
    if !on {
        flush();
    }
}
/// 0 plain, 1 JSON: read by `access` without touching the logger.
static FORMAT: AtomicU8 = AtomicU8::new(0);

fn level_index(l: log::LevelFilter) -> usize {
    l as usize
}

impl Logger {
    fn level(&self) -> log::LevelFilter {
        match self.level.load(Ordering::Relaxed) {
            0 => log::LevelFilter::Off,
            1 => log::LevelFilter::Error,
            2 => log::LevelFilter::Warn,
            3 => log::LevelFilter::Info,
            4 => log::LevelFilter::Debug,
            _ => log::LevelFilter::Trace,
        }
    }
}

impl log::Log for Logger {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        if meta.target() == ACCESS_TARGET {
            return self.access.load(Ordering::Relaxed);
        }
        if let Some(env) = &self.env {
            return env.enabled(meta);
        }
        // Pingora reports every pooled upstream connection at info.
        if meta.target().starts_with("pingora_core::connectors") && meta.level() > log::Level::Warn
        {
            return false;
        }
        meta.level() <= self.level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let access = record.target() == ACCESS_TARGET;
        let line = if access {
            // Access lines arrive formatted (see `AccessLine`).
            format!("{}\n", record.args())
        } else if self.json.load(Ordering::Relaxed) {
            let line = serde_json::json!({
                "ts": Timestamp::now().rfc3339(),
                "level": record.level().as_str(),
                "target": record.target(),
                "msg": record.args().to_string(),
            });
            format!("{line}\n")
        } else {
            format!(
                "{} {:<5} {}: {}\n",
                Timestamp::now().rfc3339(),
                record.level(),
                record.target(),
                record.args()
            )
        };
        emit(line.as_bytes(), access);
    }

    fn flush(&self) {
        flush();
    }
}

/// Installs the logger (once) and applies `config`.
pub fn init(config: &LogConfig) {
    let logger = LOGGER.get_or_init(|| Logger {
        level: AtomicUsize::new(level_index(config.level)),
        json: AtomicBool::new(false),
        access: AtomicBool::new(false),
        env: std::env::var(ENV_FILTER)
            .ok()
            .map(|spec| env_filter::Builder::new().parse(&spec).build()),
    });
    let _ = log::set_logger(logger);
    apply(config);
}

/// Applies a (reloaded) `[log]` section.
pub fn apply(config: &LogConfig) {
    if let Some(l) = LOGGER.get() {
        l.level.store(level_index(config.level), Ordering::Relaxed);
        l.json
            .store(config.format == LogFormat::Json, Ordering::Relaxed);
        l.access.store(config.access, Ordering::Relaxed);
        // Let the `log` macros skip what no one would print (Pingora logs at debug on every
        // request); access lines are info.
        let wanted = match &l.env {
            Some(env) => env.filter(),
            None => config.level,
        };
        let access = if config.access {
            log::LevelFilter::Info
        } else {
            log::LevelFilter::Off
        };
        log::set_max_level(wanted.max(access));
    }
    FORMAT.store(
        u8::from(config.format == LogFormat::Json),
        Ordering::Relaxed,
    );
}

/// One request, as the access log sees it.
#[derive(Debug, Serialize)]
pub struct AccessLine<'a> {
    pub client: String,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub room: Option<&'a str>,
    pub decision: Option<&'a str>,
    /// `rule=outcome` for every rule checked.
    pub rules: Vec<(&'a str, &'a str)>,
    pub upstream: Option<String>,
    pub upstream_ms: Option<f64>,
    pub ms: f64,
}

impl AccessLine<'_> {
    /// The line in the current format.
    pub fn format(&self) -> String {
        if FORMAT.load(Ordering::Relaxed) == 1 {
            let rules: serde_json::Map<String, serde_json::Value> = self
                .rules
                .iter()
                .map(|(r, o)| ((*r).to_owned(), serde_json::Value::from(*o)))
                .collect();
            serde_json::json!({
                "ts": Timestamp::now().rfc3339(),
                "level": "INFO",
                "target": ACCESS_TARGET,
                "client": self.client,
                "method": self.method,
                "path": self.path,
                "status": self.status,
                "room": self.room,
                "decision": self.decision,
                "rules": rules,
                "upstream": self.upstream,
                "upstream_ms": self.upstream_ms,
                "ms": self.ms,
            })
            .to_string()
        } else {
            let rules: Vec<String> = self.rules.iter().map(|(r, o)| format!("{r}:{o}")).collect();
            format!(
                "{} access {} \"{} {}\" {} room={} decision={} rules={} upstream={} upstream_ms={} ms={:.1}",
                Timestamp::now().rfc3339(),
                self.client,
                self.method,
                self.path.escape_debug(),
                self.status,
                self.room.unwrap_or("-"),
                self.decision.unwrap_or("-"),
                if rules.is_empty() { "-".to_owned() } else { rules.join(",") },
                self.upstream.as_deref().unwrap_or("-"),
                self.upstream_ms.map_or("-".to_owned(), |ms| format!("{ms:.1}")),
                self.ms
            )
        }
    }

    /// Writes the line (when access logging is on).
    pub fn write(&self) {
        if log::log_enabled!(target: ACCESS_TARGET, log::Level::Info) {
            log::info!(target: ACCESS_TARGET, "{}", self.format());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_lines_in_both_formats() {
        let line = AccessLine {
            client: "192.0.2.1".into(),
            method: "GET",
            path: "/a\"b",
            status: 200,
            room: Some("default"),
            decision: Some("allow"),
            rules: vec![("per-ip", "pass")],
            upstream: Some("127.0.0.1:8000".into()),
            upstream_ms: Some(1.25),
            ms: 2.0,
        };
        FORMAT.store(0, Ordering::Relaxed);
        let plain = line.format();
        assert!(plain.contains(" access 192.0.2.1 \"GET /a\\\"b\" 200 room=default decision=allow rules=per-ip:pass upstream=127.0.0.1:8000 upstream_ms=1.2"), "{plain}");
        FORMAT.store(1, Ordering::Relaxed);
        let v: serde_json::Value = serde_json::from_str(&line.format()).unwrap();
        assert_eq!(v["rules"]["per-ip"], "pass");
        assert_eq!(v["status"], 200);
        FORMAT.store(0, Ordering::Relaxed);
    }
}
