//! `vestibule verify-draw --url U | --file F`: rechecks a verifiable draw after its start
//! ([`vestibule_core::room::draw::verify`]). Exit 0 when everything matches, 1 naming the first
//! mismatch, 2 when the draw cannot be read (unreachable, not JSON, not revealed yet).
//!
//! The URL is fetched with one plain GET (`http://`, or `https://` checked against the system's
//! trusted roots, or those `SSL_CERT_FILE` names), no redirects followed, within the same
//! deadlines as `vestibule ctl`. What the server sent is printed escaped.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use vestibule::ctl::http;
use vestibule_core::room::draw::{verify_with, Expect, Unverified};

pub fn run(url: Option<&str>, file: Option<&Path>, expect: Expect) -> ExitCode {
    let unreadable = |m: String| {
        eprintln!("vestibule verify-draw: {m}");
        ExitCode::from(2)
    };
    let bytes = match (url, file) {
        (_, Some(path)) => match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return unreadable(format!("{}: {e}", path.display())),
        },
        (Some(url), None) => match fetch(url) {
            Ok(b) => b,
            Err(e) => return unreadable(format!("{url}: {e}")),
        },
        (None, None) => return unreadable("give --url or --file".into()),
    };
    match verify_with(&bytes, &expect) {
        Ok(checked) => {
            println!(
                "the draw checks out: the commitment is sha256(seed){}, and all {} receipts' \
                 places are HMAC-SHA256(seed, receipt), listed in order",
                if expect.commitment.is_some() {
                    " and the one published before the start"
                } else {
                    ""
                },
                checked.receipts
            );
            for (receipt, place, rank) in &checked.found {
                println!(
                    "{receipt}: place {place}, number {} of {} in the draw's order",
                    rank + 1,
                    checked.receipts
                );
            }
            if checked.receipts == 0 {
                eprintln!(
                    "vestibule verify-draw: note: the draw lists no receipts (nobody pre-queued, \
                     or it is read after its receipts were forgotten)"
                );
            }
            ExitCode::SUCCESS
        }
        Err(Unverified::Mismatch(m)) => {
            eprintln!("vestibule verify-draw: MISMATCH: {m}");
            ExitCode::FAILURE
        }
        Err(Unverified::Unreadable(m)) => unreadable(m),
    }
}

/// The body of a 200 answer to `GET url`.
fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err("only http:// and https:// URLs are read".into());
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err("no host in the URL".into());
    }
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') && p.parse::<u16>().is_ok() => h,
        _ => authority,
    };
    let answer = if tls {
        let port_given = authority.len() > host.len();
        let addr = if port_given {
            authority.to_owned()
        } else {
            format!("{authority}:443")
        };
        https_get(&addr, host.trim_matches(['[', ']']), authority, path)?
    } else {
        let at = http::Endpoint::parse(&format!("http://{authority}"))?;
        http::request(&at, "GET", path, None, None)?
    };
    if answer.status != 200 {
        let body = String::from_utf8_lossy(&answer.body);
        let body: String = body
            .chars()
            .take(300)
            .flat_map(char::escape_debug)
            .collect();
        return Err(format!("answered {}: {body}", answer.status));
    }
    Ok(answer.body)
}

fn https_get(addr: &str, host: &str, authority: &str, path: &str) -> Result<http::Answer, String> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs()
        .map_err(|e| format!("cannot read the system's trusted roots: {e}"))?;
    roots.add_parsable_certificates(native);
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host}: {e}"))?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let addrs: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .collect();
    let mut last = format!("cannot resolve {addr}");
    let mut tcp = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, http::TIMEOUT) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {a}: {e}"),
        }
    }
    let tcp = tcp.ok_or(last)?;
    tcp.set_read_timeout(Some(http::TIMEOUT))
        .and_then(|()| tcp.set_write_timeout(Some(http::TIMEOUT)))
        .map_err(|e| e.to_string())?;
    // One deadline for the whole exchange, as for plain HTTP: a server that trickles bytes
    // cannot hold the check.
    let tcp = http::Deadline {
        stream: tcp,
        until: std::time::Instant::now() + http::TIMEOUT * http::ANSWER_TIMEOUTS,
    };
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: vestibule-verify-draw/{}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| e.to_string())?;
    http::read_answer(BufReader::new(stream), false)
}
