//! The PROXY protocol (v1 text, v2 binary) in front of a connection: what a layer-4
//! balancer (HAProxy, AWS NLB) sends first, to say who the client is.
//!
//! Parsing is `ppp`'s; this module decides what to do with the bytes: a whole header, one that
//! may still be arriving, or something that is not a PROXY header at all. A header may be at
//! most [`MAX_HEADER`] bytes: a v1 line is at most 107, a balancer's v2 header with its TLVs a
//! few hundred.

use std::net::SocketAddr;

use ppp::{v1, v2, HeaderResult, PartialResult};

/// The longest PROXY header accepted.
pub const MAX_HEADER: usize = 16 + 2048;
/// What every v2 header starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// The longest v1 line, CRLF included.
const V1_MAX: usize = 107;

/// What the bytes at the start of a connection are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole header, `len` bytes long, naming the client `source`: `None` for a v2 LOCAL
    /// header (a balancer's own health check), v1 UNKNOWN, or an address family without one
    /// (unix sockets): the connection's peer stays the client.
    Complete {
        len: usize,
        source: Option<SocketAddr>,
    },
    /// The start of a header: read more.
    Incomplete,
    /// Not a PROXY header, a broken one, or too long.
    Invalid,
}

fn complete_v1(h: &v1::Header<'_>, len: usize) -> Parsed {
    Parsed::Complete {
        len,
        source: match h.addresses {
            v1::Addresses::Tcp4(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
            v1::Addresses::Tcp6(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
            v1::Addresses::Unknown => None,
        },
    }
}

/// What the first bytes of a connection are.
pub fn parse(buf: &[u8]) -> Parsed {
    let n = buf.len().min(V2_SIGNATURE.len());
    let v1 = buf[..n.min(V1_PREFIX.len())] == V1_PREFIX[..n.min(V1_PREFIX.len())];
    let v2 = buf[..n] == V2_SIGNATURE[..n];
    if !v1 && !v2 {
        return Parsed::Invalid;
    }
    if v1 {
        // A v1 header is one line: judge it once it has ended (at most 107 bytes).
        return match memchr::memchr(b'\n', buf) {
            Some(end) => match v1::Header::try_from(&buf[..=end]) {
                Ok(h) => complete_v1(&h, end + 1),
                Err(_) => Parsed::Invalid,
            },
            None if buf.len() < V1_MAX => Parsed::Incomplete,
            None => Parsed::Invalid,
        };
    }
    let result = HeaderResult::parse(buf);
    if result.is_incomplete() {
        return if buf.len() >= MAX_HEADER {
            Parsed::Invalid
        } else {
            Parsed::Incomplete
        };
    }
    let parsed = match result {
        HeaderResult::V2(Ok(h)) => Parsed::Complete {
            len: h.header.len(),
            source: match (h.command, h.addresses) {
                (v2::Command::Local, _) => None,
                (_, v2::Addresses::IPv4(a)) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                (_, v2::Addresses::IPv6(a)) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                _ => None,
            },
        },
        _ => Parsed::Invalid,
    };
    match parsed {
        Parsed::Complete { len, .. } if len == 0 || len > buf.len() || len > MAX_HEADER => {
            Parsed::Invalid
        }
        p => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 header: PROXY (or LOCAL) over TCP/IPv4 from `src`, with `tlv` extra bytes.
    pub fn v2(local: bool, src: [u8; 4], port: u16, tlv: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(if local { 0x20 } else { 0x21 });
        h.push(0x11);
        h.extend_from_slice(&((12 + tlv.len()) as u16).to_be_bytes());
        h.extend_from_slice(&src);
        h.extend_from_slice(&[10, 0, 0, 1]);
        h.extend_from_slice(&port.to_be_bytes());
        h.extend_from_slice(&443u16.to_be_bytes());
        h.extend_from_slice(tlv);
        h
    }

    #[test]
    fn v1_headers() {
        let line = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 80\r\n";
        let mut buf = line.to_vec();
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            parse(&buf),
            Parsed::Complete {
                len: line.len(),
                source: Some("203.0.113.7:51000".parse().unwrap())
            }
        );
        let six = b"PROXY TCP6 2001:db8::7 2001:db8::1 51000 80\r\n";
        assert_eq!(
            parse(six),
            Parsed::Complete {
                len: six.len(),
                source: Some("[2001:db8::7]:51000".parse().unwrap())
            }
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Parsed::Complete {
                len: 15,
                source: None
            }
        );
        // Arriving byte by byte: incomplete until the line ends.
        for i in 1..line.len() {
            assert_eq!(parse(&line[..i]), Parsed::Incomplete, "{i} bytes");
        }
    }

    #[test]
    fn v2_headers() {
        let h = v2(false, [198, 51, 100, 9], 40000, &[]);
        let mut buf = h.clone();
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            parse(&buf),
            Parsed::Complete {
                len: 28,
                source: Some("198.51.100.9:40000".parse().unwrap())
            }
        );
        // TLVs (here a NOOP of 3 bytes) count in the length.
        let with_tlv = v2(false, [198, 51, 100, 9], 40000, &[0x04, 0, 0]);
        assert!(matches!(parse(&with_tlv), Parsed::Complete { len: 31, .. }));
        // LOCAL: a health check; the peer stays the client.
        assert_eq!(
            parse(&v2(true, [1, 2, 3, 4], 1, &[])),
            Parsed::Complete {
                len: 28,
                source: None
            }
        );
        for i in 1..h.len() {
            assert_eq!(parse(&h[..i]), Parsed::Incomplete, "{i} bytes");
        }
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Parsed::Invalid);
        assert_eq!(parse(b"PROXY TCP4 nonsense\r\n"), Parsed::Invalid);
        assert_eq!(
            parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 80\r\n"),
            Parsed::Invalid
        );
        assert_eq!(parse(b"\x16\x03\x01"), Parsed::Invalid);
        // A v2 header claiming more than fits is refused once the limit is read.
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        huge.resize(MAX_HEADER, 0);
        assert_eq!(parse(&huge), Parsed::Invalid);
        // A v1 line that never ends is refused at the v1 limit.
        let mut long = b"PROXY TCP4 ".to_vec();
        long.resize(107, b'1');
        assert_eq!(parse(&long), Parsed::Invalid);
        assert_eq!(parse(&long[..106]), Parsed::Incomplete);
    }
}
