//! A room's `[[room.event]]` schedule: read in time order, and bad events named by file, key and
//! line.

use super::*;

#[test]
fn events_are_read_in_time_order() {
    // The event's page folder must exist.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pages/launch")).unwrap();
    let c = Config::parse(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 100\n\
         [[room.event]]\nname = \"late\"\nstart = \"2026-12-02T10:00:00Z\"\nend = \"2026-12-02T12:00:00Z\"\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"2026-12-01T09:30:00Z\"\n\
         start = \"2026-12-01T11:00:00+01:00\"\nend = 2026-12-01T14:00:00Z\nshuffle_at_start = true\n\
         pages = \"pages/launch\"\nnew_users_per_minute = 500\nadmission = \"random\"\ntitle = \"Launch\"\n"
    ), &dir.path().join("vestibule.toml"), &Disk)
    .unwrap();
    let events = &c.rooms[0].events;
    assert_eq!(
        events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["launch", "late"]
    );
    let e = &events[0];
    assert_eq!(e.prequeue_start, Some(1_796_117_400));
    assert_eq!((e.start, e.end), (1_796_119_200, 1_796_133_600));
    assert!(e.shuffle_at_start);
    assert_eq!(e.pages, Some(dir.path().join("pages/launch")));
    assert_eq!(e.overrides.new_users_per_minute, Some(500));
    assert_eq!(e.overrides.order, Some(QueueOrder::Random));
    assert_eq!(e.overrides.title.as_deref(), Some("Launch"));
    let Admission::Capacity(during) = e.admission(&c.rooms[0].admission) else {
        panic!("a capacity room stays one");
    };
    assert_eq!(
        (during.new_users_per_minute, during.order),
        (500, QueueOrder::Random)
    );
}

#[test]
fn bad_events_name_file_key_and_line() {
    let text = format!(
        "{MINIMAL}[[room]]\nallow_percentage = 10\n\
         [[room.event]]\nname = \"a\"\nstart = \"2026-12-01T10:00:00\"\nend = \"2026-12-01T12:00:00Z\"\n\
         [[room.event]]\nname = \"b\"\nprequeue_start = \"2026-12-01T11:00:00Z\"\nstart = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T12:00:00Z\"\n\
         [[room.event]]\nname = \"c\"\nstart = \"2026-12-03T10:00:00Z\"\nend = \"2026-12-03T09:00:00Z\"\n\
         [[room.event]]\nname = \"d\"\nstart = \"2026-12-04T10:00:00Z\"\nend = \"2026-12-04T12:00:00Z\"\nnew_users_per_minute = 5\nshuffle_at_start = true\n\
         [[room.event]]\nname = \"e\"\nprequeue_start = \"2026-12-04T11:00:00Z\"\nstart = \"2026-12-04T11:30:00Z\"\nend = \"2026-12-04T13:00:00Z\"\n\
         [[room.event]]\nstart = \"next tuesday\"\nend = \"2026-12-05T13:00:00Z\"\n"
    );
    let e = errors(&text);
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    // Each names the file, the line and the key.
    has("vestibule.toml:7: room[0].event[0].start: \"2026-12-01T10:00:00\" is not an RFC 3339 time with a zone");
    has("vestibule.toml:11: room[0].event[1].prequeue_start: must be before start");
    has("vestibule.toml:17: room[0].event[2].end: must be after start");
    has("room[0].event[3].new_users_per_minute: does not apply to this room's admission (\"lottery\")");
    has("room[0].event[3].shuffle_at_start: needs prequeue_start");
    has("vestibule.toml:26: room[0].event[4].prequeue_start: event \"e\" overlaps event \"d\"");
    has("room[0].event[5].name: needs a name");
    has("room[0].event[5].start: \"next tuesday\" is not an RFC 3339 time");
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1\n\
         [[room.event]]\nname = \"x\"\nstart = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T12:00:00Z\"\nallow_percentage = 5\nadmission = \"lottery\"\n"
    ));
    assert!(
        e.contains("room[0].event[0].allow_percentage: does not apply"),
        "{e}"
    );
    assert!(
        e.contains("room[0].event[0].admission: must be \"random\" or \"fifo\""),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\n[[room.event]]\nname = \"x\"\n"
    ));
    assert!(e.contains("room[0].event[0].start: is required"), "{e}");
    assert!(e.contains("room[0].event[0].end: is required"), "{e}");
}

#[test]
fn a_verifiable_draw_needs_a_shuffled_pre_queue_in_a_capacity_room() {
    let event = |room: &str, extra: &str| {
        format!(
            "{MINIMAL}[[room]]\n{room}\n[[room.event]]\nname = \"x\"\n\
             start = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T12:00:00Z\"\n{extra}"
        )
    };
    let fifo = "admission = \"fifo\"\nnew_users_per_minute = 1";
    let prequeue = "prequeue_start = \"2026-12-01T09:00:00Z\"\nshuffle_at_start = true\n";
    let c = Config::parse(
        &event(fifo, &format!("{prequeue}draw = \"verifiable\"\n")),
        Path::new("/tmp/vestibule.toml"),
        &testing::Bare,
    )
    .unwrap();
    assert!(c.rooms[0].events[0].verifiable());
    let e = errors(&event(fifo, "draw = \"verifiable\"\n"));
    assert!(
        e.contains(
            "room[0].event[0].draw: \"verifiable\" needs prequeue_start and shuffle_at_start"
        ),
        "{e}"
    );
    let e = errors(&event(
        "allow_percentage = 5",
        &format!("{prequeue}draw = \"verifiable\"\n"),
    ));
    assert!(
        e.contains("room[0].event[0].draw: \"verifiable\" needs a random or fifo room"),
        "{e}"
    );
    let e = errors(&event(fifo, &format!("{prequeue}draw = \"fair\"\n")));
    assert!(
        e.contains(":12: room[0].event[0].draw: must be \"keyed\" or \"verifiable\""),
        "{e}"
    );
}
