//! The proof-of-work solution parser and checker: any bytes as a solution, against a
//! ring, never panic; whatever is accepted is bound to the identity and room it was checked for,
//! and shows the work its value asks for.
#![no_main]

mod common;

use common::ring;
use libfuzzer_sys::fuzz_target;
use vestibule::challenge::{check, check_work, MIN_DIFFICULTY};
use vestibule::identity::Identity;
use vestibule::time::Timestamp;

fuzz_target!(|data: &[u8]| {
    let ring = ring();
    let uid = Identity::of_ip("192.0.2.1".parse().unwrap(), 64);
    let now = Timestamp::from_secs(1_700_000_000);
    if check(ring, "sale", &uid, data, now).is_ok() {
        assert!(check_work(data) >= u32::from(MIN_DIFFICULTY));
        let other = Identity::of_ip("192.0.2.2".parse().unwrap(), 64);
        assert!(check(ring, "sale", &other, data, now).is_err());
        assert!(check(ring, "other", &uid, data, now).is_err());
    }
});
