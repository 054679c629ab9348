//! The origin pool: round-robin over `upstream.peers`, skipping peers the health check marked
//! down.
//!
//! Peers were resolved when the config was loaded, so nothing here does DNS or can fail on a
//! request. A pool lives in a config snapshot; a reload that leaves `[upstream]` unchanged keeps
//! the same pool, and with it the peers' health.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pingora::lb::health_check::TcpHealthCheck;
use pingora::lb::selection::RoundRobin;
use pingora::lb::LoadBalancer;
use pingora::upstreams::peer::{HttpPeer, PeerOptions};

use crate::config::UpstreamConfig;

/// Idle pooled connections to the origin are closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// An origin peer's timeouts: `connect` to connect (twice that for the whole connection, TLS
/// included), `read` for each read and write, and [`IDLE_TIMEOUT`] for a pooled connection. The
/// plain reference proxy's `--origin-timeouts` sets the same.
pub fn set_timeouts(options: &mut PeerOptions, connect: Duration, read: Duration) {
    options.connection_timeout = Some(connect);
    options.total_connection_timeout = Some(connect * 2);
    options.read_timeout = Some(read);
    options.write_timeout = Some(read);
    options.idle_timeout = Some(IDLE_TIMEOUT);
}

pub struct Upstream {
    config: UpstreamConfig,
    lb: LoadBalancer<RoundRobin>,
    /// The SNI of each address: `upstream.sni`, or the host name the peer was written with.
    peers: HashMap<SocketAddr, String>,
    /// With a single address, it and its SNI: selection needs no round robin and no lookup.
    single: Option<(SocketAddr, String)>,
    last_probe: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("config", &self.config)
            .finish()
    }
}

impl Upstream {
    pub fn new(config: &UpstreamConfig) -> std::io::Result<Upstream> {
        let mut peers = HashMap::new();
        let mut addrs = Vec::new();
        for peer in &config.peers {
            for addr in &peer.addrs {
                let name = if config.sni.is_empty() {
                    peer.host.clone()
                } else {
                    config.sni.clone()
                };
                peers.insert(*addr, name);
                addrs.push(*addr);
            }
        }
        let mut lb = LoadBalancer::<RoundRobin>::try_from_iter(addrs)?;
        let mut check = if config.tls {
            let name = peers.values().next().cloned().unwrap_or_default();
            TcpHealthCheck::new_tls(&name)
        } else {
            TcpHealthCheck::new()
        };
        check.peer_template.options.connection_timeout = Some(config.connect_timeout);
        lb.set_health_check(check);
        lb.parallel_health_check = true;
        let single = match lb
            .backends()
            .get_backend()
            .iter()
            .collect::<Vec<_>>()
            .as_slice()
        {
            [only] => only
                .addr
                .as_inet()
                .and_then(|addr| Some((*addr, peers.get(addr)?.clone()))),
            _ => None,
        };
        Ok(Upstream {
            config: config.clone(),
            lb,
            peers,
            single,
            // The first probe waits one interval: peers start healthy, and an origin started
            // alongside us gets a moment to listen.
            last_probe: Mutex::new(Some(Instant::now())),
        })
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// The next healthy peer in round-robin order, skipping addresses already tried for this
    /// request. When every peer is marked down, the peers are tried anyway ("panic mode"): a
    /// probe can be wrong for a moment (an origin restarting), and a refused connection costs
    /// little. `None` when every peer has been tried.
    pub(crate) fn select(&self, tried: &[SocketAddr]) -> Option<Box<HttpPeer>> {
        if let Some((addr, sni)) = &self.single {
            // One origin: healthy or not (panic mode), it is the only one to try.
            return (!tried.contains(addr)).then(|| self.peer(*addr, sni));
        }
        let probing = !self.config.health_check.is_zero();
        let untried =
            |b: &pingora::lb::Backend| b.addr.as_inet().is_some_and(|a| !tried.contains(a));
        let backend = self
            .lb
            .select_with(b"", 256, |b, healthy| (healthy || !probing) && untried(b))
            .or_else(|| {
                (self.healthy_count() == 0)
                    .then(|| self.lb.select_with(b"", 256, |b, _| untried(b)))
                    .flatten()
            })?;
        let addr = backend.addr.as_inet()?;
        Some(self.peer(*addr, self.peers.get(addr)?))
    }

    /// The peer of one request: TLS and SNI as configured, the config's timeouts.
    ///
    /// Built afresh each time: cloning a ready `HttpPeer` copies its option fields one by one,
    /// about twice what building one costs (callgrind: ~290 instructions against ~140).
    fn peer(&self, addr: SocketAddr, sni: &str) -> Box<HttpPeer> {
        let config = &self.config;
        let mut peer = HttpPeer::new(addr, config.tls, sni.to_owned());
        set_timeouts(
            &mut peer.options,
            config.connect_timeout,
            config.read_timeout,
        );
        Box::new(peer)
    }

    /// Number of resolved peer addresses.
    pub(crate) fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// Peers currently considered healthy (all of them when probing is off).
    pub(crate) fn healthy_count(&self) -> usize {
        if self.config.health_check.is_zero() {
            return self.peer_count();
        }
        let backends = self.lb.backends();
        backends
            .get_backend()
            .iter()
            .filter(|b| backends.ready(b))
            .count()
    }

    /// Health of each peer, for `/status`.
    pub(crate) fn peer_health(&self) -> Vec<(SocketAddr, bool)> {
        let backends = self.lb.backends();
        let probing = !self.config.health_check.is_zero();
        let mut out: Vec<(SocketAddr, bool)> = backends
            .get_backend()
            .iter()
            .filter_map(|b| {
                b.addr
                    .as_inet()
                    .map(|a| (*a, !probing || backends.ready(b)))
            })
            .collect();
        out.sort();
        out
    }

    /// Probes every peer if `health_check` has passed since the last probe. Called often by the
    /// background service; cheap when nothing is due.
    pub(crate) async fn probe_if_due(&self, now: Instant) {
        let interval = self.config.health_check;
        if interval.is_zero() {
            return;
        }
        {
            let mut last = self.last_probe.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < interval) {
                return;
            }
            *last = Some(now);
        }
        self.lb.backends().run_health_check(true).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PeerConfig;
    use pingora::upstreams::peer::Peer;

    fn config(peers: &[(&str, &[&str])], tls: bool, sni: &str) -> UpstreamConfig {
        UpstreamConfig {
            peers: peers
                .iter()
                .map(|(host, addrs)| PeerConfig {
                    name: format!("{host}:8443"),
                    host: host.to_string(),
                    addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
                })
                .collect(),
            tls,
            sni: sni.into(),
            ca_file: None,
            connect_timeout: Duration::from_millis(1500),
            read_timeout: Duration::from_secs(7),
            health_check: Duration::ZERO,
            keepalive_pool_size: 8,
        }
    }

    /// Every request's peer carries the address, TLS, SNI and timeouts the config gives.
    fn assert_configured(peer: &HttpPeer, addr: &str, tls: bool, sni: &str) {
        assert_eq!(peer.address().to_string(), addr);
        assert_eq!(peer.tls(), tls);
        assert_eq!(peer.sni(), sni);
        let o = &peer.options;
        assert_eq!(o.connection_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(o.total_connection_timeout, Some(Duration::from_secs(3)));
        assert_eq!(o.read_timeout, Some(Duration::from_secs(7)));
        assert_eq!(o.write_timeout, Some(Duration::from_secs(7)));
        assert_eq!(o.idle_timeout, Some(IDLE_TIMEOUT));
    }

    #[test]
    fn a_single_origin_is_tried_once_with_its_settings() {
        let up = Upstream::new(&config(&[("origin.test", &["127.0.0.1:9001"])], true, "")).unwrap();
        let peer = up.select(&[]).unwrap();
        assert_configured(&peer, "127.0.0.1:9001", true, "origin.test");
        assert!(up.select(&["127.0.0.1:9001".parse().unwrap()]).is_none());
    }

    #[test]
    fn several_origins_take_turns_and_share_the_configured_sni() {
        let c = config(
            &[
                ("a.test", &["127.0.0.1:9001"]),
                ("b.test", &["127.0.0.1:9002"]),
            ],
            false,
            "origin.example",
        );
        let up = Upstream::new(&c).unwrap();
        let first = up.select(&[]).unwrap();
        let second = up.select(&[]).unwrap();
        let mut seen = [first.address().to_string(), second.address().to_string()];
        seen.sort();
        assert_eq!(seen, ["127.0.0.1:9001", "127.0.0.1:9002"]);
        for p in [&first, &second] {
            assert_configured(p, &p.address().to_string(), false, "origin.example");
        }
        // A retry never goes back to an address already tried.
        let tried = [*first.address().as_inet().unwrap()];
        let retry = up.select(&tried).unwrap();
        assert_eq!(retry.address(), second.address());
        let both = [tried[0], *second.address().as_inet().unwrap()];
        assert!(up.select(&both).is_none());
    }
}
