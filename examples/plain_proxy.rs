//! The reference for every load figure: a Pingora proxy with no features at all, same pingora
//! version, same thread count, one fixed upstream.
//!
//! `cargo run --release --example plain_proxy -- [--no-work-stealing] [--origin-timeouts] <listen> <upstream> <threads> [<tls_listen> <cert> <key>]`
//!
//! Its configuration is Pingora's default (work stealing on) unless `--no-work-stealing` says
//! otherwise: the scaling benchmark measures both.
//!
//! By default it sets no timeout on the origin, as Pingora's default peer has none.
//! `--origin-timeouts` gives it vestibule's default ones instead, set by vestibule's own
//! `upstream::set_timeouts` (connect 2 s, 4 s in all; read and write 30 s; pooled connections
//! closed after 60 s idle), all on Tokio's timer (vestibule's
//! `fast_timeout_to_tokio_threshold_seconds = 0`). It is a second reference for
//! `benches/instructions.sh`, to show what those timers cost a proxy by themselves; the goals
//! are against the default.
//!
//! With a TLS listener, it is Pingora's own: rustls with ring, TLS 1.2 and 1.3, ALPN h2 and
//! http/1.1 (what vestibule's TLS listeners offer too).

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::{Opt, ServerConf};
use pingora::upstreams::peer::HttpPeer;

struct Plain {
    upstream: std::net::SocketAddr,
    origin_timeouts: bool,
}

#[async_trait]
impl ProxyHttp for Plain {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.upstream, false, String::new());
        if self.origin_timeouts {
            // vestibule's defaults, set as vestibule sets them.
            vestibule::upstream::set_timeouts(
                &mut peer.options,
                vestibule::config::DEFAULT_CONNECT_TIMEOUT,
                vestibule::config::DEFAULT_READ_TIMEOUT,
            );
        }
        Ok(Box::new(peer))
    }
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    const FLAGS: [&str; 2] = ["--no-work-stealing", "--origin-timeouts"];
    if let Some(flag) = all
        .iter()
        .find(|a| a.starts_with("--") && !FLAGS.contains(&a.as_str()))
    {
        eprintln!(
            "plain_proxy: unknown option {flag} (known: {})",
            FLAGS.join(", ")
        );
        std::process::exit(2);
    }
    let work_stealing = !all.iter().any(|a| a == "--no-work-stealing");
    let origin_timeouts = all.iter().any(|a| a == "--origin-timeouts");
    let mut args = all.into_iter().filter(|a| !a.starts_with("--"));
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8090".into());
    let upstream = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8000".into())
        .parse()
        .expect("upstream address like 127.0.0.1:8000");
    let threads = args.next().and_then(|t| t.parse().ok()).unwrap_or(2);
    let conf = ServerConf {
        threads,
        work_stealing,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        fast_timeout_to_tokio_threshold_seconds: origin_timeouts.then_some(0),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(Opt::default(), conf);
    server.bootstrap();
    let mut proxy = pingora::proxy::http_proxy_service(
        &server.configuration,
        Plain {
            upstream,
            origin_timeouts,
        },
    );
    proxy.add_tcp(&listen);
    if let (Some(tls), Some(cert), Some(key)) = (args.next(), args.next(), args.next()) {
        let mut settings =
            pingora::listeners::tls::TlsSettings::intermediate(&cert, &key).expect("TLS files");
        settings.enable_h2();
        proxy.add_tls_with_settings(&tls, None, settings);
    }
    server.add_service(proxy);
    server.run_forever()
}
