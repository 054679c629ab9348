//! The key ring: every key that verifies tokens, and the one that signs new ones.
//!
//! Keys are decoded and pre-keyed once, at load: signing and verifying then clone a ready HMAC
//! state instead of hashing the key again per request. Nothing here ever prints a secret: the
//! `Debug` form lists key ids, and errors name the key id and the line, never the value.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use serde::Deserialize;

use crate::jwt::JwtKeys;
use crate::problem::error::{from_toml, ConfigError, ConfigErrors};
use crate::problem::locate::Locator;
pub use crate::sign::{is_valid_key_id, split_exact, HmacSha512, Keys, SigningKey};

/// Shortest accepted key, decoded.
pub(crate) const MIN_KEY_BYTES: usize = 32;
const MAX_KEY_BYTES: usize = 1024;

/// The key that ships in `conf/keys.toml` for the demo. `--check` warns when it is in use.
pub(crate) const SAMPLE_KEY: &str =
    "ZGVtby1vbmx5LWtleS1yZXBsYWNlLW1lLXdpdGgtdmVzdGlidWxlLWtleWdlbi1vdXRwdXQtMDAwMDAwMA==";

/// Values remembered as verified (and tokens remembered as signed), per ring and worker thread.
const VERIFIED_CACHE: usize = 4096;

/// The ring of `keys.toml`.
#[derive(Clone)]
pub struct KeyRing {
    active: String,
    keys: BTreeMap<String, SigningKey>,
    /// Cookie values this ring already verified (shared by clones of this ring only).
    verified: std::sync::Arc<crate::token::VerifiedCache>,
    /// Lottery tokens this ring's active key already signed.
    signed: std::sync::Arc<crate::token::SignedCache>,
    /// Proof-of-work challenges this ring's active key issued.
    issued: std::sync::Arc<crate::token::IssuedCache>,
    /// The JWT keys (`[[jwt_key]]`), and their JWKS when there are any.
    jwt: std::sync::Arc<JwtKeys>,
    jwks: Option<std::sync::Arc<str>>,
    /// The private key files of the JWT keys (watched with the ring).
    jwt_files: std::sync::Arc<[std::path::PathBuf]>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("active", &self.active)
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .field("jwt", &self.jwt)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    active: String,
    ring: BTreeMap<String, String>,
    /// `[[jwt_key]]`: the keys of the JWTs, the first signing.
    #[serde(default)]
    jwt_key: Vec<JwtKeyFile>,
}

/// One `[[jwt_key]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JwtKeyFile {
    kid: String,
    algorithm: String,
    /// A PKCS#8 PEM private key file, relative to the ring's folder.
    private_key: String,
}

/// The `[[jwt_key]]` entries of a ring file, read and checked; problems go to `errors`.
fn jwt_keys(
    entries: &[JwtKeyFile],
    path: &Path,
    read: &dyn Fn(&Path) -> std::io::Result<String>,
    err: &dyn Fn(String, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> JwtKeys {
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut keys: Vec<crate::jwt::JwtKey> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let k = |field: &str| format!("jwt_key[{i}].{field}");
        if !is_valid_key_id(&entry.kid) {
            errors.push(err(
                k("kid"),
                "key ids may use only letters, digits, '.', '_' and '-' (at most 64)".into(),
            ));
            continue;
        }
        if entries[..i].iter().any(|e| e.kid == entry.kid) {
            errors.push(err(k("kid"), format!("\"{}\" is used twice", entry.kid)));
            continue;
        }
        let Some(algorithm) = crate::jwt::Algorithm::parse(&entry.algorithm) else {
            errors.push(err(
                k("algorithm"),
                format!(
                    "must be \"ES256\" or \"EdDSA\", got \"{}\"",
                    entry.algorithm
                ),
            ));
            continue;
        };
        let file = dir.join(&entry.private_key);
        let pem = match read(&file) {
            Ok(pem) => pem,
            Err(e) => {
                errors.push(err(
                    k("private_key"),
                    format!("cannot read {}: {e}", file.display()),
                ));
                continue;
            }
        };
        match crate::jwt::JwtKey::from_pem(&entry.kid, algorithm, &pem) {
            Ok(key) => keys.push(key),
            Err(message) => errors.push(err(k("private_key"), message)),
        }
    }
    JwtKeys::new(keys)
}

/// Base64, standard or URL-safe alphabet, padded or not (the VCL's decoder is as lenient).
fn decode_key(value: &str) -> Option<Vec<u8>> {
    let config =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let standard = GeneralPurpose::new(&base64::alphabet::STANDARD, config);
    let url_safe = GeneralPurpose::new(&base64::alphabet::URL_SAFE, config);
    let value = value.trim();
    standard
        .decode(value)
        .or_else(|_| url_safe.decode(value))
        .ok()
}

impl Keys for KeyRing {
    fn key(&self, kid: &str) -> Option<&SigningKey> {
        self.keys.get(kid)
    }
}

impl KeyRing {
    /// Validates a key ring text; `path` only labels errors. A ring that names JWT key files
    /// needs [`KeyRing::parse_with`].
    pub fn parse(text: &str, path: &Path) -> Result<KeyRing, ConfigErrors> {
        KeyRing::parse_with(text, path, &|p| {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("{}: no files are read here", p.display()),
            ))
        })
    }

    /// Validates a key ring text from the file at `path`; `read` reads the files it names (the
    /// `[[jwt_key]]` private keys, relative to the ring's folder).
    pub fn parse_with(
        text: &str,
        path: &Path,
        read: &dyn Fn(&Path) -> std::io::Result<String>,
    ) -> Result<KeyRing, ConfigErrors> {
        let file: KeyFile = toml::from_str(text).map_err(|e| from_toml(path, text, &e, true))?;
        let mut errors = Vec::new();
        let mut keys = BTreeMap::new();
        let locator = std::cell::OnceCell::new();
        let err = |key: String, message: String| {
            let line = locator.get_or_init(|| Locator::new(text)).line(&key);
            ConfigError::new(path, Some(key), message).at_line(line)
        };
        if file.ring.is_empty() {
            errors.push(err(
                "ring".into(),
                "the ring holds no key; add one made with `vestibule keygen`".into(),
            ));
        }
        for (id, value) in &file.ring {
            let key = format!("ring.{id}");
            if !is_valid_key_id(id) {
                errors.push(err(
                    key,
                    "key ids may use only letters, digits, '.', '_' and '-' (at most 64)".into(),
                ));
                continue;
            }
            match decode_key(value) {
                None => errors.push(err(key, "is not valid base64".into())),
                Some(bytes) if bytes.len() < MIN_KEY_BYTES => errors.push(err(
                    key,
                    format!(
                        "decodes to {} bytes; keys must be at least {MIN_KEY_BYTES} bytes (make one with `vestibule keygen`)",
                        bytes.len()
                    ),
                )),
                Some(bytes) if bytes.len() > MAX_KEY_BYTES => errors.push(err(
                    key,
                    format!("decodes to {} bytes; at most {MAX_KEY_BYTES} are accepted", bytes.len()),
                )),
                Some(bytes) => {
                    keys.insert(id.clone(), SigningKey::new(id, &bytes));
                }
            }
        }
        if !file.ring.contains_key(&file.active) {
            errors.push(err(
                "active".into(),
                format!("names key \"{}\", which is not in [ring]", file.active),
            ));
        }
        let jwt = jwt_keys(&file.jwt_key, path, read, &err, &mut errors);
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        let jwks = (!jwt.is_empty()).then(|| std::sync::Arc::from(jwt.jwks()));
        let dir = path.parent().unwrap_or(Path::new(""));
        let jwt_files = file
            .jwt_key
            .iter()
            .map(|e| dir.join(&e.private_key))
            .collect();
        Ok(KeyRing {
            active: file.active,
            keys,
            jwt: std::sync::Arc::new(jwt),
            jwks,
            jwt_files,
            verified: std::sync::Arc::new(crate::token::VerifiedCache::new(VERIFIED_CACHE)),
            signed: std::sync::Arc::new(crate::token::SignedCache::new(VERIFIED_CACHE)),
            issued: std::sync::Arc::new(crate::token::IssuedCache::new(VERIFIED_CACHE)),
        })
    }

    /// A ring from (id, base64) pairs, validated like a file.
    pub fn from_entries(active: &str, entries: &[(&str, &str)]) -> Result<KeyRing, ConfigErrors> {
        let mut text = format!("active = {}\n[ring]\n", toml_string(active));
        for (id, value) in entries {
            text.push_str(&format!("{} = {}\n", toml_string(id), toml_string(value)));
        }
        KeyRing::parse(&text, Path::new("<inline key ring>"))
    }

    /// The JWT keys (`[[jwt_key]]`; empty when the ring has none).
    pub fn jwt(&self) -> &JwtKeys {
        &self.jwt
    }

    /// The files of the JWT keys' private keys.
    pub fn jwt_files(&self) -> &[std::path::PathBuf] {
        &self.jwt_files
    }

    /// The JWKS (RFC 7517) of the JWT keys, or `None` when the ring has none.
    pub fn jwks(&self) -> Option<&str> {
        self.jwks.as_deref()
    }

    /// The key that signs new tokens.
    pub fn active(&self) -> &SigningKey {
        // `parse` guarantees the active id is in the ring.
        &self.keys[&self.active]
    }

    /// Parses a presented value and checks its signature, remembering values that pass.
    pub fn check(
        &self,
        value: &[u8],
    ) -> Result<std::sync::Arc<crate::token::Token>, crate::token::Reject> {
        self.verified.check(self, value)
    }

    /// Signs `claims` with the active key (their `kid` must be its id), reusing the value when
    /// the same claims were signed before.
    pub(crate) fn sign_cached(&self, claims: crate::token::Claims) -> std::sync::Arc<str> {
        self.signed.sign(claims, self.active())
    }

    /// Challenges this ring issued recently (see [`crate::challenge::issue`]).
    pub(crate) fn issued_challenges(&self) -> &crate::token::IssuedCache {
        &self.issued
    }

    pub fn get(&self, kid: &str) -> Option<&SigningKey> {
        self.keys.get(kid)
    }

    /// Key ids in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Whether any key is the published sample key.
    pub fn uses_sample_key(&self) -> bool {
        let sample = decode_key(SAMPLE_KEY).unwrap_or_default();
        let sample = SigningKey::new("sample", &sample);
        self.keys
            .values()
            .any(|k| k.fingerprint() == sample.fingerprint())
    }

    /// What changed from `old` to `self`, for the reload log. Never mentions a secret.
    pub fn describe_changes(&self, old: &KeyRing) -> Vec<String> {
        let mut parts = Vec::new();
        if old.active != self.active {
            parts.push(format!("active {} -> {}", old.active, self.active));
        }
        for id in self.keys.keys().filter(|id| !old.keys.contains_key(*id)) {
            parts.push(format!("added {id}"));
        }
        for id in old.keys.keys().filter(|id| !self.keys.contains_key(*id)) {
            parts.push(format!("removed {id}"));
        }
        for (id, key) in &self.keys {
            if old
                .keys
                .get(id)
                .is_some_and(|o| o.fingerprint() != key.fingerprint())
            {
                parts.push(format!("replaced the secret of {id}"));
            }
        }
        let kids = |ring: &KeyRing| -> Vec<String> {
            ring.jwt.keys().iter().map(|k| k.kid().to_owned()).collect()
        };
        let (before, after) = (kids(old), kids(self));
        if before.first() != after.first() {
            parts.push(format!(
                "JWTs signed by {} -> {}",
                before.first().map_or("none", String::as_str),
                after.first().map_or("none", String::as_str)
            ));
        }
        for kid in after.iter().filter(|k| !before.contains(k)) {
            parts.push(format!("published JWT key {kid}"));
        }
        for kid in before.iter().filter(|k| !after.contains(k)) {
            parts.push(format!("withdrew JWT key {kid}"));
        }
        parts
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A fresh random 64-byte key, base64 (for `vestibule keygen`).
pub fn generate() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 64];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The key of unit tests and benchmarks (never of a real ring: `--check` would not warn about
/// it, so it must stay out of config files).
#[doc(hidden)]
pub mod testing {
    use super::KeyRing;

    /// base64 of "0123456789abcdef0123456789abcdef0123456789abcdef" (48 bytes).
    pub const KEY1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYwMTIzNDU2Nzg5YWJjZGVm";

    /// A ring holding [`KEY1`] as `key1`, active.
    pub fn ring() -> KeyRing {
        KeyRing::from_entries("key1", &[("key1", KEY1)]).unwrap_or_else(|e| panic!("{e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = testing::KEY1;

    fn parse(text: &str) -> Result<KeyRing, ConfigErrors> {
        KeyRing::parse(text, Path::new("keys.toml"))
    }

    #[test]
    fn good_ring() {
        let ring = parse(&format!(
            "active = \"b\"\n[ring]\na = \"{GOOD}\"\nb = \"{GOOD}\"\n"
        ))
        .unwrap();
        assert_eq!(ring.active().id(), "b");
        assert_eq!(ring.ids().collect::<Vec<_>>(), ["a", "b"]);
        assert!(ring.get("c").is_none());
        assert!(!format!("{ring:?}").contains(GOOD));
    }

    #[test]
    fn errors_name_the_key_and_never_the_secret() {
        let short = "c2hvcnQ="; // "short"
        let text = format!("active = \"zz\"\n[ring]\nk1 = \"{short}\"\nk2 = \"!!notbase64!!\"\n");
        let errors = parse(&text).unwrap_err();
        let rendered = errors.to_string();
        assert!(
            rendered.contains("keys.toml:3: ring.k1: decodes to 5 bytes"),
            "{rendered}"
        );
        assert!(
            rendered.contains("keys.toml:4: ring.k2: is not valid base64"),
            "{rendered}"
        );
        assert!(
            rendered.contains("keys.toml:1: active: names key \"zz\""),
            "{rendered}"
        );
        assert!(!rendered.contains(short) && !rendered.contains("notbase64"));
    }

    #[test]
    fn syntax_errors_hide_values() {
        let errors = parse("active = \"a\"\n[ring]\na = 12345\n").unwrap_err();
        let rendered = errors.to_string();
        assert!(rendered.contains("keys.toml:3"), "{rendered}");
        assert!(!rendered.contains("12345"), "{rendered}");
        let errors = parse("active = \"a\"\nextra = 1\n[ring]\n").unwrap_err();
        assert!(errors.to_string().contains("extra"));
    }

    #[test]
    fn bad_ids_and_padding() {
        assert!(parse(&format!("active = \"a&b\"\n[ring]\n\"a&b\" = \"{GOOD}\"\n")).is_err());
        let unpadded = GOOD.trim_end_matches('=');
        assert!(parse(&format!("active = \"a\"\n[ring]\na = \"{unpadded}\"\n")).is_ok());
    }

    #[test]
    fn diffs() {
        let old = parse(&format!("active = \"a\"\n[ring]\na = \"{GOOD}\"\n")).unwrap();
        let new = parse(&format!(
            "active = \"b\"\n[ring]\na = \"{GOOD}\"\nb = \"{GOOD}\"\n"
        ))
        .unwrap();
        assert_eq!(new.describe_changes(&old), ["active a -> b", "added b"]);
        assert_eq!(old.describe_changes(&new), ["active b -> a", "removed b"]);
    }

    #[test]
    fn keygen_makes_valid_keys() {
        let k = generate();
        assert_eq!(decode_key(&k).unwrap().len(), 64);
        assert!(parse(&format!("active = \"a\"\n[ring]\na = \"{k}\"\n")).is_ok());
        assert_ne!(generate(), k);
    }

    #[test]
    fn sample_key_is_detected() {
        let ring = parse(&format!("active = \"a\"\n[ring]\na = \"{SAMPLE_KEY}\"\n")).unwrap();
        assert!(ring.uses_sample_key());
        let ring = parse(&format!("active = \"a\"\n[ring]\na = \"{GOOD}\"\n")).unwrap();
        assert!(!ring.uses_sample_key());
    }

    /// `[[jwt_key]]` entries: files read relative to the ring, each problem named by its key
    /// and line, the JWKS published in order.
    #[test]
    fn jwt_keys_are_read_and_checked() {
        use crate::jwt::testing::{ED25519_PEM, ES256_PEM};
        let read = |p: &Path| match p.to_str() {
            Some("/etc/v/es.pem") => Ok(ES256_PEM.to_owned()),
            Some("/etc/v/ed.pem") => Ok(ED25519_PEM.to_owned()),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not found",
            )),
        };
        let entry = |kid: &str, alg: &str, file: &str| {
            format!(
                "[[jwt_key]]\nkid = \"{kid}\"\nalgorithm = \"{alg}\"\nprivate_key = \"{file}\"\n"
            )
        };
        let head = format!("active = \"a\"\n[ring]\na = \"{GOOD}\"\n");
        let path = Path::new("/etc/v/keys.toml");
        let text = format!(
            "{head}{}{}",
            entry("k1", "EdDSA", "ed.pem"),
            entry("k2", "ES256", "es.pem")
        );
        let ring = KeyRing::parse_with(&text, path, &read).unwrap();
        let kids: Vec<&str> = ring.jwt().keys().iter().map(|k| k.kid()).collect();
        assert_eq!(kids, ["k1", "k2"]);
        assert_eq!(
            ring.jwt_files(),
            [Path::new("/etc/v/ed.pem"), Path::new("/etc/v/es.pem")]
        );
        let jwks: serde_json::Value = serde_json::from_str(ring.jwks().unwrap()).unwrap();
        assert_eq!(jwks["keys"][1]["kid"], "k2");
        assert!(!format!("{ring:?}").contains("PRIVATE"));
        assert!(parse(&head).unwrap().jwks().is_none());

        let text = format!(
            "{head}{}{}{}{}",
            entry("k1", "RS256", "es.pem"),
            entry("k2", "ES256", "gone.pem"),
            entry("k3", "ES256", "ed.pem"),
            entry("k3", "ES256", "es.pem"),
        );
        let e = KeyRing::parse_with(&text, path, &read)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("keys.toml:6: jwt_key[0].algorithm: must be \"ES256\" or \"EdDSA\""),
            "{e}"
        );
        assert!(
            e.contains("keys.toml:11: jwt_key[1].private_key: cannot read /etc/v/gone.pem"),
            "{e}"
        );
        assert!(e.contains("jwt_key[2].private_key"), "{e}");
        assert!(
            e.contains("keys.toml:17: jwt_key[3].kid: \"k3\" is used twice"),
            "{e}"
        );
        assert!(!e.contains("BEGIN"), "{e}");
    }
}
