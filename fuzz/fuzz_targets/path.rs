//! Path normalisation: any path gets an answer, never a panic. An accepted path is normal
//! (starts with '/', no dot segments, no empty segments, no encoded or backslash separators, no
//! parameters) and normalising it again changes nothing. And the rule bypass prefixes rely on:
//! if a bypass prefix matches, no origin's reading of the path (decoding or not, `\` a
//! separator or not, `;` parameters dropped before or after decoding or kept, the path cut at
//! NUL or not) leaves the prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::path::{normalize, origins};

/// Prefixes a bypass might use; the fuzzer's paths are matched against each.
const PREFIXES: [&str; 5] = ["/", "/static/", "/static", "/a/b/", "/.well-known/acme-challenge/"];

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(normal) = normalize(path) else {
        return;
    };
    let text = normal.as_str();
    assert!(text.starts_with('/'), "{text:?}");
    assert!(!text.contains("//"), "{text:?}");
    assert!(!text.contains('\\') && !text.contains(';'), "{text:?}");
    for segment in text.split('/') {
        assert!(segment != "." && segment != "..", "{text:?}");
    }
    let upper = text.to_ascii_uppercase();
    assert!(
        !upper.contains("%2F") && !upper.contains("%5C") && !upper.contains("%3B"),
        "{text:?}"
    );
    let again = normalize(text).expect("a normal path is accepted");
    assert_eq!(again.as_str(), text, "normalising is idempotent");

    for prefix in PREFIXES {
        if !normal.is_under(prefix) {
            continue;
        }
        for origin in origins::all() {
            let read = origin.read(path);
            assert!(
                read.starts_with(prefix.as_bytes()),
                "{path:?} passes the bypass {prefix} but {origin:?} reads {:?}",
                String::from_utf8_lossy(&read)
            );
        }
    }
});
