//! The PROXY protocol header at the start of a connection (v1 text, v2 binary): any bytes,
//! never panic; a header found lies within the bytes and the limit, and starts like one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::listen::proxy_protocol::{parse, Parsed, MAX_HEADER};

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Parsed::Complete { len, .. } => {
            assert!(len > 0 && len <= data.len() && len <= MAX_HEADER);
            assert!(data.starts_with(b"PROXY ") || data.starts_with(b"\r\n\r\n\0\r\nQUIT\n"));
            // The header alone parses the same.
            assert_eq!(parse(&data[..len]), parse(data));
        }
        Parsed::Incomplete => assert!(data.len() < MAX_HEADER),
        Parsed::Invalid => {}
    }
});
