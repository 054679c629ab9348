//! The queue API's request ids: any text never panics; an id that reads back is one the ring
//! signed for this room, and writing it again gives an id that reads back the same. The same
//! text as a stream's query (`?request_id=`) never panics either, and what it names is a piece
//! of it with no `&` or `%`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::api::queue::RequestId;
use vestibule::keys::testing::ring;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(id) = vestibule::api::stream_request_id(text) {
        assert!(text.contains(id) && !id.contains('&') && !id.contains('%') && id.len() <= 200);
    }
    let ring = ring();
    if let Some(id) = RequestId::read(text, "sale", &ring) {
        let again = id.write("sale", &ring);
        assert_eq!(RequestId::read(&again, "sale", &ring), Some(id.clone()));
        assert_eq!(RequestId::read(&again, "other", &ring), None, "bound to its room");
    }
});
