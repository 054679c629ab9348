//! The Cookie header splitter and the room-cookie stripper: any header bytes, never panic;
//! stripping removes exactly the room cookie and keeps everything else.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::cookie::{self, Stripped};

fuzz_target!(|data: &[u8]| {
    let names = ["waiting_room", "wr_checkout"];
    let headers: Vec<&[u8]> = data.split(|b| *b == 0).collect();
    let found = cookie::values(headers.iter().copied(), "waiting_room");
    assert!(found.len() <= cookie::MAX_CANDIDATES);
    for header in &headers {
        match cookie::strip(header, &names) {
            Stripped::Unchanged => {
                assert!(cookie::values([*header], "waiting_room").is_empty());
                assert!(cookie::values([*header], "wr_checkout").is_empty());
            }
            Stripped::Changed(rest) => {
                assert!(cookie::values([&rest[..]], "waiting_room").is_empty());
                assert!(cookie::values([&rest[..]], "wr_checkout").is_empty());
                // Other cookies survive.
                let kept = cookie::values([*header], "other").len();
                assert_eq!(cookie::values([&rest[..]], "other").len(), kept.min(cookie::MAX_CANDIDATES));
            }
            Stripped::Empty => {}
        }
    }
});
