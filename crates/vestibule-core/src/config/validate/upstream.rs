//! `[upstream]`: the origin's peers, resolved, and how to reach them.

use super::*;

impl Validator<'_> {
    pub(super) fn upstream(&mut self, u: &UpstreamFile) -> Option<UpstreamConfig> {
        if u.peers.is_empty() {
            self.err(
                "upstream.peers",
                "needs at least one origin, e.g. [\"127.0.0.1:8000\"]",
            );
        }
        let mut peers = Vec::new();
        for (i, p) in u.peers.iter().enumerate() {
            let key = format!("upstream.peers[{i}]");
            let name = p.trim();
            let Some((host, port)) = name.rsplit_once(':') else {
                self.err(key, format!("\"{p}\" needs a port, like \"{p}:80\""));
                continue;
            };
            if port.parse::<u16>().is_err() {
                self.err(key, format!("\"{p}\" has an invalid port"));
                continue;
            }
            let resolved = self.host.resolve(name);
            match resolved {
                Ok(mut addrs) => {
                    addrs.dedup();
                    if addrs.is_empty() {
                        self.err(key, format!("\"{p}\" resolves to no address"));
                    } else {
                        let host = host
                            .trim_start_matches('[')
                            .trim_end_matches(']')
                            .to_owned();
                        peers.push(PeerConfig {
                            name: name.to_owned(),
                            host,
                            addrs,
                        });
                    }
                }
                Err(e) => self.err(key, format!("cannot resolve \"{p}\": {e}")),
            }
        }
        if u.connect_timeout.is_zero() {
            self.err("upstream.connect_timeout", "must be more than 0s");
        }
        if u.read_timeout.is_zero() {
            self.err("upstream.read_timeout", "must be more than 0s");
        }
        if !u.tls && !u.sni.is_empty() {
            self.err("upstream.sni", "only applies when upstream.tls = true");
        }
        let ca_file = Some(u.ca_file.trim())
            .filter(|f| !f.is_empty())
            .map(|f| self.resolve(f));
        if let Some(path) = &ca_file {
            if !u.tls {
                self.err("upstream.ca_file", "only applies when upstream.tls = true");
            }
            match self.host.read(path) {
                Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => {}
                Ok(_) => self.err(
                    "upstream.ca_file",
                    format!("{} holds no PEM certificate", path.display()),
                ),
                Err(e) => self.err(
                    "upstream.ca_file",
                    format!("cannot read {}: {e}", path.display()),
                ),
            }
        }
        if u.keepalive_pool_size == 0 || u.keepalive_pool_size > 65_536 {
            self.err(
                "upstream.keepalive_pool_size",
                format!("must be between 1 and 65536, got {}", u.keepalive_pool_size),
            );
        }
        Some(UpstreamConfig {
            peers,
            tls: u.tls,
            sni: u.sni.clone(),
            ca_file,
            connect_timeout: u.connect_timeout,
            read_timeout: u.read_timeout,
            health_check: u.health_check,
            keepalive_pool_size: u.keepalive_pool_size,
        })
    }
}
