//! The admin listener's text parsers: an operator action (method, path tail, query, body), the
//! audit log's query, the console's login form, a `Cookie` header, an `Authorization` header and
//! the cross-site check. None of them ever panics, and what they accept is within bounds: a
//! notice of 1 to 500 characters, an admission count of 1 to 100000, an audit limit of 1 to 1000,
//! a form field no longer than the body.
//!
//! The input is `method-byte what \0 query \0 body \0 header`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::admin::parse::{
    audit_query, bearer_token, cookie, cross_site, form_field, parse_action,
};
use vestibule::controls::{Action, PaceKey};

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let method = match m % 4 {
        0 => http::Method::GET,
        1 => http::Method::POST,
        2 => http::Method::PUT,
        _ => http::Method::DELETE,
    };
    let mut parts = rest.splitn(4, |b| *b == 0);
    let what = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let query = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let body = parts.next().unwrap_or_default();
    let header = parts.next().unwrap_or_default();

    let pace_key = if m & 0x80 == 0 {
        PaceKey::NewUsersPerMinute
    } else {
        PaceKey::AllowPercentage
    };
    match parse_action(&method, &what, &query, body, pace_key) {
        Ok(Action::SetMessage(text)) => {
            let n = text.chars().count();
            assert!((1..=500).contains(&n), "{n}");
        }
        Ok(Action::Admit(n)) => assert!((1..=100_000).contains(&n), "{n}"),
        Ok(Action::SetPace(p)) => {
            assert_eq!(p.key, pace_key);
            assert!(p.value.is_finite() && p.value >= 0.0, "{p:?}");
        }
        Ok(other) => assert!(body.is_empty(), "{other:?} took a body"),
        Err((status, message)) => {
            assert!(status.is_client_error(), "{status}");
            assert!(!message.is_empty());
        }
    }
    if let Ok((_, limit)) = audit_query(&query) {
        assert!((1..=1000).contains(&limit), "{limit}");
    }
    for name in ["token", "csrf"] {
        if let Some(v) = form_field(body, name) {
            assert!(v.len() <= body.len());
        }
    }
    if let Ok(h) = std::str::from_utf8(header) {
        let _ = cookie(h, "vestibule_console");
        let _ = cross_site(Some(h), None, "127.0.0.1:9901");
        let _ = cross_site(None, Some(h), &query);
    }
    if let Some(t) = bearer_token(header) {
        assert!(!t.is_empty() && t.len() < header.len());
    }
});
