//! The reference for every load figure: a Pingora proxy with no features at all, same pingora
//! version, same thread count, one fixed upstream.
//!
//! `cargo run --release --example plain_proxy -- [--no-work-stealing] <listen> <upstream> <threads> [<tls_listen> <cert> <key>]`
//!
//! Its configuration is Pingora's default (work stealing on) unless `--no-work-stealing` says
//! otherwise: the scaling benchmark measures both.
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
}

#[async_trait]
impl ProxyHttp for Plain {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let work_stealing = !all.iter().any(|a| a == "--no-work-stealing");
    let mut args = all.into_iter().filter(|a| a != "--no-work-stealing");
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
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(Opt::default(), conf);
    server.bootstrap();
    let mut proxy = pingora::proxy::http_proxy_service(&server.configuration, Plain { upstream });
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
