//! The config loader and the key ring loader: any text, never panic; every error names the
//! file. Offline: peers named by host are refused rather than looked up, so fuzzing never sends a
//! DNS query.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vestibule::config::Config;
use vestibule::keys::KeyRing;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/nonexistent/fuzz/vestibule.toml");
    if let Err(errors) = vestibule::config::parse_offline(text, path) {
        assert!(!errors.0.is_empty());
        for e in &errors.0 {
            assert_eq!(e.file, path);
        }
    }
    if let Err(errors) = KeyRing::parse(text, Path::new("/nonexistent/fuzz/keys.toml")) {
        assert!(!errors.0.is_empty());
    }
});
