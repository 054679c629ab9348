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
//! is written at once, so order is kept and errors are never delayed. Until the housekeeping
//! task turns buffering on (and after it turns it off at shutdown) everything is written
//! straight through.
//!
//! An access line does not go through the `log` crate: [`AccessLine::write`] formats it straight
//! into its thread's buffer (the timestamp's text is made once a second per thread, numbers by
//! `itoa`), so a line costs a few hundred instructions and no allocation.

use std::cell::Cell;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::config::{LogConfig, LogFormat};
use crate::identity::{write_ipv4, IPV4_TEXT_MAX};
use crate::time::Timestamp;

/// The environment variable that overrides the configured level.
pub(crate) const ENV_FILTER: &str = "VESTIBULE_LOG";
/// The target of access lines.
pub(crate) const ACCESS_TARGET: &str = "vestibule::access";

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
pub(crate) const BUFFER_LIMIT: usize = 64 * 1024;

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
pub(crate) fn set_buffering(on: bool) {
    BUFFERING.store(on, Ordering::Relaxed);
    if !on {
        flush();
    }
}
/// 0 plain, 1 JSON: read by `access` without touching the logger.
static FORMAT: AtomicU8 = AtomicU8::new(0);
/// `[log] access`: read by [`AccessLine::write`] on every request, without the `log` crate.
static ACCESS: AtomicBool = AtomicBool::new(false);

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
            // `AccessLine::write` bypasses the logger; a record logged to the access target by
            // other code is written as it came.
            format!("{}\n", record.args())
        } else if self.json.load(Ordering::Relaxed) {
            let line = serde_json::json!({
                "ts": crate::time::now().rfc3339(),
                "level": record.level().as_str(),
                "target": record.target(),
                "msg": record.args().to_string(),
            });
            format!("{line}\n")
        } else {
            format!(
                "{} {:<5} {}: {}\n",
                crate::time::now().rfc3339(),
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
        // request). Access lines do not go through them.
        let wanted = match &l.env {
            Some(env) => env.filter(),
            None => config.level,
        };
        log::set_max_level(wanted);
    }
    ACCESS.store(config.access, Ordering::Relaxed);
    FORMAT.store(
        u8::from(config.format == LogFormat::Json),
        Ordering::Relaxed,
    );
}

/// One request, as the access log sees it.
#[derive(Debug)]
pub struct AccessLine<'a> {
    /// The client (after `trusted_proxies`), when known.
    pub client: Option<IpAddr>,
    pub method: &'a str,
    /// The path, never the query string.
    pub path: &'a str,
    pub status: u16,
    pub room: Option<&'a str>,
    pub decision: Option<&'a str>,
    /// `rule=outcome` for every rule checked, in the order they were checked.
    pub rules: &'a [(&'a str, &'a str)],
    /// The last origin tried.
    pub upstream: Option<SocketAddr>,
    pub upstream_ms: Option<f64>,
    pub ms: f64,
}

impl AccessLine<'_> {
    /// The line in the current format, with its newline.
    pub fn format(&self) -> String {
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        self.write_to(&mut line);
        // Only ASCII and the UTF-8 of `&str` fields goes in.
        String::from_utf8(line).unwrap_or_default()
    }

    /// Appends the line, in the current format and with its newline, to `out`.
    ///
    /// The whole line is written in place: no `log::Record`, no `format!`, no allocation once
    /// `out` has grown to a line's size (the thread's buffer has). Numbers go through `itoa`, the
    /// timestamp is this thread's text of the current second.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        let format = if FORMAT.load(Ordering::Relaxed) == 1 {
            LogFormat::Json
        } else {
            LogFormat::Plain
        };
        self.write_as(out, format);
    }

    /// Appends the line in `format`, with its newline, to `out`.
    pub fn write_as(&self, out: &mut Vec<u8>, format: LogFormat) {
        match format {
            LogFormat::Json => self.write_json(out),
            LogFormat::Plain => self.write_plain(out),
        }
        out.push(b'\n');
    }

    /// `<ts> access <client> "<method> <path>" <status> room=.. decision=.. rules=a:pass,b:limited
    /// upstream=.. upstream_ms=.. ms=..`; a missing value is `-`, the path is escaped as Rust's
    /// `escape_debug` does (quotes, backslashes and control characters).
    fn write_plain(&self, out: &mut Vec<u8>) {
        write_timestamp(out);
        out.extend_from_slice(b" access ");
        match self.client {
            Some(ip) => write_ip(out, ip),
            None => out.push(b'-'),
        }
        out.extend_from_slice(b" \"");
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        write_escaped_path(out, self.path);
        out.extend_from_slice(b"\" ");
        out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
        out.extend_from_slice(b" room=");
        out.extend_from_slice(self.room.unwrap_or("-").as_bytes());
        out.extend_from_slice(b" decision=");
        out.extend_from_slice(self.decision.unwrap_or("-").as_bytes());
        out.extend_from_slice(b" rules=");
        if self.rules.is_empty() {
            out.push(b'-');
        }
        for (i, (rule, outcome)) in self.rules.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(rule.as_bytes());
            out.push(b':');
            out.extend_from_slice(outcome.as_bytes());
        }
        out.extend_from_slice(b" upstream=");
        match self.upstream {
            Some(addr) => write_socket_addr(out, addr),
            None => out.push(b'-'),
        }
        out.extend_from_slice(b" upstream_ms=");
        match self.upstream_ms {
            Some(ms) => write_tenths(out, ms),
            None => out.push(b'-'),
        }
        out.extend_from_slice(b" ms=");
        write_tenths(out, self.ms);
    }

    /// One JSON object: the fields of the plain line, plus `ts`, `level` and `target`; strings
    /// escaped and floats written by serde_json, so every value reads back as it was.
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"ts\":\"");
        write_timestamp(out);
        out.extend_from_slice(b"\",\"level\":\"INFO\",\"target\":\"");
        out.extend_from_slice(ACCESS_TARGET.as_bytes());
        out.extend_from_slice(b"\",\"client\":");
        match self.client {
            Some(ip) => {
                out.push(b'"');
                write_ip(out, ip);
                out.push(b'"');
            }
            None => out.extend_from_slice(b"\"-\""),
        }
        out.extend_from_slice(b",\"method\":");
        write_json_str(out, self.method);
        out.extend_from_slice(b",\"path\":");
        write_json_str(out, self.path);
        out.extend_from_slice(b",\"status\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
        out.extend_from_slice(b",\"room\":");
        write_json_opt_str(out, self.room);
        out.extend_from_slice(b",\"decision\":");
        write_json_opt_str(out, self.decision);
        out.extend_from_slice(b",\"rules\":{");
        for (i, (rule, outcome)) in self.rules.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_str(out, rule);
            out.push(b':');
            write_json_str(out, outcome);
        }
        out.extend_from_slice(b"},\"upstream\":");
        match self.upstream {
            Some(addr) => {
                out.push(b'"');
                write_socket_addr(out, addr);
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"upstream_ms\":");
        match self.upstream_ms {
            Some(ms) => write_json_f64(out, ms),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"ms\":");
        write_json_f64(out, self.ms);
        out.push(b'}');
    }

    /// Writes the line when access logging is on: into this thread's buffer while the
    /// housekeeping task flushes them, else straight to stderr after whatever is buffered.
    pub fn write(&self) {
        if !ACCESS.load(Ordering::Relaxed) {
            return;
        }
        if BUFFERING.load(Ordering::Relaxed) {
            let buffered = BUFFER.try_with(|b| {
                let mut b = lock(b);
                self.write_to(&mut b);
                if b.len() >= BUFFER_LIMIT {
                    write_out(&mut b);
                }
            });
            if buffered.is_ok() {
                return;
            }
        }
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        self.write_to(&mut line);
        emit(&line, false);
    }
}

/// Room for a typical line, so formatting one outside the buffer allocates once.
const LINE_CAPACITY: usize = 256;

thread_local! {
    /// The second last written by this thread, and its RFC 3339 text: the timestamp is formatted
    /// once a second per thread, not once a line.
    static SECOND: Cell<(u64, [u8; TIMESTAMP_LEN])> = const { Cell::new((u64::MAX, [0; TIMESTAMP_LEN])) };
}

/// `2026-11-22T09:23:26Z`: RFC 3339 to the second, as `Timestamp::rfc3339` writes it.
const TIMESTAMP_LEN: usize = 20;

fn write_timestamp(out: &mut Vec<u8>) {
    let now = crate::time::now();
    let secs = now.secs();
    let (cached, mut text) = SECOND.get();
    if cached != secs {
        let formatted = Timestamp::from_secs(secs).rfc3339();
        // Years past 9999 would be longer: write those as they come, uncached.
        if formatted.len() != TIMESTAMP_LEN {
            out.extend_from_slice(formatted.as_bytes());
            return;
        }
        text.copy_from_slice(formatted.as_bytes());
        SECOND.set((secs, text));
    }
    out.extend_from_slice(&text);
}

fn write_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            out.extend_from_slice(write_ipv4(v4, &mut [0; IPV4_TEXT_MAX]));
        }
        // Rare enough for the formatting machinery.
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

fn write_socket_addr(out: &mut Vec<u8>, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(v4) => {
            out.extend_from_slice(write_ipv4(*v4.ip(), &mut [0; IPV4_TEXT_MAX]));
            out.push(b':');
            out.extend_from_slice(itoa::Buffer::new().format(v4.port()).as_bytes());
        }
        SocketAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// The path as `str::escape_debug` writes it. Printable ASCII other than `"`, `'` and `\\` is
/// itself, which is every byte of an ordinary path: those are copied as they are.
fn write_escaped_path(out: &mut Vec<u8>, path: &str) {
    if path
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && !matches!(b, b'"' | b'\'' | b'\\'))
    {
        out.extend_from_slice(path.as_bytes());
    } else {
        let _ = write!(out, "{}", path.escape_debug());
    }
}

/// Milliseconds to one decimal (`12.4`), exactly as `{:.1}` writes them.
fn write_tenths(out: &mut Vec<u8>, ms: f64) {
    let tenths = ms * 10.0;
    // Negative, huge and non-numbers go to the formatting machinery.
    if !(0.0..1e12).contains(&tenths) {
        let _ = write!(out, "{ms:.1}");
        return;
    }
    // Casts, not floor and round: those are library calls on baseline x86-64.
    let whole = tenths as u64;
    let fraction = tenths - whole as f64;
    // Near a tie, the product's rounding may hide which side of it `ms` lies on, and `{:.1}`
    // rounds the exact value (ties to even): let it decide. Anything else is at least 0.001
    // tenth from a tie, far beyond the product's error below 10^12.
    if (fraction - 0.5).abs() < 1e-3 {
        let _ = write!(out, "{ms:.1}");
        return;
    }
    let tenths = whole + u64::from(fraction > 0.5);
    out.extend_from_slice(itoa::Buffer::new().format(tenths / 10).as_bytes());
    out.push(b'.');
    out.push(b'0' + (tenths % 10) as u8);
}

fn write_json_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn write_json_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => write_json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_json_f64(out: &mut Vec<u8>, v: f64) {
    // serde_json writes a non-finite float as null, as it did for this line.
    let _ = serde_json::to_writer(&mut *out, &v);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line as it was written through `format!` and `serde_json::json!` before it was
    /// written in place: the fields and escaping a new writer must keep.
    fn reference(line: &AccessLine, json: bool) -> String {
        let client = line
            .client
            .map_or_else(|| "-".to_owned(), |ip| ip.to_string());
        let upstream = line.upstream.map(|a| a.to_string());
        if json {
            let rules: serde_json::Map<String, serde_json::Value> = line
                .rules
                .iter()
                .map(|(r, o)| ((*r).to_owned(), serde_json::Value::from(*o)))
                .collect();
            serde_json::json!({
                "ts": crate::time::now().rfc3339(),
                "level": "INFO",
                "target": ACCESS_TARGET,
                "client": client,
                "method": line.method,
                "path": line.path,
                "status": line.status,
                "room": line.room,
                "decision": line.decision,
                "rules": rules,
                "upstream": upstream,
                "upstream_ms": line.upstream_ms,
                "ms": line.ms,
            })
            .to_string()
        } else {
            let rules: Vec<String> = line.rules.iter().map(|(r, o)| format!("{r}:{o}")).collect();
            format!(
                "{} access {} \"{} {}\" {} room={} decision={} rules={} upstream={} upstream_ms={} ms={:.1}",
                crate::time::now().rfc3339(),
                client,
                line.method,
                line.path.escape_debug(),
                line.status,
                line.room.unwrap_or("-"),
                line.decision.unwrap_or("-"),
                if rules.is_empty() { "-".to_owned() } else { rules.join(",") },
                upstream.as_deref().unwrap_or("-"),
                line.upstream_ms.map_or("-".to_owned(), |ms| format!("{ms:.1}")),
                line.ms
            )
        }
    }

    /// Everything after the timestamp (two calls may straddle a second).
    fn after_ts(line: &str) -> &str {
        line.split_once(' ').map_or(line, |(_, rest)| rest)
    }

    fn without_ts(line: &str) -> serde_json::Value {
        let mut v: serde_json::Value = serde_json::from_str(line).expect(line);
        let ts = v["ts"].take();
        let ts = ts.as_str().expect("a ts string");
        assert_eq!(ts.len(), TIMESTAMP_LEN, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
        v
    }

    #[test]
    fn lines_keep_their_fields_and_escaping() {
        let one = [("per-ip", "pass")];
        let three = [
            ("per-ip", "pass"),
            ("per-path", "limited"),
            ("slots", "dry_run"),
        ];
        let paths = [
            "/",
            "/checkout/pay",
            "/a\"b",
            "/it's",
            "/back\\slash",
            "/tab\there",
            "/nl\nand\rcr",
            "/nul\u{0}",
            "/del\u{7f}",
            "/caf\u{e9}/\u{1F600}",
            "/zero\u{200b}width",
            "/%2e%2e;/x",
        ];
        let clients = [
            None,
            Some("192.0.2.1".parse().unwrap()),
            Some("0.0.0.0".parse().unwrap()),
            Some("255.255.255.255".parse().unwrap()),
            Some("2001:db8::1".parse().unwrap()),
        ];
        let upstreams = [
            None,
            Some("127.0.0.1:8000".parse().unwrap()),
            Some("10.0.0.5:65535".parse().unwrap()),
            Some("[2001:db8::5]:443".parse().unwrap()),
        ];
        let times = [
            0.0,
            0.04,
            0.96,
            1.25,
            2.0,
            13.1,
            999.94,
            12_345.678,
            1e9 + 0.3,
        ];
        let mut checked = 0;
        for (n, path) in paths.iter().enumerate() {
            for (k, client) in clients.iter().enumerate() {
                let upstream = upstreams[(n + k) % upstreams.len()];
                let ms = times[(n * 3 + k) % times.len()];
                let rules: &[(&str, &str)] = match (n + k) % 3 {
                    0 => &[],
                    1 => &one,
                    _ => &three,
                };
                let line = AccessLine {
                    client: *client,
                    method: if k % 2 == 0 { "GET" } else { "POST" },
                    path,
                    status: [200, 429, 0, 503][k % 4],
                    room: (n % 2 == 0).then_some("default"),
                    decision: (k % 3 != 0).then_some("allow"),
                    rules,
                    upstream,
                    upstream_ms: upstream.map(|_| times[(n + 2 * k) % times.len()]),
                    ms,
                };
                FORMAT.store(0, Ordering::Relaxed);
                let plain = line.format();
                assert!(
                    plain.ends_with('\n') && plain.matches('\n').count() == 1,
                    "{plain:?}"
                );
                let plain = plain.trim_end_matches('\n');
                let want = reference(&line, false);
                assert_eq!(after_ts(plain), after_ts(&want));
                assert_eq!(plain.find(' '), Some(TIMESTAMP_LEN), "{plain}");

                FORMAT.store(1, Ordering::Relaxed);
                let json = line.format();
                assert!(
                    json.ends_with('\n') && json.matches('\n').count() == 1,
                    "{json:?}"
                );
                assert_eq!(
                    without_ts(json.trim_end_matches('\n')),
                    without_ts(&reference(&line, true))
                );
                checked += 1;
            }
        }
        FORMAT.store(0, Ordering::Relaxed);
        assert_eq!(checked, paths.len() * clients.len());
    }

    #[test]
    fn tenths_round_as_the_format_machinery_does() {
        let mut values = vec![
            0.0, 0.01, 0.049, 0.05, 0.051, 0.15, 0.25, 0.35, 1.25, 7.75, 99.99,
        ];
        // A spread of ordinary durations, ties and near-ties among them.
        let mut x = 0.0005_f64;
        while x < 5e10 {
            values.extend([x, x * 1.000_000_000_1, x + 0.05, x + 0.049_999_999]);
            x = x * 1.37 + 0.011;
        }
        for ms in values {
            let mut out = Vec::new();
            write_tenths(&mut out, ms);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{ms:.1}"), "{ms}");
        }
        // Out of the fast path's range: still what `{:.1}` writes.
        for ms in [-1.5, f64::NAN, f64::INFINITY, 1e300] {
            let mut out = Vec::new();
            write_tenths(&mut out, ms);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{ms:.1}"), "{ms}");
        }
    }

    #[test]
    fn the_timestamp_is_the_current_second() {
        let mut out = Vec::new();
        let before = crate::time::now().secs();
        write_timestamp(&mut out);
        write_timestamp(&mut out);
        let after = crate::time::now().secs();
        let text = String::from_utf8(out).unwrap();
        let (a, b) = text.split_at(TIMESTAMP_LEN);
        for t in [a, b] {
            assert!(
                (before..=after).any(|s| Timestamp::from_secs(s).rfc3339() == t),
                "{t} not in {before}..={after}"
            );
        }
    }
}
