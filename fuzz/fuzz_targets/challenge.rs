//! The proof-of-work solution parser and checker (SPEC §14): any bytes as a solution, against a
//! ring, never panic; whatever is accepted is bound to the identity and room it was checked for,
//! and shows the work its value asks for.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vestibule::challenge::{check, check_work, MIN_DIFFICULTY};
use vestibule::identity::Identity;
use vestibule::keys::KeyRing;
use vestibule::time::Timestamp;

fn ring() -> &'static KeyRing {
    static RING: OnceLock<KeyRing> = OnceLock::new();
    RING.get_or_init(|| {
        KeyRing::from_entries(
            "key1",
            &[
                ("key1", "ZnV6ei1rZXktb25lLWZ1enota2V5LW9uZS1mdXp6LWtleS1vbmUtMDAwMDA="),
                ("key2", "ZnV6ei1rZXktdHdvLWZ1enota2V5LXR3by1mdXp6LWtleS10d28tMDAwMDA="),
            ],
        )
        .expect("fuzz ring")
    })
}

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
