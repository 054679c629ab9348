//! Wiring: one Pingora `Server` with the proxy, the admin endpoint and the background tasks.
//!
//! Nothing here starts a thread: Pingora may fork to daemonize after this, so every task runs
//! inside a service that Pingora starts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::Opt;
use pingora::server::{Server, ShutdownWatch};
use pingora::services::background::{background_service, BackgroundService};
use pingora::services::listening::Service;

use crate::admin::Admin;
use crate::app::App;
use crate::demo::DemoOrigin;
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
    let mut server = Server::new_with_opt_and_conf(opt, config.pingora_conf());
    server.bootstrap();

    let edge = Edge::new(
        pingora::proxy::http_proxy(&server.configuration, Proxy::new(app.clone())),
        app.clone(),
    );
    let mut proxy = Service::new("vestibule proxy".into(), edge);
    for addr in &config.server.listen {
        // No L4 read buffer: the HTTP/1 parser reads into its own, and an idle connection then
        // holds none (Pingora's default puts 64 KiB in front of every socket).
        proxy.add_listener(
            ListenerConfig::tcp(addr.to_string()).l4_buffer(L4BufferSettings {
                read: Some(0),
                write: None,
            }),
        );
    }
    server.add_service(proxy);

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

    if let Some(addr) = options.demo_origin {
        server.add_service(demo_origin_service(Some(addr), 1));
    }
    server
}

/// The demo origin as a service of its own, listening on `addr` if given (callers may add
/// listeners, such as a TLS one, themselves).
pub fn demo_origin_service(addr: Option<SocketAddr>, threads: usize) -> Service<DemoOrigin> {
    let mut origin = Service::new("vestibule demo origin".into(), DemoOrigin::default());
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

/// How often expired counters are dropped from the in-process store.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// How often buffered access lines are written.
const LOG_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Drops expired counters and writes buffered access lines.
struct Housekeeping {
    app: Arc<App>,
}

#[async_trait]
impl BackgroundService for Housekeeping {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let mut flush = tokio::time::interval(LOG_FLUSH_EVERY);
        crate::logging::set_buffering(true);
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    crate::logging::set_buffering(false);
                    return;
                }
                _ = sweep.tick() => {
                    self.app.state.store.sweep(crate::time::Timestamp::now());
                    crate::alloc::collect();
                }
                _ = flush.tick() => crate::logging::flush(),
            }
        }
    }
}
