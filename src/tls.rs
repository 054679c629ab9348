//! TLS termination: the certificates of one generation, checked at load, and the
//! acceptor that serves them.
//!
//! Pingora's `TlsSettings::build()` panics on a missing file or a key that does not match its
//! certificate, and fixes the certificates for the life of the listener. vestibule loads and
//! checks the PEM files itself, with the rest of the snapshot: a bad file is a `--check` error
//! (or a failed reload) naming the file, never a panic. Each generation's certificates sit behind
//! one [`Tls`] in the snapshot, which the edge loads (through the snapshot's `ArcSwap`) for every
//! new connection: a renewed certificate is served from the next handshake on, and connections
//! already open keep the one they were set up with. A reload that changes no certificate file and
//! not `min_version` keeps the same acceptor, and with it the session-resumption state.
//!
//! SNI picks the certificate: an exact name first, then a wildcard (`*.example.com` covers one
//! label, as RFC 6125 says), and the first certificate when nothing matches or the client sent
//! no name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pingora::listeners::tls::Acceptor;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

use crate::config::{CertificatePaths, ConfigError, TlsConfig, TlsVersion};

/// One certificate in service, as `/status` and the metrics show it (never key material).
#[derive(Debug)]
pub struct Certificate {
    /// The DNS names it answers for (subject alternative names, else the common name).
    pub names: Vec<String>,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    pub cert_file: PathBuf,
    key: Arc<CertifiedKey>,
}

/// The certificates of one generation, indexed for SNI.
#[derive(Debug)]
pub struct CertSet {
    certs: Vec<Certificate>,
    exact: HashMap<String, usize>,
    /// `*.example.com` is stored under `example.com`.
    wildcard: HashMap<String, usize>,
}

impl CertSet {
    fn new(certs: Vec<Certificate>) -> CertSet {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, c) in certs.iter().enumerate() {
            for name in &c.names {
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_owned()).or_insert(i),
                    None => exact.entry(name.clone()).or_insert(i),
                };
            }
        }
        CertSet {
            certs,
            exact,
            wildcard,
        }
    }

    /// The certificate for `sni`: exact, then wildcard, then the first one.
    pub(crate) fn pick(&self, sni: Option<&str>) -> Option<&Certificate> {
        let found = sni.and_then(|name| {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            self.exact.get(&name).copied().or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent).copied()
            })
        });
        self.certs.get(found.unwrap_or(0))
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Certificate> {
        self.certs.iter()
    }
}

#[derive(Debug)]
struct Resolver(Arc<CertSet>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.pick(hello.server_name()).map(|c| c.key.clone())
    }
}

/// The TLS side of one generation: its certificates and the acceptor that serves them.
pub struct Tls {
    pub certs: Arc<CertSet>,
    pub min_version: TlsVersion,
    pub acceptor: Arc<Acceptor>,
    /// SHA-256 over every file's bytes and `min_version`: equal means nothing to rebuild.
    fingerprint: [u8; 32],
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("certs", &self.certs.certs.len())
            .field("min_version", &self.min_version)
            .finish()
    }
}

impl Tls {
    /// Loads and checks every certificate and key `config` names. `previous` is kept (with its
    /// acceptor and session state) when no file and no setting changed. Errors name the file
    /// and the config key; `config_path` labels errors that are about the config itself.
    pub fn load(
        config: &TlsConfig,
        previous: Option<&Arc<Tls>>,
    ) -> Result<Option<Arc<Tls>>, Vec<ConfigError>> {
        if config.certificates.is_empty() {
            return Ok(None);
        }
        let mut errors = Vec::new();
        let mut hasher = Sha256::new();
        hasher.update(config.min_version.as_str());
        let mut loaded = Vec::new();
        for (i, paths) in config.certificates.iter().enumerate() {
            match load_pair(paths, i, &mut hasher) {
                Ok(pair) => loaded.push(pair),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let fingerprint: [u8; 32] = hasher.finalize().into();
        if let Some(prev) = previous.filter(|p| p.fingerprint == fingerprint) {
            return Ok(Some(prev.clone()));
        }
        let certs = Arc::new(CertSet::new(loaded));
        let acceptor = Arc::new(Acceptor::from_server_config(Arc::new(server_config(
            certs.clone(),
            config.min_version,
        ))));
        Ok(Some(Arc::new(Tls {
            certs,
            min_version: config.min_version,
            acceptor,
            fingerprint,
        })))
    }

    /// Whether this generation serves different certificates (or settings) than `other`.
    pub(crate) fn differs_from(&self, other: &Tls) -> bool {
        self.fingerprint != other.fingerprint
    }
}

/// The certificates of `tls` in a few words, for the reload log: names and expiry of each.
pub fn summary(tls: &Tls) -> String {
    tls.certs
        .iter()
        .map(|c| {
            format!(
                "{} until {}",
                c.names.join(","),
                crate::time::Timestamp::from_secs(c.not_after.max(0) as u64).rfc3339()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(certs: Arc<CertSet>, min: TlsVersion) -> rustls::ServerConfig {
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap_or_else(|_| unreachable!("ring supports TLS 1.2 and 1.3"))
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver(certs)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// Reads one `{ cert, key }` pair and checks that they belong together.
fn load_pair(
    paths: &CertificatePaths,
    i: usize,
    hasher: &mut Sha256,
) -> Result<Certificate, ConfigError> {
    let cert_key = format!("tls.certificates[{i}].cert");
    let key_key = format!("tls.certificates[{i}].key");
    let cert_err = |m: String| ConfigError::new(&paths.cert, Some(cert_key.clone()), m);
    let key_err = |m: String| ConfigError::new(&paths.key, Some(key_key.clone()), m);

    let cert_pem = read(&paths.cert).map_err(&cert_err)?;
    let key_pem = read(&paths.key).map_err(&key_err)?;
    hasher.update((cert_pem.len() as u64).to_le_bytes());
    hasher.update(&cert_pem);
    hasher.update((key_pem.len() as u64).to_le_bytes());
    hasher.update(&key_pem);

    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(cert_err("holds no PEM certificate".into()));
    }
    let key = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(key) => key,
        Err(pem::Error::NoItemsFound) => return Err(key_err("holds no PEM private key".into())),
        Err(e) => return Err(key_err(format!("not a PEM private key: {e}"))),
    };
    let (names, not_after) = describe(&chain[0]).map_err(&cert_err)?;
    let certified = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => key_err(format!(
            "does not match the certificate in {}",
            paths.cert.display()
        )),
        e => key_err(format!("unusable private key: {e}")),
    })?;
    Ok(Certificate {
        names,
        not_after,
        cert_file: paths.cert.clone(),
        key: Arc::new(certified),
    })
}

/// Reads a PEM file of reasonable size.
fn read(path: &Path) -> Result<Vec<u8>, String> {
    const MAX: u64 = 1 << 20;
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if meta.len() > MAX {
        return Err(format!(
            "is {} bytes; a PEM file is at most 1 MiB",
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| format!("cannot read: {e}"))
}

/// The leaf's DNS names (lowercase) and its notAfter.
fn describe(leaf: &[u8]) -> Result<(Vec<String>, i64), String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("the first certificate does not parse: {e}"))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(n) = name {
                names.push(n.trim_end_matches('.').to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(|cn| cn.to_ascii_lowercase()),
        );
    }
    Ok((names, cert.validity().not_after.timestamp()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, stem: &str, names: &[&str]) -> CertificatePaths {
        let ck = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        let cert = dir.join(format!("{stem}.pem"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
        CertificatePaths { cert, key }
    }

    fn config(certificates: Vec<CertificatePaths>) -> TlsConfig {
        TlsConfig {
            certificates,
            min_version: TlsVersion::Tls12,
        }
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let tls = Tls::load(
            &config(vec![
                pair(dir.path(), "a", &["a.example"]),
                pair(dir.path(), "w", &["*.shop.example", "shop.example"]),
                pair(dir.path(), "b", &["b.example", "api.shop.example"]),
            ]),
            None,
        )
        .unwrap()
        .unwrap();
        let file = |sni: Option<&str>| {
            let c = tls.certs.pick(sni).unwrap();
            c.cert_file
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(file(Some("a.example")), "a.pem");
        assert_eq!(file(Some("B.EXAMPLE.")), "b.pem");
        assert_eq!(file(Some("www.shop.example")), "w.pem");
        assert_eq!(file(Some("shop.example")), "w.pem");
        // The exact name wins over the wildcard.
        assert_eq!(file(Some("api.shop.example")), "b.pem");
        // A wildcard covers one label only.
        assert_eq!(file(Some("a.b.shop.example")), "a.pem");
        assert_eq!(file(Some("nowhere.test")), "a.pem");
        assert_eq!(file(None), "a.pem");
    }

    #[test]
    fn bad_files_are_errors_that_name_the_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let good = pair(dir.path(), "good", &["good.example"]);
        let other = pair(dir.path(), "other", &["other.example"]);
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not pem at all").unwrap();

        let err = |paths: CertificatePaths| {
            let e = Tls::load(&config(vec![paths]), None).unwrap_err();
            assert_eq!(e.len(), 1);
            e[0].to_string()
        };
        let mismatched = err(CertificatePaths {
            cert: good.cert.clone(),
            key: other.key.clone(),
        });
        assert!(mismatched.contains("other.key: tls.certificates[0].key: does not match"));
        let missing = err(CertificatePaths {
            cert: dir.path().join("nope.pem"),
            key: good.key.clone(),
        });
        assert!(missing.contains("nope.pem: tls.certificates[0].cert: cannot read"));
        let not_pem = err(CertificatePaths {
            cert: garbage.clone(),
            key: good.key.clone(),
        });
        assert!(not_pem.contains("garbage.pem: tls.certificates[0].cert: holds no PEM"));
        let no_key = err(CertificatePaths {
            cert: good.cert.clone(),
            key: garbage,
        });
        assert!(no_key.contains("tls.certificates[0].key: holds no PEM private key"));
        // Key material never shows in an error.
        let key_text = std::fs::read_to_string(&other.key).unwrap();
        let body = key_text.lines().nth(1).unwrap();
        assert!(!mismatched.contains(body));
    }

    #[test]
    fn an_unchanged_reload_keeps_the_acceptor_and_a_renewal_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let paths = pair(dir.path(), "site", &["site.example"]);
        let first = Tls::load(&config(vec![paths.clone()]), None)
            .unwrap()
            .unwrap();
        let same = Tls::load(&config(vec![paths.clone()]), Some(&first))
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&first, &same));
        pair(dir.path(), "site", &["site.example", "www.site.example"]);
        let renewed = Tls::load(&config(vec![paths.clone()]), Some(&first))
            .unwrap()
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &renewed));
        assert!(renewed.differs_from(&first));
        assert_eq!(
            renewed.certs.iter().next().unwrap().names,
            ["site.example", "www.site.example"]
        );
        let mut strict = config(vec![paths]);
        strict.min_version = TlsVersion::Tls13;
        let strict = Tls::load(&strict, Some(&renewed)).unwrap().unwrap();
        assert!(!Arc::ptr_eq(&strict, &renewed));
    }
}
