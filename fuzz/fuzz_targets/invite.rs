//! The invitation parser and checker, and the link parameter's reader: any bytes as a
//! code, against a ring, never panic; whatever is accepted is bound to the room it was checked
//! for and has sane terms. Any text as a query string: the parameter found is the one stripped.
#![no_main]

mod common;

use common::ring;
use libfuzzer_sys::fuzz_target;
use vestibule::invite::{check, from_query, is_valid_lane, strip_from_query, MAX_USES};
use vestibule::time::Timestamp;

fuzz_target!(|data: &[u8]| {
    let ring = ring();
    let now = Timestamp::from_secs(1_700_000_000);
    if let Ok(invitation) = check(ring, "presale", data, now) {
        assert!(is_valid_lane(invitation.lane));
        assert!((1..=MAX_USES).contains(&invitation.uses));
        assert!(invitation.exp > now.secs());
        assert!(check(ring, "shop", data, now).is_err());
    }
    if let Ok(query) = std::str::from_utf8(data) {
        let found = from_query(query).is_some();
        match strip_from_query(query) {
            Some(rest) => assert!(from_query(&rest).is_none()),
            None => assert!(!found),
        }
    }
});
