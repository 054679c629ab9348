//! The key ring: the core's [`KeyRing`], and reading it from its file.

use std::path::Path;

pub use vestibule_core::keys::*;

use crate::config::{ConfigError, ConfigErrors};

/// Reads and validates a key ring file.
pub fn load(path: &Path) -> Result<KeyRing, ConfigErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(path, None, format!("cannot read the key ring: {e}")))?;
    KeyRing::parse_with(&text, path, &|p| std::fs::read_to_string(p))
}

/// Writes a new JWT signing key for `algorithm` to `path` (PKCS#8 PEM, created 0600; an
/// existing file is an error, never overwritten). Returns a key id for it: the file's name
/// without its extension, when that is a valid id, else `jwt-` and the date.
pub fn write_jwt_key(path: &Path, algorithm: crate::jwt::Algorithm) -> std::io::Result<String> {
    use std::io::Write;
    let pem = crate::jwt::generate(algorithm);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(pem.as_bytes())?;
    f.sync_all()?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    Ok(if is_valid_key_id(stem) {
        stem.to_owned()
    } else {
        let day = crate::time::now().secs() / 86_400;
        format!("jwt-{day}")
    })
}
