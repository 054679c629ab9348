//! Path normalisation: any path, never panic; the result is normal (starts with '/', no dot
//! segments, no empty segments, no encoded or backslash separators) and normalising it again
//! changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::path::normalize;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let normal = normalize(path);
    assert!(normal.starts_with('/'), "{normal:?}");
    assert!(!normal.contains("//"), "{normal:?}");
    assert!(!normal.contains('\\'), "{normal:?}");
    for segment in normal.split('/') {
        assert!(segment != "." && segment != "..", "{normal:?}");
    }
    let upper = normal.to_ascii_uppercase();
    assert!(!upper.contains("%2F") && !upper.contains("%5C"), "{normal:?}");
    assert_eq!(normalize(&normal), normal, "normalising is idempotent");
});
