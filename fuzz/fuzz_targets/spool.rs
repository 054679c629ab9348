//! The events spool's record parser (`vestibule::sinks::spool`), which reads segment files back
//! after a crash: whatever the bytes, it never panics; what `scan` keeps is a run of whole
//! records with consecutive sequence numbers, each of which `parse` reads alike and `encode`
//! writes back to exactly the bytes it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::sinks::spool::{encode, parse, scan, Parsed, HEADER};

fuzz_target!(|data: &[u8]| {
    let (records, good) = scan(data);
    assert!(good <= data.len());
    let mut at = 0;
    let mut again = Vec::new();
    for (i, &(seq, spooled)) in records.iter().enumerate() {
        if i > 0 {
            assert_eq!(seq, records[i - 1].0 + 1);
        }
        match parse(&data[at..]) {
            Parsed::Record {
                seq: s,
                spooled_ms,
                payload,
                len,
            } => {
                assert_eq!((s, spooled_ms), (seq, spooled));
                assert_eq!(len, HEADER + payload.len());
                encode(s, spooled_ms, payload, &mut again);
                at += len;
            }
            other => panic!("scan kept what parse refuses: {other:?}"),
        }
    }
    assert_eq!(at, good);
    assert_eq!(&again[..], &data[..good]);
});
