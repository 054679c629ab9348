//! X-Forwarded-For and identity: any header values from any peer, never panic; an untrusted
//! peer is always its own client, and the client is always the peer or an address the headers
//! named.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use vestibule::identity::{IdentityPolicy, Source};

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let (addr, rest) = data.split_at(16);
    let mut octets = [0u8; 16];
    octets.copy_from_slice(addr);
    let peer = if rest[0] & 1 == 0 {
        IpAddr::from([octets[0], octets[1], octets[2], octets[3]])
    } else {
        IpAddr::from(octets)
    };
    let values: Vec<&[u8]> = rest[1..].split(|b| *b == b'\n').collect();
    let policy = IdentityPolicy {
        source: Source::Header(http::HeaderName::from_static("auth-user-id")),
        ipv6_prefix: 48 + (rest[0] >> 1) % 80,
        trusted_proxies: vec![
            "10.0.0.0/8".parse().unwrap(),
            "127.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ],
    };
    let client = policy.client_ip(peer, values.iter().copied());
    if !policy.is_trusted(peer) {
        assert_eq!(client, peer.to_canonical());
    }
    let id = policy.identify(client, peer, values.first().copied());
    assert!(!id.as_str().is_empty());
    assert!(id.as_str().len() <= 400, "identities stay small: {}", id.as_str().len());
});
