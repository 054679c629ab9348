//! What a waiting visitor's browser gets: the room's title, no double reload, subresources
//! that never join the queue.

use crate::common::*;

const NAV_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// A favicon, image or script of a held page gets a short 503 with `Retry-After` and no
/// cookie: it neither joins the queue nor checks in. An admitted visitor's goes through.
#[test]
fn subresources_of_held_pages_get_a_short_503() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\nname = \"sale\"\ntitle = \"The Big Sale\"\npages = \"pages\"\nallow_percentage = 50\nwait_period = \"20s\"")
        .start();
    let before = origin.served();
    for (accept, mode) in [
        ("image/avif,image/webp,*/*;q=0.8", Some("no-cors")),
        ("*/*", Some("cors")),
        ("text/css,*/*;q=0.1", Some("no-cors")),
        ("image/png", None),
    ] {
        let mut req = client().get(v.url("/favicon.ico")).header("Accept", accept);
        if let Some(m) = mode {
            req = req.header("Sec-Fetch-Mode", m);
        }
        let resp = req.send().unwrap();
        assert_eq!(resp.status(), 503, "{accept} {mode:?}");
        assert_eq!(resp.headers()["retry-after"], "20");
        assert!(set_cookies(&resp).is_empty(), "no cookie for a subresource");
        assert!(resp.text().unwrap().len() < 200, "a short answer");
    }
    assert_eq!(origin.served(), before);
    // The navigation itself gets the page, its cookie and the room's title.
    let resp = client()
        .get(v.url("/"))
        .header("Accept", NAV_ACCEPT)
        .header("Sec-Fetch-Mode", "navigate")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let cookie = room_cookie(&resp, "waiting_room").expect("a place in line");
    assert!(resp.headers().get("refresh").is_none());
    let html = resp.text().unwrap();
    assert!(html.contains("The Big Sale is very busy"), "{html}");
    // With that wait cookie, a subresource is still held (and does not check in).
    let resp = client()
        .get(v.url("/app.js"))
        .header("Accept", "*/*")
        .header("Sec-Fetch-Mode", "no-cors")
        .header("Cookie", format!("waiting_room={cookie}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(set_cookies(&resp).is_empty());
    // JSON wins over Sec-Fetch-Mode: apps calling fetch get the JSON body.
    let resp = client()
        .get(v.url("/api"))
        .header("Accept", "application/json")
        .header("Sec-Fetch-Mode", "cors")
        .send()
        .unwrap();
    let body: serde_json::Value = resp.json().unwrap();
    assert_eq!(body["in_waiting_room"], true);
    // An admitted visitor's subresources go on to the origin.
    let allow = mint(
        vestibule::token::Dec::Allow,
        vestibule::time::now().secs() + 3600,
        &localhost(),
    );
    let resp = client()
        .get(v.url("/__echo"))
        .header("Accept", "*/*")
        .header("Sec-Fetch-Mode", "no-cors")
        .header("Cookie", format!("waiting_room={allow}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(origin.served(), before + 1);
    let m = v.metrics();
    assert!(
        metric_value(
            &m,
            "vestibule_room_decisions_total{decision=\"anon\",mode=\"enforce\",room=\"sale\"}"
        ) >= 5.0
    );
}
