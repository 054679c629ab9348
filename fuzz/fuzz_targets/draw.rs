//! A published verifiable draw as `vestibule verify-draw` reads it ([`verify`]), and a receipt's
//! text ([`Receipt::parse`]). Neither ever panics; `verify` accepts only a draw whose commitment
//! and every place recompute, and a receipt read back writes the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::room::draw::{verify, Receipt};

fuzz_target!(|data: &[u8]| {
    if let Ok(n) = verify(data) {
        // Whatever passed lists at most as many receipts as the input has bytes for.
        assert!(n <= data.len());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(r) = Receipt::parse(text) {
            assert_eq!(r.text(), text);
        }
    }
});
