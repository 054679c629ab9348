//! Who counts as one user.
//!
//! Tokens are bound to an identity, rate-limit keys start from it, and `bypass_cidrs` test the
//! client address it resolves. The module is pure: it sees the peer address and the raw header
//! values, never a socket.
//!
//! The client address is the TCP peer, unless the peer is one of `trusted_proxies`: then
//! `X-Forwarded-For` is read from the right, skipping hops that are themselves trusted, and the
//! first untrusted hop is the client ("rightmost untrusted hop wins"). Whatever a client writes
//! into the header sits to the left of what its first trusted proxy appended, so it is never
//! reached. IPv4-mapped IPv6 addresses count as the IPv4 address they carry, and IPv6 clients are
//! grouped by their `ipv6_prefix` (a /64 by default: one household or one server).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use ipnet::{IpNet, Ipv6Net};

/// Hops of `X-Forwarded-For` examined at most; longer chains keep their rightmost entries.
const MAX_HOPS: usize = 32;
/// Header identities longer than this are replaced by a digest so tokens stay small.
const MAX_HEADER_IDENTITY: usize = 128;

/// Where an identity comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The client address (after trusted proxies), IPv6 grouped by prefix.
    ClientIp,
    /// A header set by a trusted layer (an auth proxy). Requests without it fall back to the
    /// client address.
    Header(http::HeaderName),
}

/// The `[identity]` section, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityPolicy {
    pub source: Source,
    pub ipv6_prefix: u8,
    pub trusted_proxies: Vec<IpNet>,
}

impl Default for IdentityPolicy {
    fn default() -> Self {
        IdentityPolicy {
            source: Source::ClientIp,
            ipv6_prefix: 64,
            trusted_proxies: Vec::new(),
        }
    }
}

/// One user, as tokens and rate-limit keys see them: the `uid` of a token, already in its
/// percent-encoded form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity(String);

impl Identity {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// An identity for an address, grouped as `policy` says (tests and the simulator use it).
    pub fn of_ip(ip: IpAddr, ipv6_prefix: u8) -> Identity {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Identity(ipv4_text(v4)),
            IpAddr::V6(v6) if ipv6_prefix >= 128 => Identity(v6.to_string()),
            IpAddr::V6(v6) => {
                let net = Ipv6Net::new(v6, ipv6_prefix)
                    .map(|n| n.trunc())
                    .unwrap_or_else(|_| Ipv6Net::from(v6));
                Identity(net.to_string())
            }
        }
    }

    /// An identity given in its token form (`2001:db8::/64`, `alice%40example.com`), as an
    /// operator copies it from a token.
    pub fn from_encoded(uid: &str) -> Identity {
        Identity(uid.to_owned())
    }

    /// An identity taken from a header value. Long values are replaced by a SHA-256 digest so a
    /// token never grows with what the trusted layer writes.
    fn of_header(value: &[u8]) -> Identity {
        if value.len() > MAX_HEADER_IDENTITY {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(value);
            return Identity(format!("h-{}", hex::encode(&digest[..16])));
        }
        Identity(encode_uid(value))
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl IdentityPolicy {
    /// Whether `ip` is one of `trusted_proxies`.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted_proxies.iter().any(|net| net.contains(&ip))
    }

    /// The client's address. `xff` yields the raw `X-Forwarded-For` values in the order the
    /// headers arrived; they are read only when `peer` is trusted.
    pub fn client_ip<'a, I>(&self, peer: IpAddr, xff: I) -> IpAddr
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut hops: Vec<&[u8]> = Vec::new();
        for value in xff {
            for hop in value.split(|b| *b == b',') {
                if hops.len() == MAX_HOPS {
                    hops.remove(0);
                }
                hops.push(hop);
            }
        }
        // Walking leftwards, each hop was appended by the trusted hop to its right.
        let mut nearest_trusted = peer;
        for hop in hops.iter().rev() {
            let trimmed = trim_ascii(hop);
            if trimmed.is_empty() {
                continue;
            }
            match parse_hop(trimmed) {
                Some(ip) if self.is_trusted(ip) => nearest_trusted = ip,
                Some(ip) => return ip,
                // A trusted proxy would not append garbage: anything from here on was written
                // by someone we do not believe.
                None => return nearest_trusted,
            }
        }
        nearest_trusted
    }

    /// The identity of a request whose client address is `client_ip`. `header` is the value of
    /// the identity header when `source` names one; it is believed only from a trusted peer
    /// when `trusted_proxies` is set, since anyone can send it.
    pub fn identify(&self, client_ip: IpAddr, peer: IpAddr, header: Option<&[u8]>) -> Identity {
        if let (Source::Header(_), Some(value)) = (&self.source, header) {
            // Only a trusted layer may name the user (config validation requires one).
            let believed = self.is_trusted(peer);
            let value = trim_ascii(value);
            if believed && !value.is_empty() {
                return Identity::of_header(value);
            }
        }
        Identity::of_ip(client_ip, self.ipv6_prefix)
    }

    /// The header to read for `identify`, if any.
    pub(crate) fn header_name(&self) -> Option<&http::HeaderName> {
        match &self.source {
            Source::Header(name) => Some(name),
            Source::ClientIp => None,
        }
    }
}

/// The longest dotted quad: `255.255.255.255`.
pub const IPV4_TEXT_MAX: usize = 15;

/// Writes the dotted-quad text of an IPv4 address into `buf` and returns it (a slice of `buf`):
/// a header value is made from the bytes with one copy, without a `String` on the way.
pub fn write_ipv4(ip: std::net::Ipv4Addr, buf: &mut [u8; IPV4_TEXT_MAX]) -> &[u8] {
    let mut n = 0;
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            buf[n] = b'.';
            n += 1;
        }
        if octet >= 100 {
            buf[n] = b'0' + octet / 100;
            n += 1;
        }
        if octet >= 10 {
            buf[n] = b'0' + octet / 10 % 10;
            n += 1;
        }
        buf[n] = b'0' + octet % 10;
        n += 1;
    }
    &buf[..n]
}

/// Dotted-quad text of an IPv4 address, without the formatting machinery (on every request).
pub(crate) fn ipv4_text(ip: std::net::Ipv4Addr) -> String {
    // ASCII digits and dots: always UTF-8.
    String::from(std::str::from_utf8(write_ipv4(ip, &mut [0; IPV4_TEXT_MAX])).unwrap_or_default())
}

/// Text of an address as `X-Forwarded-For` and logs write it.
pub fn ip_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => ipv4_text(v4),
        IpAddr::V6(v6) => v6.to_string(),
    }
}

/// One `X-Forwarded-For` entry: an address, optionally with a port or in brackets.
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(sock) = text.parse::<SocketAddr>() {
        return Some(sock.ip().to_canonical());
    }
    let inner = text.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// Percent-encodes every byte outside `[A-Za-z0-9.:_/-]` (uppercase hex), so a uid never
/// breaks the `&`/`=` framing or the cookie syntax.
pub(crate) fn encode_uid(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if is_uid_byte(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A byte a uid keeps as it is.
pub(crate) fn is_uid_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'_' | b'/' | b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(trusted: &[&str]) -> IdentityPolicy {
        IdentityPolicy {
            trusted_proxies: trusted.iter().map(|s| s.parse().unwrap()).collect(),
            ..IdentityPolicy::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn client(p: &IdentityPolicy, peer: &str, xff: &[&str]) -> IpAddr {
        p.client_ip(ip(peer), xff.iter().map(|s| s.as_bytes()))
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_claims() {
        let p = policy(&["10.0.0.0/8"]);
        assert_eq!(client(&p, "203.0.113.9", &["1.2.3.4"]), ip("203.0.113.9"));
        let none = policy(&[]);
        assert_eq!(
            client(&none, "203.0.113.9", &["10.0.0.1"]),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn rightmost_untrusted_hop_wins() {
        let p = policy(&["10.0.0.0/8"]);
        // The client forged "6.6.6.6" in front; our proxy appended the real address.
        assert_eq!(
            client(&p, "10.0.0.2", &["6.6.6.6, 198.51.100.7"]),
            ip("198.51.100.7")
        );
        // Two trusted hops in a row are skipped.
        assert_eq!(
            client(&p, "10.0.0.2", &["6.6.6.6, 198.51.100.7, 10.1.1.1"]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn several_xff_headers_are_one_list_in_order() {
        let p = policy(&["10.0.0.0/8"]);
        assert_eq!(
            client(&p, "10.0.0.2", &["6.6.6.6", "198.51.100.7", "10.9.9.9"]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn malformed_hops_stop_the_walk() {
        let p = policy(&["10.0.0.0/8"]);
        // Garbage appended by (what claims to be) a trusted hop: believe nothing beyond it.
        assert_eq!(
            client(&p, "10.0.0.2", &["1.2.3.4, unknown"]),
            ip("10.0.0.2")
        );
        assert_eq!(
            client(&p, "10.0.0.2", &["1.2.3.4, 999.1.1.1, 10.0.0.3"]),
            ip("10.0.0.3")
        );
        // Garbage to the left of a real client is never reached.
        assert_eq!(
            client(&p, "10.0.0.2", &["<script>, 198.51.100.7"]),
            ip("198.51.100.7")
        );
        // Empty entries are skipped, not fatal.
        assert_eq!(
            client(&p, "10.0.0.2", &["198.51.100.7, ,"]),
            ip("198.51.100.7")
        );
        assert_eq!(client(&p, "10.0.0.2", &[""]), ip("10.0.0.2"));
        // Non-UTF-8 bytes.
        assert_eq!(
            p.client_ip(ip("10.0.0.2"), [&b"\xff\xfe"[..]]),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn ports_brackets_and_mapped_addresses() {
        let p = policy(&["10.0.0.0/8", "::ffff:0:0/96"]);
        assert_eq!(
            client(&p, "10.0.0.2", &["198.51.100.7:4711"]),
            ip("198.51.100.7")
        );
        assert_eq!(
            client(&p, "10.0.0.2", &["[2001:db8::1]:443"]),
            ip("2001:db8::1")
        );
        assert_eq!(
            client(&p, "10.0.0.2", &["[2001:db8::1]"]),
            ip("2001:db8::1")
        );
        // A mapped peer counts as its IPv4 address for the trust check.
        assert_eq!(
            client(&p, "::ffff:10.0.0.2", &["198.51.100.7"]),
            ip("198.51.100.7")
        );
        // A mapped hop is reported as IPv4.
        assert_eq!(
            client(&p, "10.0.0.2", &["::ffff:198.51.100.7"]),
            ip("198.51.100.7")
        );
        // A mapped hop inside a trusted IPv4 range is trusted.
        assert_eq!(
            client(&p, "10.0.0.2", &["198.51.100.7, ::ffff:10.0.0.9"]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn all_trusted_means_leftmost() {
        let p = policy(&["10.0.0.0/8"]);
        assert_eq!(
            client(&p, "10.0.0.2", &["10.0.0.5, 10.0.0.4"]),
            ip("10.0.0.5")
        );
    }

    #[test]
    fn long_chains_are_bounded() {
        let p = policy(&["10.0.0.0/8"]);
        let mut chain: Vec<String> = (0..10_000)
            .map(|i| format!("6.6.{}.{}", i / 256 % 256, i % 256))
            .collect();
        chain.push("198.51.100.7".into());
        let joined = chain.join(",");
        assert_eq!(client(&p, "10.0.0.2", &[&joined]), ip("198.51.100.7"));
    }

    #[test]
    fn ipv4_text_matches_display() {
        for ip in [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.100.9",
            "192.168.1.10",
            "1.20.255.3",
        ] {
            let v4: std::net::Ipv4Addr = ip.parse().unwrap();
            assert_eq!(ipv4_text(v4), v4.to_string());
        }
        // Every octet at each digit-count boundary, in every position.
        let edges = [0u8, 1, 9, 10, 11, 99, 100, 101, 199, 200, 249, 250, 255];
        for a in edges {
            for b in edges {
                for c in edges {
                    for d in edges {
                        let v4 = std::net::Ipv4Addr::new(a, b, c, d);
                        let text = ipv4_text(v4);
                        assert_eq!(text, v4.to_string());
                        assert_eq!(write_ipv4(v4, &mut [b'x'; IPV4_TEXT_MAX]), text.as_bytes());
                    }
                }
            }
        }
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let a = Identity::of_ip(ip("2001:db8:1:2:aaaa::1"), 64);
        let b = Identity::of_ip(ip("2001:db8:1:2:bbbb::9"), 64);
        let c = Identity::of_ip(ip("2001:db8:1:3::1"), 64);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.as_str(), "2001:db8:1:2::/64");
        assert_eq!(
            Identity::of_ip(ip("2001:db8::1"), 128).as_str(),
            "2001:db8::1"
        );
        assert_eq!(
            Identity::of_ip(ip("::ffff:192.0.2.1"), 64).as_str(),
            "192.0.2.1"
        );
        assert_eq!(Identity::of_ip(ip("192.0.2.1"), 64).as_str(), "192.0.2.1");
    }

    #[test]
    fn header_source() {
        let mut p = policy(&["127.0.0.1/32"]);
        p.source = Source::Header(http::HeaderName::from_static("auth-user-id"));
        let peer = ip("127.0.0.1");
        let id = p.identify(peer, peer, Some(b"alice@example.com"));
        assert_eq!(id.as_str(), "alice%40example.com");
        // Missing or blank header falls back to the address.
        assert_eq!(p.identify(peer, peer, None).as_str(), "127.0.0.1");
        assert_eq!(p.identify(peer, peer, Some(b"  ")).as_str(), "127.0.0.1");
        // Huge values are digested, not stored.
        let huge = vec![b'x'; 10_000];
        let id = p.identify(peer, peer, Some(&huge));
        assert!(id.as_str().starts_with("h-") && id.as_str().len() == 34);
        // Only trusted proxies may set the header; with none, nobody may.
        p.trusted_proxies = vec![];
        assert_eq!(p.identify(peer, peer, Some(b"alice")).as_str(), "127.0.0.1");
        p.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()];
        let outsider = ip("203.0.113.1");
        assert_eq!(
            p.identify(outsider, outsider, Some(b"alice")).as_str(),
            "203.0.113.1"
        );
        assert_eq!(
            p.identify(outsider, ip("10.0.0.1"), Some(b"alice"))
                .as_str(),
            "alice"
        );
    }
}
