//! The key ring: the core's [`KeyRing`], and reading it from its file.

use std::path::Path;

pub use vestibule_core::keys::*;

use crate::config::{ConfigError, ConfigErrors};

/// Reads and validates a key ring file.
pub fn load(path: &Path) -> Result<KeyRing, ConfigErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(path, None, format!("cannot read the key ring: {e}")))?;
    KeyRing::parse(&text, path)
}
