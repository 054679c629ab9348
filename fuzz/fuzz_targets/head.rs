//! Finding the end of a request head: any bytes, never panic; the end found is a blank line
//! after a non-empty start.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::listen::head_end;

fuzz_target!(|data: &[u8]| {
    if let Some(end) = head_end(data) {
        assert!(end <= data.len());
        assert_eq!(data[end - 1], b'\n');
        let head = &data[..end];
        assert!(head.ends_with(b"\n\n") || head.ends_with(b"\n\r\n"));
        assert!(head.iter().any(|b| *b != b'\r' && *b != b'\n'));
    }
});
