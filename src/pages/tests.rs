//! Unit tests of the page sets: escaping, the built-in pages, loading and its errors, the
//! render cache, the words a waiting visitor reads, and the JSON answers.

use std::path::Path;

use super::context::{countdown, readable_time};
use super::render::origin_references;
use super::*;

fn ctx() -> PageContext<'static> {
    let mut c = PageContext::plain("<script>alert(1)</script>", "anon", 7, 502);
    c.title = "<b>Sale</b>";
    c.refresh_seconds = 42;
    c.queueing = "lottery";
    c.rule = "r";
    c
}

/// What a waiting visitor reads: their place and the estimate in words, with plurals, a
/// range where there is one, and never "0 minutes" or "0 people" while they wait. Both
/// waiting pages say the same.
#[test]
fn estimates_and_places_read_right() {
    let pages = Pages::builtin();
    let check = |ahead: Option<u64>, e: [Option<f64>; 3], want: &[&str], never: &[&str]| {
        let mut c = PageContext::plain("shop", "wait", 20, 200);
        c.queueing = "fifo";
        c.users_ahead = ahead;
        let c = c.with_wait(Estimates {
            p25: e[0],
            p50: e[1],
            p75: e[2],
        });
        for kind in [PageKind::StartWaiting, PageKind::KeepWaiting] {
            let html = pages.render(kind, &c);
            let t = std::str::from_utf8(&html).unwrap();
            for w in want {
                assert!(t.contains(w), "{kind:?} lacks {w:?}:\n{t}");
            }
            for n in never
                .iter()
                .chain(&[" 0 minute", "1 minutes", "1 people", " 0 people"])
            {
                assert!(!t.contains(n), "{kind:?} says {n:?}:\n{t}");
            }
        }
    };
    check(
        Some(0),
        [Some(0.2), Some(0.3), Some(0.5)],
        &[
            "You are at the front of the line.",
            "You should get in within a minute.",
        ],
        &[],
    );
    check(
        Some(1),
        [Some(0.5), Some(0.8), Some(1.0)],
        &[
            "About 1 person is ahead of you.",
            "Expected wait: about 1 minute.",
        ],
        &[],
    );
    check(
        Some(9),
        [Some(3.0), Some(3.0), Some(3.0)],
        &[
            "About 9 people are ahead of you.",
            "Expected wait: about 3 minutes.",
        ],
        &[],
    );
    // Whole minutes, rounded outwards: 1.1 to 1.4 minutes reads "1 to 2".
    check(
        Some(2),
        [Some(1.1), Some(1.2), Some(1.4)],
        &["Expected wait: 1 to 2 minutes."],
        &[],
    );
    check(
        Some(40),
        [Some(4.2), Some(5.0), Some(5.9)],
        &[
            "About 40 people are ahead of you.",
            "Expected wait: 4 to 6 minutes.",
        ],
        &[],
    );
    // Under a minute at the 25th percentile but not at the 75th: a range from 1, not 0.
    check(
        Some(3),
        [Some(0.4), Some(0.9), Some(1.6)],
        &["Expected wait: 1 to 2 minutes."],
        &[],
    );
    // Unknown (a held room, or random with no place): no estimate and no place at all.
    check(
        None,
        [None, None, None],
        &[],
        &[
            "Expected wait",
            "within a minute",
            "ahead of you",
            "front of the line",
        ],
    );
}

#[test]
fn builtin_pages_render_and_escape() {
    let pages = Pages::builtin();
    let html = pages.render(PageKind::StartWaiting, &ctx());
    let html = std::str::from_utf8(&html).unwrap();
    assert!(html.contains("&lt;b&gt;Sale&lt;&#x2f;b&gt;"), "{html}");
    assert!(!html.contains("<b>Sale"));
    assert!(html.contains("content=\"42\""));
    let html = pages.render(PageKind::RateLimited, &ctx());
    assert!(std::str::from_utf8(&html).unwrap().contains(">7<"));
    assert!(
        pages.origin_references().is_empty(),
        "{:?}",
        pages.origin_references()
    );
}

#[test]
fn rendered_pages_are_reused_only_for_the_same_context() {
    let pages = Pages::builtin();
    let a = pages.render(PageKind::StartWaiting, &ctx());
    let again = pages.render(PageKind::StartWaiting, &ctx());
    assert_eq!(a.as_ptr(), again.as_ptr(), "served from the cache");
    let mut other = ctx();
    other.refresh_seconds = 41;
    let b = pages.render(PageKind::StartWaiting, &other);
    assert!(std::str::from_utf8(&b).unwrap().contains("content=\"41\""));
    other.refresh_seconds = 42;
    other.title = "another room";
    let c = pages.render(PageKind::StartWaiting, &other);
    assert!(std::str::from_utf8(&c).unwrap().contains("another room"));
    let d = pages.render(PageKind::KeepWaiting, &ctx());
    assert_ne!(a, d);
}

#[test]
fn each_thread_serves_its_own_copy_of_the_same_page() {
    let pages = Pages::builtin();
    let here = pages.render(PageKind::StartWaiting, &ctx());
    std::thread::scope(|s| {
        for refresh in [41, 43, 47] {
            let (pages, here) = (&pages, &here);
            s.spawn(move || {
                let mut other = ctx();
                other.refresh_seconds = refresh;
                for _ in 0..3 {
                    let mine = pages.render(PageKind::StartWaiting, &ctx());
                    // The same bytes, but not a reference to the other thread's copy:
                    // a hit writes nothing another thread reads.
                    assert_eq!(mine, *here);
                    assert_ne!(mine.as_ptr(), here.as_ptr());
                    let again = pages.render(PageKind::StartWaiting, &ctx());
                    assert_eq!(mine.as_ptr(), again.as_ptr(), "this thread's cache");
                    let page = pages.render(PageKind::StartWaiting, &other);
                    let text = std::str::from_utf8(&page).unwrap();
                    assert!(text.contains(&format!("content=\"{refresh}\"")));
                }
            });
        }
    });
}

#[test]
fn shipped_pages_are_self_contained() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pages");
    let pages = Pages::load(&dir, "room[0].pages").unwrap();
    assert!(pages.origin_references().is_empty());
}

#[test]
fn broken_pages_are_errors_and_missing_ones_are_built_in() {
    let dir = std::env::temp_dir().join(format!("vestibule-pages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for kind in PageKind::ALL {
        std::fs::write(dir.join(kind.file_name()), "ok {{ room }}").unwrap();
    }
    assert!(Pages::load(&dir, "room[0].pages").is_ok());
    std::fs::write(dir.join("deny.html"), "line1\n{{ room }\n").unwrap();
    let e = Pages::load(&dir, "room[0].pages").unwrap_err().to_string();
    assert!(
        e.contains("deny.html:2: room[0].pages: template error"),
        "{e}"
    );
    std::fs::write(dir.join("deny.html"), "{{ no_such_variable }}").unwrap();
    let e = Pages::load(&dir, "room[0].pages").unwrap_err().to_string();
    assert!(e.contains("deny.html:1"), "{e}");
    std::fs::remove_file(dir.join("deny.html")).unwrap();
    std::fs::remove_file(dir.join("invite.html")).unwrap();
    let pages = Pages::load(&dir, "room[0].pages").unwrap();
    assert_eq!(pages.missing(), ["deny.html", "invite.html"]);
    let deny = pages.render(PageKind::Deny, &ctx());
    assert_eq!(deny, Pages::builtin().render(PageKind::Deny, &ctx()));
    assert_eq!(
        &pages.render(PageKind::Error, &ctx())[..],
        b"ok &lt;script&gt;alert(1)&lt;&#x2f;script&gt;"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Pages in a folder are full templates, or extend "base.html": the folder's own when it
/// has one, else the built-in one.
#[test]
fn folder_pages_extend_the_folders_base_or_the_built_in_one() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for kind in PageKind::ALL {
        std::fs::write(dir.join(kind.file_name()), "full {{ room }}").unwrap();
    }
    std::fs::write(
        dir.join("deny.html"),
        "{% extends \"base.html\" %}{% block title %}Closed · {{ title }}{% endblock %}\
         {% block heading %}Not today{% endblock %}{% block main %}<p>Tomorrow.</p>{% endblock %}",
    )
    .unwrap();
    let render =
        |pages: &Pages, kind| String::from_utf8(pages.render(kind, &ctx()).to_vec()).unwrap();
    let pages = Pages::load(dir, "room[0].pages").unwrap();
    assert_eq!(
        render(&pages, PageKind::StartWaiting),
        "full &lt;script&gt;alert(1)&lt;&#x2f;script&gt;"
    );
    let deny = render(&pages, PageKind::Deny);
    for part in [
        "<!doctype html>",
        "<title>Closed · &lt;b&gt;Sale&lt;&#x2f;b&gt;</title>",
        "<h1>Not today</h1>",
        "<p>Tomorrow.</p>",
        "content=\"42\"",
        "location.reload()",
    ] {
        assert!(deny.contains(part), "{part} in {deny}");
    }

    std::fs::write(
        dir.join("base.html"),
        "<main class=mine>{% block main %}{% endblock %}</main>",
    )
    .unwrap();
    let pages = Pages::load(dir, "room[0].pages").unwrap();
    assert_eq!(
        render(&pages, PageKind::Deny),
        "<main class=mine><p>Tomorrow.</p></main>"
    );

    std::fs::write(dir.join("base.html"), "line1\n{{ broken }").unwrap();
    let e = Pages::load(dir, "room[0].pages").unwrap_err().to_string();
    assert!(
        e.contains("base.html:2: room[0].pages: template error"),
        "{e}"
    );
}

/// The built-in pages all extend the built-in base, which holds the skeleton once.
#[test]
fn builtin_pages_share_one_base() {
    for kind in PageKind::ALL {
        assert!(
            super::builtin_source(kind).starts_with("{% extends \"base.html\" %}\n"),
            "{}",
            kind.file_name()
        );
        assert!(!super::builtin_source(kind).contains("<style>"));
    }
    assert!(BUILTIN_BASE.contains("<!doctype html>"));
}

#[test]
fn finds_origin_references() {
    let html = "<html>\n<link rel=stylesheet href=\"/static/app.css\">\n<img src='logo.png'>\n<img src=\"data:image/png;base64,AA\">\n<script src=\"https://cdn.example/x.js\"></script>\n<style>body{background:url(/bg.jpg)}</style>\n<a href=\"/home\">home</a>\n";
    let refs = origin_references(html);
    assert_eq!(
        refs,
        vec![
            (2, "/static/app.css".to_owned()),
            (3, "logo.png".to_owned()),
            (6, "/bg.jpg".to_owned())
        ]
    );
}

#[test]
fn a_pre_queue_page_reads_without_javascript() {
    assert_eq!(
        readable_time("2026-12-01T10:00:00Z"),
        "2026-12-01 10:00 UTC"
    );
    assert_eq!(
        readable_time("2026-12-01T10:00:30Z"),
        "2026-12-01 10:00:30 UTC"
    );
    assert_eq!(countdown(3723), "1:02:03");
    assert_eq!(countdown(125), "2:05");
    assert_eq!(countdown(59), "59");
    let ctx = PageContext::plain("r", "prequeue", 300, 200).with_event(
        "launch",
        "prequeue",
        (1_796_119_200, 1_796_122_800),
        true,
        1_796_119_200 - 3723,
    );
    let html =
        String::from_utf8(Pages::builtin().render(PageKind::PreQueue, &ctx).to_vec()).unwrap();
    assert!(
        html.contains(">2026-12-01 10:00 UTC</time>") && html.contains(">1:02:03</span>"),
        "{html}"
    );
    assert!(html.contains("<span id=\"unit\" hidden>"), "{html}");
}

#[test]
fn json_and_accept() {
    let body = json(&WaitingJson::from(&ctx()));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["in_waiting_room"], true);
    assert_eq!(v["refresh_seconds"], 42);
    assert_eq!(v["wait_estimate_minutes"]["p50"], serde_json::Value::Null);
    assert!(wants_json(Some(b"application/json")));
    assert!(wants_json(Some(b"Application/JSON; charset=utf-8, */*")));
    // Named anywhere, JSON wins (first rule).
    assert!(wants_json(Some(b"text/html,application/json")));
    assert!(!wants_json(None));
    assert!(!wants_json(Some(b"\xff")));
}

#[test]
fn held_requests_get_the_answer_their_kind_needs() {
    let w = |accept: Option<&[u8]>, mode: Option<&[u8]>| wants(accept, mode);
    let nav = b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    // Browsers navigating, curl, monitors: the page.
    assert_eq!(w(Some(nav), Some(b"navigate")), Wants::Page);
    assert_eq!(w(None, None), Wants::Page);
    assert_eq!(w(Some(b"*/*"), None), Wants::Page);
    // A favicon, an image, a script: 503.
    assert_eq!(
        w(Some(b"image/avif,image/webp,*/*;q=0.8"), Some(b"no-cors")),
        Wants::Subresource
    );
    assert_eq!(w(Some(b"*/*"), Some(b"cors")), Wants::Subresource);
    assert_eq!(w(Some(b"image/png"), None), Wants::Subresource);
    assert_eq!(w(Some(b"text/css"), None), Wants::Subresource);
    // JSON first, whatever Sec-Fetch-Mode says.
    assert_eq!(w(Some(b"application/json"), Some(b"cors")), Wants::Json);
}

#[test]
fn wait_words_never_say_zero() {
    let c = |p25, p75| {
        PageContext::plain("r", "wait", 20, 200).with_wait(Estimates {
            p25: Some(p25),
            p50: Some((p25 + p75) / 2.0),
            p75: Some(p75),
        })
    };
    let soon = c(0.3, 0.4);
    assert!(soon.wait_soon);
    let short = c(0.3, 1.2);
    assert_eq!(
        (short.wait_soon, short.wait_low, short.wait_high),
        (false, Some(1), Some(2))
    );
    let long = c(7.6, 12.1);
    assert_eq!((long.wait_low, long.wait_high), (Some(7), Some(13)));
    let unknown = PageContext::plain("r", "wait", 20, 200).with_wait(Estimates::default());
    assert_eq!(
        (unknown.wait_soon, unknown.wait_low, unknown.wait_high),
        (false, None, None)
    );
}

/// A room's pages: an `invite` room refuses with 403 and says when an invitation was refused;
/// its title, queueing and language come from the room.
#[test]
fn room_context_follows_the_room() {
    use crate::invite::Refusal;
    use crate::room::{CookieAction, Decision, Outcome};
    let set = crate::room::testing::rooms(
        "[[room]]\nname = \"presale\"\ntitle = \"Presale\"\naccess = \"invite\"\nallow_percentage = 0\n",
    );
    let room = set.get(0).unwrap();
    let pages = RoomPages::builtin(room);
    let now = crate::time::Timestamp::from_secs(1_000);
    let mut o = Outcome::new(Decision::Uninvited, CookieAction::Keep);
    let ctx = room_context(room, &pages, &o, 0, now);
    assert_eq!(
        (ctx.status, ctx.title, ctx.decision),
        (403, "Presale", "uninvited")
    );
    assert_eq!(ctx.queueing, "lottery");
    assert!(!ctx.invitation_refused);
    o.invitation = Some(Err(Refusal::UsedUp));
    assert!(room_context(room, &pages, &o, 0, now).invitation_refused);
    let o = Outcome::new(Decision::Wait, CookieAction::Keep);
    assert_eq!(
        room_context(room, &pages, &o, 0, now).status,
        room.config.wait_status
    );
    assert_eq!(pages.language_for(room, None, now), 0);
    assert!(std::sync::Arc::ptr_eq(pages.at(room, now), pages.own()));
}
