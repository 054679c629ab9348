//! Wiring: one Pingora `Server` with the proxy, the admin endpoint and the background tasks.
//!
//! Nothing here starts a thread: Pingora may fork to daemonize after this, so every task runs
//! inside a service that Pingora starts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::configuration::Opt;
use pingora::server::{Server, ShutdownWatch};
use pingora::services::background::{background_service, BackgroundService};
use pingora::services::listening::Service;

use crate::admin::Admin;
use crate::app::App;
use crate::demo::DemoOrigin;
use crate::listen::threads::ThreadService;
use crate::listen::Edge;
use crate::proxy::Proxy;
use crate::reload::Reloader;

/// How often the upstream task wakes to see whether a health probe is due.
const PROBE_TICK: Duration = Duration::from_millis(250);

/// Options of one run, from the command line.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub daemon: bool,
    pub upgrade: bool,
    /// Also serve the built-in demo origin here (`vestibule demo`).
    pub demo_origin: Option<SocketAddr>,
}

/// Builds the server for `app`'s current snapshot.
pub fn build(app: Arc<App>, options: &RunOptions) -> Server {
    let snapshot = app.snapshot();
    let config = &snapshot.config;
    let opt = Opt {
        daemon: options.daemon,
        upgrade: options.upgrade,
        ..Opt::default()
    };
    let mut server = Server::new_with_opt_and_conf(opt, crate::config::pingora_conf(config));
    server.bootstrap();

    let mut http = pingora::proxy::http_proxy(&server.configuration, Proxy::new(app.clone()));
    let mut h_opts = pingora::apps::HttpServerOptions::default();
    // Prior knowledge on plain listeners (the edge hands such connections over); ignored on TLS.
    h_opts.h2c = config.server.h2c;
    // An HTTP/2 connection with no open stream is closed like an idle HTTP/1 one.
    h_opts.h2_idle_timeout = Some(config.server.keepalive_timeout);
    http.server_options = Some(h_opts);
    // Pingora's HTTP/2 defaults stay: 100 concurrent streams, a 64 KiB header list, and the h2
    // crate's limits on resets and CONTINUATION frames (docs/src/operations/tls.md).
    let http = Arc::new(http);

    // The edge runs a TLS handshake itself, with the certificates in service at that moment.
    // Each connection is accepted and served on one thread (src/listen/threads.rs).
    let (threads, stealing) = (config.server.threads, config.server.work_stealing);
    for (name, edge, addrs) in [
        (
            "vestibule proxy",
            Arc::new(Edge::new(http.clone(), app.clone())),
            &config.server.listen,
        ),
        (
            "vestibule tls",
            Arc::new(Edge::tls(http, app.clone())),
            &config.server.tls_listen,
        ),
    ] {
        if addrs.is_empty() {
            continue;
        }
        for service in ThreadService::all(name, addrs, threads, stealing, edge, WRITE_BUFFER) {
            server.add_service(service);
        }
    }

    let mut admin = Service::new("vestibule admin".into(), Admin::new(app.clone()));
    admin.add_tcp(&config.admin.listen.to_string());
    admin.threads = Some(1);
    server.add_service(admin);

    server.add_service(background_service(
        "vestibule upstream health",
        UpstreamHealth { app: app.clone() },
    ));
    server.add_service(background_service(
        "vestibule reload",
        Reloader::new(app.clone()),
    ));
    server.add_service(background_service(
        "vestibule housekeeping",
        Housekeeping { app: app.clone() },
    ));

    if !config.sinks.is_empty() {
        server.add_service(background_service(
            "vestibule events out",
            crate::sinks::EventsOut::new(
                app.events.clone(),
                app.node_name(),
                config.cluster.clone(),
                (
                    app.metrics.events.clone(),
                    app.metrics.events_spooled.clone(),
                    app.metrics.events_oldest_spooled.clone(),
                ),
            ),
        ));
    }

    if let Some((store, cluster)) = &app.state.shared {
        match StoreSync::new(app.clone(), store.clone(), cluster) {
            Ok(sync) => {
                server.add_service(background_service("vestibule store sync", sync));
            }
            // The URL was checked with the config; a failure here is a bug, said plainly.
            Err(e) => log::error!("cluster.redis: cannot use the store: {e}"),
        }
    }

    if let Some(addr) = options.demo_origin {
        server.add_service(demo_origin_service(Some(addr), 1));
    }
    server
}

/// The write buffer of a client connection: room pages (about 4.5 KiB with their head) leave
/// in one send. Pingora's default of 1,460 bytes sent a page's head and body apart, a
/// second system call for every page.
const WRITE_BUFFER: usize = 8 * 1024;

/// The demo origin as a service of its own, listening on `addr` if given (callers may add
/// listeners, such as a TLS one, themselves).
pub(crate) fn demo_origin_service(addr: Option<SocketAddr>, threads: usize) -> Service<DemoOrigin> {
    model_origin_service(DemoOrigin::default(), addr, threads)
}

/// `origin` (the demo origin, perhaps with a model load) as a service.
pub fn model_origin_service(
    origin: DemoOrigin,
    addr: Option<SocketAddr>,
    threads: usize,
) -> Service<DemoOrigin> {
    let mut origin = Service::new("vestibule demo origin".into(), origin);
    if let Some(addr) = addr {
        origin.add_tcp(&addr.to_string());
    }
    origin.threads = Some(threads);
    origin
}

/// Probes the origin peers of whichever snapshot is in service.
struct UpstreamHealth {
    app: Arc<App>,
}

#[async_trait]
impl BackgroundService for UpstreamHealth {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tick = tokio::time::interval(PROBE_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => {
                    let upstream = self.app.snapshot().upstream.clone();
                    upstream.probe_if_due(Instant::now()).await;
                }
            }
        }
    }
}

/// Syncs this node's counts with the shared store every `sync_interval`: one round
/// trip each time, never on a request's path. A failed or slow sync changes nothing but the
/// store's health: the next one sends everything again.
struct StoreSync {
    app: Arc<App>,
    store: Arc<crate::store::shared::SharedStore>,
    redis: crate::store::redis::RedisSync,
    interval: Duration,
}

impl StoreSync {
    fn new(
        app: Arc<App>,
        store: Arc<crate::store::shared::SharedStore>,
        cluster: &crate::config::ClusterConfig,
    ) -> Result<StoreSync, String> {
        let redis = crate::store::redis::RedisSync::new(&cluster.redis, &cluster.key_prefix)
            .map_err(|e| e.to_string())?;
        Ok(StoreSync {
            app,
            store,
            redis,
            interval: cluster.sync_interval,
        })
    }

    async fn sync_once(&self, was_up: &mut Option<bool>) {
        let metrics = &self.app.metrics;
        let req = self.store.prepare(crate::time::now());
        let started = Instant::now();
        // A round trip may take up to the interval (at least 250 ms), never longer.
        let timeout = self.interval.max(Duration::from_millis(250));
        match self.redis.exchange(&req, timeout).await {
            Ok((reply, traffic)) => {
                metrics
                    .store_sync_seconds
                    .observe(started.elapsed().as_secs_f64());
                metrics
                    .store_bytes
                    .with_label_values(&["sent"])
                    .inc_by(traffic.sent as u64);
                metrics
                    .store_bytes
                    .with_label_values(&["received"])
                    .inc_by(traffic.received as u64);
                let figures = self.store.apply(req, reply, crate::time::now());
                // Operator actions taken on other nodes.
                self.app
                    .state
                    .controls
                    .adopt(crate::store::CounterStore::take_overrides(&*self.store));
                metrics.store_up.set(1);
                metrics.cluster_nodes.set(figures.members as i64);
                if *was_up != Some(true) {
                    self.app.events.store_state_changed(
                        *was_up,
                        true,
                        Some(figures.members as u64),
                    );
                    log::info!(
                        "cluster store reached as {}: {} live node(s)",
                        self.store.member(),
                        figures.members
                    );
                }
                *was_up = Some(true);
            }
            Err(e) => {
                self.store.failed(req);
                metrics.store_errors.inc();
                metrics.store_up.set(0);
                if *was_up != Some(false) {
                    self.app.events.store_state_changed(*was_up, false, None);
                    log::warn!(
                        "cluster store unreachable ({e}); deciding on cluster.on_store_failure until it is back"
                    );
                }
                *was_up = Some(false);
            }
        }
    }
}

#[async_trait]
impl BackgroundService for StoreSync {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut was_up = None;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => self.sync_once(&mut was_up).await,
            }
        }
    }
}

/// How often expired counters are dropped from the in-process store.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// How often buffered access lines are written.
const LOG_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// How often the autopilots look whether an interval is up.
const STEER_EVERY: Duration = Duration::from_secs(1);

/// Drops expired counters, writes buffered access lines, runs the autopilots, and keeps the
/// per-minute history.
struct Housekeeping {
    app: Arc<App>,
}

#[async_trait]
impl BackgroundService for Housekeeping {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let mut flush = tokio::time::interval(LOG_FLUSH_EVERY);
        let mut steer = tokio::time::interval(STEER_EVERY);
        crate::logging::set_buffering(true);
        let node = self.app.node_name();
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    // The minute in progress, so a report after the event has it.
                    let snapshot = self.app.snapshot();
                    self.app.minutes.finish(&snapshot, &self.app.metrics, &self.app.events, &node, crate::time::now());
                    self.app.sync_receipts(&snapshot, crate::time::now());
                    crate::logging::set_buffering(false);
                    return;
                }
                _ = sweep.tick() => {
                    self.app.state.store.sweep(crate::time::now());
                    crate::alloc::collect();
                }
                _ = flush.tick() => crate::logging::flush(),
                _ = steer.tick() => {
                    let now = crate::time::now();
                    self.app.steer(now);
                    let snapshot = self.app.snapshot();
                    self.app.events.event_states(&snapshot, now);
                    self.app.events.serving_counters(&snapshot, now);
                    let counters = self.app.metrics.console_counters(&snapshot);
                    self.app.recent.sample(counters, now);
                    self.app.minutes.tick(&snapshot, &self.app.metrics, &self.app.events, &node, now);
                    self.app.sync_receipts(&snapshot, now);
                }
            }
        }
    }
}
