//! Events out: what happened (a visitor let in, an operator's action, a room's minute), sent to
//! the `[[events.sink]]`s that want it, in order, at least once.
//!
//! The path of an event:
//! 1. Where it happens, one call to [`Events::emit`]: if a sink wants its type and room, the
//!    event is handed to a bounded in-memory queue with `try_send`, never waiting. A full
//!    queue drops it and counts it (`result="dropped"`) for every sink that wanted it.
//! 2. The writer thread (started with the [`EventsOut`] service) drains the queue, writes each
//!    event as CloudEvents 1.0 JSON and appends it to every matching sink's [`spool::Spool`]
//!    with one write per batch, and fsyncs every [`FSYNC_EVERY`]. A spool that cannot be
//!    written (a full disk) counts the events as dropped and logs once until it can again.
//! 3. One sender task per sink reads its spool in order and delivers each event (webhook,
//!    file, Redis stream), retrying with backoff until it is delivered, rejected, or older
//!    than `max_retry_age`, then moves on and acknowledges it in the spool.
//!
//! The JSON is written with serde_json from a typed struct rather than with the
//! `cloudevents-sdk` crate: the structured JSON format is seven fixed fields, and the SDK would
//! bring its own HTTP bindings and a second `time` crate for them.
//!
//! This module must not touch the request path beyond step 1: no lock, no IO, no wait.

pub mod spool;

mod cloudevent;
mod deliver;
mod emit;

use std::net::IpAddr;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec};
use serde_json::Value;

pub use cloudevent::Event;

use crate::config::sinks::SinkConfig;
use spool::Spool;

/// How often the writer thread fsyncs what it appended: a crash of the machine (not of the
/// process) may lose up to this much of the newest events.
pub const FSYNC_EVERY: Duration = Duration::from_millis(100);
/// How often a sender writes how far it got: after a crash, up to this much of the events
/// delivered last are delivered again.
pub const CURSOR_EVERY: Duration = Duration::from_millis(200);
/// Events waiting between the request path and the writer thread.
const QUEUE: usize = 16 * 1024;
/// The most events the writer appends with one write.
const BATCH: usize = 1024;
/// A sender with nothing to send looks again after this even if not woken.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Where events are handed in. Cheap to call when no sink wants an event.
pub struct Events {
    inner: Option<Inner>,
}

struct Inner {
    tx: SyncSender<Event>,
    rx: Mutex<Option<Receiver<Event>>>,
    /// The sinks as they were at start (sinks change on restart only).
    sinks: Vec<SinkConfig>,
    counted: IntCounterVec,
    /// Each scheduled event's state at the last look, by (room, event).
    states:
        Mutex<std::collections::HashMap<(String, String), vestibule_core::room::event::EventState>>,
    /// The minute the serving counters were last looked at, and each queue API room's counter
    /// then.
    serving: Mutex<(u64, std::collections::HashMap<String, u64>)>,
}

impl Events {
    /// The entry for `sinks` (none: every emit returns at once).
    pub fn new(sinks: &[SinkConfig], counted: IntCounterVec) -> Events {
        if sinks.is_empty() {
            return Events { inner: None };
        }
        let (tx, rx) = sync_channel(QUEUE);
        Events {
            inner: Some(Inner {
                tx,
                rx: Mutex::new(Some(rx)),
                sinks: sinks.to_vec(),
                counted,
                states: Mutex::default(),
                serving: Mutex::default(),
            }),
        }
    }

    /// Whether some sink wants an event of `kind` about `room`.
    pub fn wants(&self, kind: &str, room: Option<&str>) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.sinks.iter().any(|s| s.wants(kind, room)))
    }

    /// Hands an event of `kind` about `room` to the sinks that want it; `data` is only built
    /// when one does. `client_ip` reaches only sinks with `include_client_ip`. Never waits.
    pub fn emit(
        &self,
        kind: &'static str,
        room: Option<&str>,
        client_ip: Option<IpAddr>,
        data: impl FnOnce() -> Value,
    ) {
        let Some(inner) = &self.inner else { return };
        if !self.wants(kind, room) {
            return;
        }
        let event = Event::new(kind, room, client_ip, data());
        match inner.tx.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                for s in inner.sinks.iter().filter(|s| s.wants(kind, room)) {
                    inner
                        .counted
                        .with_label_values(&[&s.name, kind, "dropped"])
                        .inc();
                }
            }
        }
    }
}

/// One sink at run time: its config, its spool (set once it is open), and how its sender is
/// woken.
struct Sink {
    config: SinkConfig,
    spool: std::sync::OnceLock<Spool>,
    wake: tokio::sync::Notify,
    counted: IntCounterVec,
    spooled: IntGaugeVec,
    oldest: GaugeVec,
}

impl Sink {
    fn count(&self, kind: &str, result: &str, n: u64) {
        if n > 0 {
            self.counted
                .with_label_values(&[&self.config.name, kind, result])
                .inc_by(n);
        }
    }
}

/// The background service of events out: the writer thread and a sender per sink, from start
/// to shutdown.
pub struct EventsOut {
    events: Arc<Events>,
    /// This node's name: the events' `source`.
    source: String,
    /// Whose Redis a `redis_stream` sink with no `redis` of its own uses.
    cluster: crate::config::ClusterConfig,
    /// `vestibule_events_total`, `vestibule_events_spooled`,
    /// `vestibule_events_oldest_spooled_seconds`.
    metrics: (IntCounterVec, IntGaugeVec, GaugeVec),
}

impl EventsOut {
    pub fn new(
        events: Arc<Events>,
        source: String,
        cluster: crate::config::ClusterConfig,
        metrics: (IntCounterVec, IntGaugeVec, GaugeVec),
    ) -> EventsOut {
        EventsOut {
            events,
            source,
            cluster,
            metrics,
        }
    }
}

#[async_trait]
impl BackgroundService for EventsOut {
    async fn start(&self, shutdown: ShutdownWatch) {
        let Some(inner) = &self.events.inner else {
            return;
        };
        let Some(rx) = inner.rx.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let source = self.source.clone();
        let (counted, spooled, oldest) = &self.metrics;
        let mut sinks = Vec::new();
        for config in &inner.sinks {
            let sink = Sink {
                config: config.clone(),
                spool: std::sync::OnceLock::new(),
                wake: tokio::sync::Notify::new(),
                counted: counted.clone(),
                spooled: spooled.clone(),
                oldest: oldest.clone(),
            };
            // Opened before the writer starts where it can be at once (every start but an
            // upgrade's), so that no event waits; the others are opened in the background.
            if let Ok(opened) = Spool::open(&config.spool_dir, config.max_spool_bytes) {
                sink.opened(opened);
            }
            sinks.push(Arc::new(sink));
        }
        let writer = {
            let (sinks, source) = (sinks.clone(), source.clone());
            std::thread::Builder::new()
                .name("vestibule-events".into())
                .spawn(move || write_loop(rx, &sinks, &source))
        };
        if let Err(e) = writer {
            log::error!("events: cannot start the writer thread: {e}");
            return;
        }
        let mut senders = Vec::new();
        for sink in &sinks {
            let deliver = deliver::Deliver::new(&sink.config, &self.cluster);
            senders.push(tokio::spawn(run_sink(
                sink.clone(),
                deliver,
                shutdown.clone(),
            )));
        }
        // The senders end at shutdown, each writing its cursor; the writer thread goes on.
        for s in senders {
            let _ = s.await;
        }
    }
}

/// How often a spool that could not be opened for another reason than the process before
/// this one holding it (a folder not writable, a full disk) is tried again.
const SPOOL_RETRY: Duration = Duration::from_secs(5);

impl Sink {
    /// Takes its spool, once open, and says what it holds.
    fn opened(&self, (spool, recovery): (Spool, spool::Recovery)) {
        log::info!(
            "events sink {}: spool {} holds {} event(s) to deliver{}",
            self.config.name,
            self.config.spool_dir.display(),
            recovery.pending,
            if recovery.torn_bytes > 0 {
                format!(
                    "; {} byte(s) of an unfinished write cut off",
                    recovery.torn_bytes
                )
            } else {
                String::new()
            }
        );
        let _ = self.spool.set(spool);
    }
}

/// A sink's life: its spool opened if it is not yet, then its sender (where it has one) until
/// shutdown.
async fn run_sink(sink: Arc<Sink>, deliver: Option<deliver::Deliver>, shutdown: ShutdownWatch) {
    if sink.spool.get().is_none() {
        match open_spool(&sink.config, shutdown.clone()).await {
            Some(opened) => sink.opened(opened),
            None => return,
        }
    }
    if let Some(deliver) = deliver {
        send_loop(sink, deliver, shutdown).await;
    }
}

/// Opens `config`'s spool, trying again without end while the process before this one (an
/// upgrade, draining) still holds it, or while it cannot be opened at all; `None` at shutdown.
/// Meanwhile the writer holds the sink's events, as many as the queue holds.
async fn open_spool(
    config: &SinkConfig,
    mut shutdown: ShutdownWatch,
) -> Option<(Spool, spool::Recovery)> {
    let mut said = false;
    loop {
        let wait = match Spool::open(&config.spool_dir, config.max_spool_bytes) {
            Ok(opened) => {
                if said {
                    log::info!(
                        "events sink {}: the spool {} is open now",
                        config.name,
                        config.spool_dir.display()
                    );
                }
                return Some(opened);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !said {
                    log::info!(
                        "events sink {}: the spool {} is still open in the process before this one; waiting for it (its events wait in memory, as many as {QUEUE}, then are dropped and counted)",
                        config.name,
                        config.spool_dir.display()
                    );
                    said = true;
                }
                Duration::from_millis(100)
            }
            Err(e) => {
                if !said {
                    log::error!(
                        "events sink {}: cannot open the spool {}: {e}; trying again every {}s (its events wait in memory, as many as {QUEUE}, then are dropped and counted)",
                        config.name,
                        config.spool_dir.display(),
                        SPOOL_RETRY.as_secs()
                    );
                    said = true;
                }
                SPOOL_RETRY
            }
        };
        if *shutdown.borrow() {
            return None;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return None,
        }
    }
}

/// Each item with its payload, where the payload fits a spool record; apart, the items whose
/// payload does not (dropped alone, not with the batch they came in).
fn fitting<T>(items: Vec<T>, to_json: impl Fn(&T) -> Vec<u8>) -> (Vec<(T, Vec<u8>)>, Vec<T>) {
    let mut fit = Vec::with_capacity(items.len());
    let mut too_large = Vec::new();
    for item in items {
        let payload = to_json(&item);
        if payload.len() > spool::MAX_PAYLOAD {
            too_large.push(item);
        } else {
            fit.push((item, payload));
        }
    }
    (fit, too_large)
}

/// The writer thread: queue → spools, fsynced every [`FSYNC_EVERY`]. It runs as long as the
/// process: during a graceful shutdown, requests in flight and the last minute's records still
/// emit events, and they are written as they come.
fn write_loop(rx: Receiver<Event>, sinks: &[Arc<Sink>], source: &str) {
    let mut batch: Vec<Event> = Vec::with_capacity(BATCH);
    let mut failing = vec![false; sinks.len()];
    // Per sink, events waiting for its spool to open: (type, payload).
    let mut held: Vec<Vec<(&'static str, Vec<u8>)>> = vec![Vec::new(); sinks.len()];
    let mut last_sync = Instant::now();
    loop {
        match rx.recv_timeout(FSYNC_EVERY) {
            Ok(e) => batch.push(e),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        let now_ms = crate::time::now().millis();
        for (i, sink) in sinks.iter().enumerate() {
            let mine: Vec<&Event> = batch
                .iter()
                .filter(|e| sink.config.wants(e.kind(), e.room()))
                .collect();
            if mine.is_empty() && held[i].is_empty() {
                continue;
            }
            let (fit, too_large) =
                fitting(mine, |e| e.to_json(source, sink.config.include_client_ip));
            for e in &too_large {
                sink.count(e.kind(), "dropped", 1);
                log::warn!(
                    "events sink {}: a {} event is over the spool's 1 MiB a record; dropped (and counted)",
                    sink.config.name,
                    e.kind()
                );
            }
            let mut items = std::mem::take(&mut held[i]);
            items.extend(fit.into_iter().map(|(e, p)| (e.kind(), p)));
            let Some(spool) = sink.spool.get() else {
                // Not open yet (the process before this one still holds it, in an upgrade):
                // held here, as many as the queue holds, then dropped and counted.
                let over = items.len().saturating_sub(QUEUE);
                for (kind, _) in items.drain(..over) {
                    sink.count(kind, "dropped", 1);
                }
                held[i] = items;
                continue;
            };
            let (kinds, payloads): (Vec<&'static str>, Vec<Vec<u8>>) = items.into_iter().unzip();
            match spool.append(&payloads, now_ms) {
                Ok(appended) => {
                    sink.count("unknown", "dropped", appended.dropped);
                    // The backlog as it grows, while the sender may be waiting to retry.
                    sink.spooled
                        .with_label_values(&[&sink.config.name])
                        .set(spool.pending() as i64);
                    if failing[i] {
                        log::info!(
                            "events sink {}: the spool takes events again",
                            sink.config.name
                        );
                        failing[i] = false;
                    }
                    sink.wake.notify_one();
                }
                Err(e) => {
                    for kind in kinds {
                        sink.count(kind, "dropped", 1);
                    }
                    if !failing[i] {
                        log::error!(
                            "events sink {}: cannot write to the spool {}: {e}; events are dropped (and counted) until it can",
                            sink.config.name,
                            sink.config.spool_dir.display()
                        );
                        failing[i] = true;
                    }
                }
            }
        }
        batch.clear();
        if last_sync.elapsed() >= FSYNC_EVERY {
            for sink in sinks {
                if let Some(spool) = sink.spool.get() {
                    if let Err(e) = spool.sync() {
                        log::warn!("events sink {}: fsync: {e}", sink.config.name);
                    }
                }
            }
            last_sync = Instant::now();
        }
    }
}

/// The first wait after a failed attempt; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The wait before attempt `attempt + 1` (`attempt` ≥ 1): the doubled base, between half of it
/// and all of it at random, so that senders do not retry in step.
fn backoff(attempt: u32) -> Duration {
    use rand::Rng;
    let base = FIRST_BACKOFF
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let half = base / 2;
    half + half.mul_f64(rand::thread_rng().gen::<f64>())
}

/// What an event's JSON says of itself, for the metrics' `type` and the Redis fields.
#[derive(serde::Deserialize)]
struct Head {
    id: String,
    #[serde(rename = "type")]
    kind: String,
}

/// A sink's sender: its spool → its destination, in order, until shutdown.
async fn send_loop(sink: Arc<Sink>, mut deliver: deliver::Deliver, mut shutdown: ShutdownWatch) {
    let Some(spool) = sink.spool.get() else {
        return;
    };
    let name = sink.config.name.clone();
    let max_age_ms = sink.config.max_retry_age.as_millis() as u64;
    let mut last_cursor = Instant::now();
    let (mut expired, mut rejected) = (0u64, 0u64);
    loop {
        if *shutdown.borrow() {
            break;
        }
        let record = match spool.peek() {
            Ok(r) => r,
            Err(e) => {
                log::error!("events sink {name}: cannot read the spool: {e}");
                None
            }
        };
        sink.spooled
            .with_label_values(&[&name])
            .set(spool.pending() as i64);
        let Some(record) = record else {
            sink.oldest.with_label_values(&[&name]).set(0.0);
            if let Err(e) = spool.persist_cursor() {
                log::warn!("events sink {name}: cannot write the spool's cursor: {e}");
            }
            tokio::select! {
                _ = sink.wake.notified() => {}
                _ = tokio::time::sleep(IDLE_POLL) => {}
                _ = shutdown.changed() => break,
            }
            continue;
        };
        let head: Option<Head> = serde_json::from_slice(&record.payload).ok();
        let kind = head
            .as_ref()
            .and_then(|h| h.kind.strip_prefix("vestibule."))
            .unwrap_or("unknown")
            .to_owned();
        let mut attempt = 0u32;
        let result = loop {
            let age_ms = show_age(&sink.oldest, &name, record.spooled_ms);
            if age_ms > max_age_ms {
                // After a long outage every event left is too old: one line per thousand.
                if expired % 1000 == 0 {
                    log::warn!(
                        "events sink {name}: event {} not delivered within max_retry_age; dropped ({} so far, counted in vestibule_events_total)",
                        head.as_ref().map_or("?", |h| h.id.as_str()),
                        expired + 1
                    );
                }
                expired += 1;
                break "dropped";
            }
            let Some(head) = &head else {
                log::error!("events sink {name}: a spooled event is not JSON; dropped");
                break "dropped";
            };
            attempt += 1;
            match deliver.send(&head.id, &head.kind, &record.payload).await {
                deliver::Outcome::Delivered => break "delivered",
                deliver::Outcome::Rejected(why) => {
                    // A receiver that refuses everything (a wrong key): one line per thousand.
                    if rejected % 1000 == 0 {
                        log::warn!(
                            "events sink {name}: event {} rejected: {why} ({} so far, counted in vestibule_events_total)",
                            head.id,
                            rejected + 1
                        );
                    }
                    rejected += 1;
                    break "rejected";
                }
                deliver::Outcome::Retry(why) => {
                    sink.count(&kind, "retried", 1);
                    let wait = backoff(attempt);
                    if attempt == 1 || attempt % 10 == 0 {
                        log::warn!(
                            "events sink {name}: event {} not delivered (attempt {attempt}: {why}); retrying in {:.1}s",
                            head.id,
                            wait.as_secs_f64()
                        );
                    }
                    // Waited out a second at a time, so that the oldest event's age (what the
                    // backlog alert reads) keeps counting through a backoff of minutes.
                    let until = Instant::now() + wait;
                    while let Some(left) = until.checked_duration_since(Instant::now()) {
                        if left.is_zero() {
                            break;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(left.min(Duration::from_secs(1))) => {}
                            _ = shutdown.changed() => {
                                let _ = spool.persist_cursor();
                                return;
                            }
                        }
                        show_age(&sink.oldest, &name, record.spooled_ms);
                    }
                }
            }
        };
        sink.count(&kind, result, 1);
        if let Err(e) = spool.ack(record.seq) {
            log::warn!("events sink {name}: cannot trim the spool: {e}");
        }
        if last_cursor.elapsed() >= CURSOR_EVERY {
            if let Err(e) = spool.persist_cursor() {
                log::warn!("events sink {name}: cannot write the spool's cursor: {e}");
            }
            last_cursor = Instant::now();
        }
    }
    let _ = spool.persist_cursor();
}

/// Sets sink `name`'s oldest-event gauge to the age of an event spooled at `spooled_ms`, and
/// returns that age in milliseconds.
fn show_age(oldest: &GaugeVec, name: &str, spooled_ms: u64) -> u64 {
    let age_ms = crate::time::now().millis().saturating_sub(spooled_ms);
    oldest
        .with_label_values(&[name])
        .set(age_ms as f64 / 1000.0);
    age_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::sinks::{Destination, SinkSecret};

    #[test]
    fn an_event_too_large_for_the_spool_is_dropped_alone() {
        let sizes = [10, spool::MAX_PAYLOAD + 1, spool::MAX_PAYLOAD, 3];
        let (fit, too_large) = fitting(sizes.to_vec(), |&n| vec![b'x'; n]);
        assert_eq!(
            fit.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(),
            [(10, 10), (spool::MAX_PAYLOAD, spool::MAX_PAYLOAD), (3, 3)]
        );
        assert_eq!(too_large, [spool::MAX_PAYLOAD + 1]);
    }

    /// A webhook receiver answering 204 to every request, keeping connections alive.
    fn keep_alive_receiver() -> String {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut writer = stream.try_clone().unwrap();
                    let mut reader = BufReader::new(stream);
                    loop {
                        let mut length = 0usize;
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            let lower = line.to_ascii_lowercase();
                            if let Some(v) = lower.strip_prefix("content-length:") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut body = vec![0u8; length];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        if writer
                            .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    fn sink(name: &str, destination: Destination, spool: &std::path::Path) -> SinkConfig {
        SinkConfig {
            name: name.into(),
            destination,
            types: Vec::new(),
            rooms: Vec::new(),
            include_client_ip: false,
            spool_dir: spool.join(name),
            max_spool_bytes: 256 << 20,
            max_retry_age: Duration::from_secs(3600),
        }
    }

    /// A spool the process before this one still holds (an upgrade): its sink's events wait in
    /// memory, the other sink's flow meanwhile, and once it is let go every event is delivered.
    /// The events-out service for `sinks` as node `node`, running on a runtime of its own:
    /// its metrics, its events, the runtime, the stop switch and the service's task.
    #[allow(clippy::type_complexity)]
    fn running(
        sinks: &[SinkConfig],
        node: &str,
    ) -> (
        crate::metrics::Metrics,
        Arc<Events>,
        tokio::runtime::Runtime,
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let metrics = crate::metrics::Metrics::new();
        let events = Arc::new(Events::new(sinks, metrics.events.clone()));
        let out = EventsOut::new(
            events.clone(),
            node.into(),
            crate::config::ClusterConfig::default(),
            (
                metrics.events.clone(),
                metrics.events_spooled.clone(),
                metrics.events_oldest_spooled.clone(),
            ),
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (stop, watch) = tokio::sync::watch::channel(false);
        let service = rt.spawn(async move { out.start(watch).await });
        (metrics, events, rt, stop, service)
    }

    #[test]
    fn a_spool_held_elsewhere_is_waited_for_without_end_and_its_events_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file_sink = |name: &str| {
            sink(
                name,
                Destination::File {
                    path: dir.path().join(format!("{name}.jsonl")),
                    max_file_bytes: 1 << 30,
                },
                dir.path(),
            )
        };
        let sinks = vec![file_sink("held"), file_sink("free")];
        let (before, _) = Spool::open(&sinks[0].spool_dir, 1 << 20).unwrap();
        let (metrics, events, rt, stop, service) = running(&sinks, "node:8080");
        let count = |sink: &str, result: &str| {
            metrics
                .events
                .with_label_values(&[sink, "room.minute", result])
                .get()
        };
        let eventually = |what: &dyn Fn() -> bool| {
            let started = Instant::now();
            while !what() {
                assert!(started.elapsed() < Duration::from_secs(20), "never");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        for _ in 0..5 {
            events.emit(
                "room.minute",
                Some("sale"),
                None,
                || serde_json::json!({"room": "sale"}),
            );
        }
        eventually(&|| count("free", "delivered") == 5);
        assert_eq!(count("held", "delivered"), 0);
        drop(before);
        eventually(&|| count("held", "delivered") == 5);
        assert_eq!(count("held", "dropped"), 0);
        let _ = stop.send(true);
        rt.block_on(service).unwrap();
    }

    /// Figures for the docs, not a check: `cargo test --lib sinks::tests::throughput --
    /// --ignored --nocapture`. The request path's cost of an event, and how many events a
    /// second a webhook sink and a file sink deliver (one at a time, in order).
    #[test]
    #[ignore]
    fn throughput() {
        const N: u64 = 20_000;
        let dir = tempfile::tempdir().unwrap();
        let sinks = vec![
            sink(
                "hook",
                Destination::Webhook {
                    url: keep_alive_receiver(),
                    secret: SinkSecret(b"a-secret-of-16-bytes".to_vec()),
                    secret_file: "unused".into(),
                },
                dir.path(),
            ),
            sink(
                "file",
                Destination::File {
                    path: dir.path().join("events.jsonl"),
                    max_file_bytes: 1 << 30,
                },
                dir.path(),
            ),
        ];
        let (metrics, events, rt, stop, service) = running(&sinks, "bench-node:8080");
        let delivered = |sink: &str| {
            metrics
                .events
                .with_label_values(&[sink, "room.minute", "delivered"])
                .get()
        };
        let started = Instant::now();
        let mut emitted = 0;
        let mut emit_time = Duration::ZERO;
        while emitted < N {
            // In bursts the queue can take, as a busy edge would.
            for _ in 0..1000 {
                let t = Instant::now();
                events.emit("room.minute", Some("sale"), None, || {
                    serde_json::json!({"room": "sale", "minute": "2026-11-27T20:15:00Z",
                        "arrivals": 1200, "admitted": 500, "waiting": 3400, "active": 900,
                        "abandoned": 12, "wait_p50": 311.0, "wait_p90": 720.5})
                });
                emit_time += t.elapsed();
                emitted += 1;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let dropped = metrics
            .events
            .with_label_values(&["hook", "room.minute", "dropped"])
            .get();
        let mut file_done = None;
        while delivered("hook") + dropped < N && started.elapsed() < Duration::from_secs(300) {
            if file_done.is_none() && delivered("file") >= N - dropped {
                file_done = Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let hook_done = started.elapsed();
        let file_done = file_done.unwrap_or(hook_done);
        let line = std::fs::read_to_string(dir.path().join("events.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .len();
        println!(
            "emit: {:.2} µs/event on the request path; dropped at the queue: {dropped}\n\
             webhook: {N} in {:.2?} = {:.0} events/s\n\
             file: {N} in {:.2?} = {:.0} events/s\n\
             spool record: {} bytes (JSON {line} + header {})",
            emit_time.as_secs_f64() * 1e6 / N as f64,
            hook_done,
            N as f64 / hook_done.as_secs_f64(),
            file_done,
            N as f64 / file_done.as_secs_f64(),
            line + spool::HEADER,
            spool::HEADER
        );
        stop.send(true).unwrap();
        rt.block_on(service).unwrap();
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_five_minutes() {
        for attempt in 1..40 {
            let base = (1u64 << (attempt - 1).min(16)).min(300) as f64;
            let d = backoff(attempt).as_secs_f64();
            assert!(d >= base / 2.0 - 1e-9 && d <= base + 1e-9, "{attempt}: {d}");
        }
    }
}
