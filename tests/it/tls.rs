//! TLS termination and HTTP/2: the real server with certificates made by a test CA,
//! spoken to by reqwest over rustls (HTTP/1.1 and HTTP/2 by ALPN), by reqwest with HTTP/2 prior
//! knowledge (h2c), and by a raw rustls client behind a PROXY header.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A test certificate authority and the folder its certificates are written to.
struct Pki {
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    dir: tempfile::TempDir,
}

/// One issued certificate: its files and the leaf in DER (what a client sees).
struct Issued {
    cert: PathBuf,
    key: PathBuf,
    der: Vec<u8>,
    pem: String,
}

impl Pki {
    fn new() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "vestibule test CA");
        let ca = params.self_signed(&ca_key).unwrap();
        Pki {
            ca,
            ca_key,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Issues a certificate for `names` into `<stem>.pem` / `<stem>.key`, replacing the files
    /// the way certbot and editors do (write aside, rename over).
    fn issue(&self, stem: &str, names: &[&str]) -> Issued {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let cert_path = self.dir.path().join(format!("{stem}.pem"));
        let key_path = self.dir.path().join(format!("{stem}.key"));
        let pem = format!("{}{}", cert.pem(), self.ca.pem());
        for (path, text) in [(&key_path, key.serialize_pem()), (&cert_path, pem.clone())] {
            let aside = path.with_extension("tmp");
            std::fs::write(&aside, text).unwrap();
            std::fs::rename(&aside, path).unwrap();
        }
        Issued {
            cert: cert_path,
            key: key_path,
            der: cert.der().to_vec(),
            pem,
        }
    }

    fn root(&self) -> reqwest::Certificate {
        reqwest::Certificate::from_pem(self.ca.pem().as_bytes()).unwrap()
    }

    fn rustls_roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        roots
    }
}

fn certificates(issued: &[&Issued]) -> String {
    let entries: Vec<String> = issued
        .iter()
        .map(|i| {
            format!(
                "{{ cert = \"{}\", key = \"{}\" }}",
                i.cert.display(),
                i.key.display()
            )
        })
        .collect();
    format!("[tls]\ncertificates = [{}]\n", entries.join(", "))
}

/// A client that trusts the test CA and sends `names` to `tls` (SNI as in a real deployment).
fn https_client(
    pki: &Pki,
    tls: SocketAddr,
    names: &[&str],
    http1_only: bool,
) -> reqwest::blocking::Client {
    let mut b = reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(pki.root())
        .tls_info(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20));
    for name in names {
        b = b.resolve(name, tls);
    }
    if http1_only {
        b = b.http1_only();
    }
    b.build().unwrap()
}

fn peer_cert(resp: &reqwest::blocking::Response) -> Vec<u8> {
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("a TLS response carries the server's certificate")
        .to_vec()
}

fn start_tls(origin: &Origin, tls: SocketAddr, server: &str, extra: &str) -> Vestibule {
    let v = Setup::new(origin.addr)
        .server(&format!("tls_listen = [\"{tls}\"]\n{server}"))
        .extra(extra)
        .start();
    assert!(
        wait_for_port(tls, Duration::from_secs(10)),
        "the TLS listener did not open:\n{}",
        v.log_text()
    );
    v
}

/// One site behind a TLS listener: the origin, a test CA, `site.test`'s certificate, and the
/// proxy, with `server` lines in `[server]` and `extra` tables after `[tls]`.
struct OneSite {
    origin: Origin,
    pki: Pki,
    site: Issued,
    tls: SocketAddr,
    v: Vestibule,
}

impl OneSite {
    fn start(server: &str, extra: &str) -> OneSite {
        let origin = Origin::start();
        let pki = Pki::new();
        let site = pki.issue("site", &["site.test"]);
        let tls = free_addr();
        let tables = format!("{}{extra}", certificates(&[&site]));
        let v = start_tls(&origin, tls, server, &tables);
        OneSite {
            origin,
            pki,
            site,
            tls,
            v,
        }
    }
}

fn echo(resp: reqwest::blocking::Response) -> Vec<(String, String)> {
    echo_headers(&resp.text().unwrap())
}

#[test]
fn sni_picks_the_certificate_over_http1_and_http2() {
    let origin = Origin::start();
    let pki = Pki::new();
    let site = pki.issue("site", &["site.test"]);
    let shop = pki.issue("shop", &["*.shop.test", "shop.test"]);
    let tls = free_addr();
    let v = start_tls(&origin, tls, "", &certificates(&[&site, &shop]));
    let port = tls.port();

    for http1 in [true, false] {
        let c = https_client(
            &pki,
            tls,
            &["site.test", "www.shop.test", "shop.test"],
            http1,
        );
        let resp = c
            .get(format!("https://site.test:{port}/__echo"))
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200);
        let version = if http1 {
            reqwest::Version::HTTP_11
        } else {
            reqwest::Version::HTTP_2
        };
        assert_eq!(resp.version(), version);
        assert_eq!(peer_cert(&resp), site.der);
        let headers = echo(resp);
        assert_eq!(header_values(&headers, "x-forwarded-proto"), ["https"]);
        // Over HTTP/2 the authority is the Host the origin (HTTP/1.1) receives.
        assert_eq!(
            header_values(&headers, "host"),
            [format!("site.test:{port}")]
        );

        for name in ["www.shop.test", "shop.test"] {
            let resp = c
                .get(format!("https://{name}:{port}/__echo"))
                .send()
                .unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(peer_cert(&resp), shop.der, "{name}");
        }
    }

    // No name that matches, or no SNI at all (an IP address): the first certificate answers.
    let lax = reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .resolve("elsewhere.test", tls)
        .build()
        .unwrap();
    for url in [
        format!("https://elsewhere.test:{port}/__echo"),
        format!("https://{tls}/__echo"),
    ] {
        let resp = lax.get(&url).send().unwrap();
        assert_eq!(resp.status(), 200, "{url}");
        assert_eq!(peer_cert(&resp), site.der, "{url}");
    }

    let metrics = v.metrics();
    assert!(metric_value(&metrics, "vestibule_tls_handshakes_total{result=\"ok\"}") >= 4.0);
    assert!(
        metric_value(
            &metrics,
            "vestibule_downstream_requests_total{protocol=\"h2\",tls=\"true\"}"
        ) >= 3.0
    );
    assert!(
        metric_value(
            &metrics,
            "vestibule_downstream_requests_total{protocol=\"http1\",tls=\"true\"}"
        ) >= 3.0
    );
    // The plain listener's requests say so, too.
    let plain = client().get(v.url("/__echo")).send().unwrap();
    assert_eq!(header_values(&echo(plain), "x-forwarded-proto"), ["http"]);
    assert!(
        v.metric("vestibule_downstream_requests_total{protocol=\"http1\",tls=\"false\"}") >= 1.0
    );

    // The certificates in /status and the metrics: names, expiry, file; never key material.
    let status = v.status();
    let certs = status["tls"]["certificates"].as_array().unwrap();
    assert_eq!(certs.len(), 2);
    assert_eq!(
        certs[1]["names"],
        serde_json::json!(["*.shop.test", "shop.test"])
    );
    assert_eq!(certs[0]["file"], site.cert.display().to_string());
    assert!(certs[0]["not_after"].as_str().unwrap().ends_with('Z'));
    let (_, text) = v.admin_get("/status");
    assert!(!text.contains("PRIVATE"), "{text}");
    let expiry =
        v.metric("vestibule_tls_certificate_expiry_timestamp_seconds{name=\"*.shop.test\"}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(expiry > now, "{expiry}");
}

#[test]
fn a_renewed_certificate_serves_new_handshakes_and_open_connections_stay() {
    let OneSite {
        origin: _origin,
        pki,
        site: first,
        tls,
        v,
    } = OneSite::start("", "");
    let url = format!("https://site.test:{}/__echo", tls.port());

    let kept = https_client(&pki, tls, &["site.test"], true);
    let resp = kept.get(&url).send().unwrap();
    assert_eq!(peer_cert(&resp), first.der);
    drop(resp.text());
    let handshakes = v.metric("vestibule_tls_handshakes_total{result=\"ok\"}");

    // certbot renews: new files, same paths. No restart, no SIGHUP.
    let generation = v.generation();
    let renewed = pki.issue("site", &["site.test"]);
    v.wait_generation_above(generation);
    assert!(v
        .log_text()
        .contains("tls: certificates reloaded (site.test until"));

    // The open connection goes on (no new handshake)...
    let resp = kept.get(&url).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(peer_cert(&resp), first.der);
    drop(resp.text());
    assert_eq!(
        v.metric("vestibule_tls_handshakes_total{result=\"ok\"}"),
        handshakes
    );
    // ...and the next handshake gets the renewed certificate.
    let fresh = https_client(&pki, tls, &["site.test"], false);
    let resp = fresh.get(&url).send().unwrap();
    assert_eq!(peer_cert(&resp), renewed.der);

    // A broken file is a failed reload: the certificate in service stays.
    let failures = v.metric("vestibule_config_reloads_total{result=\"failure\"}");
    std::fs::write(&renewed.cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        v.metric("vestibule_config_reloads_total{result=\"failure\"}") > failures
    }));
    let error = v.status()["last_reload_error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.contains("site.pem: tls.certificates[0].cert"),
        "{error}"
    );
    let resp = https_client(&pki, tls, &["site.test"], true)
        .get(&url)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(peer_cert(&resp), renewed.der);
    // A key that does not match is refused the same way.
    let other = pki.issue("other", &["other.test"]);
    std::fs::write(&renewed.key, std::fs::read(&other.key).unwrap()).unwrap();
    std::fs::write(&renewed.cert, &renewed.pem).unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        v.status()["last_reload_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("site.key: tls.certificates[0].key: does not match"))
    }));
    let resp = https_client(&pki, tls, &["site.test"], true)
        .get(&url)
        .send()
        .unwrap();
    assert_eq!(peer_cert(&resp), renewed.der);
    assert_eq!(v.proc.log_text().matches("panicked").count(), 0);
}

#[test]
fn check_names_the_file_of_a_bad_certificate_or_key() {
    let pki = Pki::new();
    let site = pki.issue("site", &["site.test"]);
    let other = pki.issue("other", &["other.test"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vestibule.toml");
    let write = |cert: &PathBuf, key: &PathBuf| {
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = [\"127.0.0.1:18080\"]\ntls_listen = [\"127.0.0.1:18443\"]\n\
                 [upstream]\npeers = [\"127.0.0.1:9\"]\n\
                 [tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n",
                cert.display(),
                key.display()
            ),
        )
        .unwrap();
    };
    write(&site.cert, &site.key);
    let (code, out, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");

    write(&site.cert, &other.key);
    let (code, _, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!(
            "{}: tls.certificates[0].key: does not match the certificate in {}",
            other.key.display(),
            site.cert.display()
        )),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let missing = dir.path().join("missing.pem");
    write(&missing, &site.key);
    let (code, _, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("missing.pem: tls.certificates[0].cert: cannot read"),
        "{err}"
    );

    // tls_listen without certificates says what is missing.
    std::fs::write(
        &config,
        "[server]\ntls_listen = [\"127.0.0.1:18443\"]\n[upstream]\npeers = [\"127.0.0.1:9\"]\n",
    )
    .unwrap();
    let (code, _, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("tls.certificates: needs at least one"),
        "{err}"
    );
}

#[test]
fn http2_serves_rooms_and_limits_and_joins_cookies_for_the_origin() {
    let extra = "[[room]]\nname = \"shop\"\npaths = [\"/shop\"]\npages = \"pages\"\nallow_percentage = 0\n\
         [[room]]\nname = \"open\"\npaths = [\"/open\"]\ncookie_name = \"wr_open\"\npages = \"pages\"\nallow_percentage = 100\nbypass_paths = [\"/open/static/\"]\n\
         [[rate_limit]]\nname = \"tight\"\npaths = [\"/limited\"]\nalgorithm = \"token_bucket\"\nlimit = 2\nperiod = \"10s\"\n";
    let OneSite {
        origin: _origin,
        pki,
        site: _,
        tls,
        v,
    } = OneSite::start("h2c = true", extra);
    let base = format!("https://site.test:{}", tls.port());
    let h2 = https_client(&pki, tls, &["site.test"], false);

    // The waiting page, with its cookie (Secure over TLS).
    let resp = h2
        .get(format!("{base}/shop/item"))
        .header("Accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let cookies: Vec<String> = set_cookies(&resp).into_iter().map(str::to_owned).collect();
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("waiting_room=") && c.contains("; Secure")),
        "{cookies:?}"
    );
    let waiting = room_cookie(&resp, "waiting_room").unwrap();
    assert!(resp.text().unwrap().contains("<html"));
    // JSON, for the visitor holding the wait cookie.
    let resp = h2
        .get(format!("{base}/shop/item"))
        .header("Accept", "application/json")
        .header("cookie", format!("waiting_room={waiting}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().unwrap();
    // Held either way at 0 %: still waiting, or drawn and refused.
    let decision = decision_in(&body);
    assert!(decision == "wait" || decision == "deny", "{body}");

    // Admitted: the cookie fields HTTP/2 sends one by one reach the origin as one Cookie
    // header, without the room's cookie.
    let resp = h2
        .get(format!("{base}/open/x"))
        .header("Accept", "application/json")
        .send()
        .unwrap();
    assert!(
        room_cookie(&resp, "wr_open").is_some(),
        "admitted with a cookie"
    );
    let resp = h2
        .get(format!("{base}/__echo"))
        .header("cookie", "a=1")
        .header("cookie", "wr_open=zzz")
        .header("cookie", "b=2; c=3")
        .send()
        .unwrap();
    let headers = echo(resp);
    assert_eq!(header_values(&headers, "cookie"), ["a=1; b=2; c=3"]);

    // 429 over HTTP/2.
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(
            h2.get(format!("{base}/limited"))
                .send()
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(codes[2], 429, "{codes:?}");

    // h2c: HTTP/2 with prior knowledge on the plain listener.
    let h2c = reqwest::blocking::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let resp = h2c
        .get(v.url("/__echo"))
        .header("cookie", "x=1")
        .header("cookie", "waiting_room=abc")
        .header("cookie", "y=2")
        .send()
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let headers = echo(resp);
    assert_eq!(header_values(&headers, "cookie"), ["x=1; y=2"]);
    assert_eq!(header_values(&headers, "x-forwarded-proto"), ["http"]);
    // HTTP/1.1 still works on the same listener.
    assert_eq!(client().get(v.url("/__echo")).send().unwrap().status(), 200);
    assert!(v.metric("vestibule_downstream_requests_total{protocol=\"h2\",tls=\"false\"}") >= 1.0);
}

#[test]
fn redirect_to_https_spares_acme_challenges() {
    let OneSite {
        origin,
        pki,
        site: _,
        tls,
        v,
    } = OneSite::start("redirect_to_https = true", "");
    let resp = client()
        .get(v.url("/shop/x?page=2"))
        .header("Host", "site.test")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 308);
    assert_eq!(
        resp.headers()["location"],
        format!("https://site.test:{}/shop/x?page=2", tls.port()).as_str()
    );
    // The ACME HTTP-01 challenge reaches the origin over plain http.
    let served = origin.served();
    let resp = client()
        .get(v.url("/.well-known/acme-challenge/token123"))
        .header("Host", "site.test")
        .send()
        .unwrap();
    assert_ne!(resp.status(), 308);
    assert_eq!(origin.served(), served + 1);
    // Over TLS nothing is redirected.
    let resp = https_client(&pki, tls, &["site.test"], true)
        .get(format!("https://site.test:{}/__echo", tls.port()))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// Opens a TLS connection to `tls` after writing `prefix` (a PROXY header), sends a request for
/// `/__echo`, and returns the X-Forwarded-For the origin saw, or `None` if the connection failed.
fn echo_through_tls(pki: &Pki, tls: SocketAddr, prefix: &[u8]) -> Option<String> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(pki.rustls_roots())
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("site.test").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = TcpStream::connect(tls).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.write_all(prefix).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, sock);
    stream
        .write_all(b"GET /__echo HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let body = text.split("\r\n\r\n").nth(1)?;
    let headers = echo_headers(body);
    Some(header_values(&headers, "x-forwarded-for").join(","))
}

#[test]
fn the_proxy_protocol_comes_before_tls() {
    let OneSite {
        origin: _origin,
        pki,
        site: _,
        tls,
        v,
    } = OneSite::start(
        "proxy_protocol = true\nheader_timeout = \"1s\"",
        "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
    );
    assert_eq!(
        echo_through_tls(&pki, tls, b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n").as_deref(),
        Some("203.0.113.7")
    );
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    v2.extend_from_slice(&[198, 51, 100, 9, 10, 0, 0, 1, 0x0f, 0xa0, 0x01, 0xbb]);
    assert_eq!(
        echo_through_tls(&pki, tls, &v2).as_deref(),
        Some("198.51.100.9")
    );
    // LOCAL: the balancer's health check keeps the peer.
    let mut local = v2.clone();
    local[12] = 0x20;
    assert_eq!(
        echo_through_tls(&pki, tls, &local).as_deref(),
        Some("127.0.0.1")
    );

    // No header (a TLS ClientHello first), garbage, or silence: closed and counted.
    let rejected = v.metric("vestibule_proxy_protocol_rejected_total");
    assert_eq!(echo_through_tls(&pki, tls, b""), None);
    assert_eq!(echo_through_tls(&pki, tls, b"PROXY NONSENSE\r\n"), None);
    // Truncated: half a header, then the ClientHello.
    assert_eq!(
        echo_through_tls(&pki, tls, b"PROXY TCP4 203.0.113.7 "),
        None
    );
    let mut silent = TcpStream::connect(tls).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 16];
    let started = std::time::Instant::now();
    assert_eq!(silent.read(&mut buf).unwrap_or(0), 0);
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(eventually(Duration::from_secs(5), || {
        v.metric("vestibule_proxy_protocol_rejected_total") >= rejected + 4.0
    }));
    assert!(v.metric("vestibule_tls_handshakes_total{result=\"ok\"}") >= 3.0);
}

#[test]
fn an_untrusted_balancer_is_not_believed_over_tls() {
    let site = OneSite::start(
        "proxy_protocol = true",
        "[identity]\ntrusted_proxies = [\"10.9.0.0/16\"]\n",
    );
    let (pki, tls) = (&site.pki, site.tls);
    assert_eq!(
        echo_through_tls(pki, tls, b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n").as_deref(),
        Some("127.0.0.1")
    );
}

#[test]
fn failed_and_slow_handshakes_are_counted_and_closed() {
    let OneSite {
        origin: _origin,
        pki,
        site: _,
        tls,
        v,
    } = OneSite::start("header_timeout = \"1s\"", "");
    // Plain HTTP on the TLS port, then a silent connection.
    let answer = raw_exchange(tls, b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n");
    assert!(!answer.contains("200"), "{answer}");
    let mut silent = TcpStream::connect(tls).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(silent.read(&mut buf).unwrap_or(0), 0);
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(eventually(Duration::from_secs(5), || {
        v.metric("vestibule_tls_handshakes_total{result=\"failed\"}") >= 2.0
    }));
    // TLS 1.2 works by default, and other clients were never stalled.
    let resp = https_client(&pki, tls, &["site.test"], true)
        .get(format!("https://site.test:{}/__echo", tls.port()))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// A rustls client for `site.test` with the given versions and ALPN, connected to `tls`.
fn raw_tls(
    pki: &Pki,
    tls: SocketAddr,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(pki.rustls_roots())
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = rustls::pki_types::ServerName::try_from("site.test").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let sock = TcpStream::connect(tls).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    rustls::StreamOwned::new(conn, sock)
}

#[test]
fn min_version_refuses_older_clients_and_follows_a_reload() {
    let OneSite {
        origin: _origin,
        pki,
        site: _,
        tls,
        v,
    } = OneSite::start("", "");
    let request = b"GET /__echo HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n";
    let answer = |versions: &[&'static rustls::SupportedProtocolVersion]| {
        let mut s = raw_tls(&pki, tls, versions, &[b"http/1.1"]);
        if s.write_all(request).is_err() {
            return String::new();
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    assert!(answer(&[&rustls::version::TLS12]).starts_with("HTTP/1.1 200"));
    assert!(answer(&[&rustls::version::TLS13]).starts_with("HTTP/1.1 200"));

    let generation = v.generation();
    let text = std::fs::read_to_string(v.config_path()).unwrap();
    std::fs::write(
        v.config_path(),
        text.replace("[tls]\n", "[tls]\nmin_version = \"1.3\"\n"),
    )
    .unwrap();
    v.wait_generation_above(generation);
    assert_eq!(answer(&[&rustls::version::TLS12]), "");
    assert!(answer(&[&rustls::version::TLS13]).starts_with("HTTP/1.1 200"));
}

#[test]
fn an_http2_connection_that_never_sends_its_preface_is_closed() {
    let OneSite {
        origin: _origin,
        pki,
        site: _,
        tls,
        v,
    } = OneSite::start("header_timeout = \"1s\"", "");
    let mut s = raw_tls(&pki, tls, &[&rustls::version::TLS13], &[b"h2"]);
    // Complete the handshake, then say nothing.
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).unwrap();
    }
    assert_eq!(s.conn.alpn_protocol(), Some(&b"h2"[..]));
    let started = std::time::Instant::now();
    let mut buf = [0u8; 64];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            // The server's SETTINGS would come only after the preface.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break false,
            Err(_) => break true,
        }
    };
    assert!(closed, "still open after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(v.metric("vestibule_downstream_closed_total{reason=\"header_timeout\"}") >= 1.0);
}

#[test]
fn the_tls_example_config_is_valid_with_a_certificate_in_place() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/examples/tls/vestibule.toml")).unwrap();
    assert!(text.contains("tls_listen = [\"0.0.0.0:443\"]"));
    assert!(text.contains("/.well-known/acme-challenge/"));
    // The example's folder, elsewhere: its relative paths point back into the repository.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vestibule.toml");
    std::fs::write(&config, text.replace("../../", &format!("{root}/"))).unwrap();
    let pki = Pki::new();
    let site = pki.issue("site", &["shop.example", "www.shop.example"]);
    std::fs::create_dir(dir.path().join("tls")).unwrap();
    std::fs::copy(&site.cert, dir.path().join("tls/site.pem")).unwrap();
    std::fs::copy(&site.key, dir.path().join("tls/site.key")).unwrap();
    let (code, out, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}
