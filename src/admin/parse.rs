//! The admin listener's text parsers, kept apart so they are fuzzed (`fuzz/fuzz_targets/admin.rs`):
//! an operator action's method, path, query and body; `GET /audit`'s query; the console's login
//! form; a `Cookie` header; an `Authorization` header's bearer token; and whether a request comes
//! from another site. None of them panics on any input.

use http::StatusCode;

use crate::controls::Action;

/// The action a method, path tail, query and body ask for (`pace_key`: which pace the room
/// takes, for `PUT overrides`).
pub fn parse_action(
    method: &http::Method,
    what: &str,
    query: &str,
    body: &[u8],
    pace_key: crate::controls::PaceKey,
) -> Result<Action, (StatusCode, String)> {
    use http::Method;
    let bad = |m: &str| Err((StatusCode::BAD_REQUEST, m.to_owned()));
    let action =
        match (method, what) {
            (&Method::POST, "pause") => Action::Pause,
            (&Method::POST, "resume") => Action::Resume,
            (&Method::POST, "admit") => {
                let count = query
                    .split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| *k == "count")
                    .map(|(_, v)| v);
                let Some(count) = count else {
                    return bad("admit needs ?count=N");
                };
                match count.parse::<u64>() {
                    Ok(n) if (1..=crate::controls::MAX_ADMIT).contains(&n) => Action::Admit(n),
                    _ => {
                        return bad(&format!(
                            "count must be a whole number from 1 to {}",
                            crate::controls::MAX_ADMIT
                        ))
                    }
                }
            }
            (&Method::PUT, "message") => {
                let Ok(text) = std::str::from_utf8(body) else {
                    return bad("the message is not UTF-8");
                };
                match crate::controls::check_message(text) {
                    Ok(text) => Action::SetMessage(text),
                    Err(e) => return bad(&e),
                }
            }
            (&Method::DELETE, "message") => Action::ClearMessage,
            (&Method::PUT, "sold-out") => Action::SetSoldOut,
            (&Method::DELETE, "sold-out") => Action::ClearSoldOut,
            (&Method::DELETE, "overrides") => Action::ClearOverrides,
            (&Method::PUT, "overrides") => match crate::controls::parse_pace(body, pace_key) {
                Ok(set) => Action::SetPace(set),
                Err(e) => return bad(&e),
            },
            (_, "pause" | "resume" | "admit" | "message" | "sold-out" | "overrides") => {
                return Err((
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{method} does not apply to {what}; see the admin API in the docs"),
                ))
            }
            _ => return Err((
                StatusCode::NOT_FOUND,
                "no such action; try pause, resume, admit?count=N, message, sold-out or overrides"
                    .to_owned(),
            )),
        };
    if !matches!(action, Action::SetMessage(_) | Action::SetPace(_)) && !body.is_empty() {
        return bad("this action takes no body");
    }
    Ok(action)
}

/// `room=` and `limit=` of `GET /audit` (100 by default, at most 1000).
pub fn audit_query(query: &str) -> Result<(Option<String>, usize), String> {
    let mut room = None;
    let mut limit = 100;
    for (k, v) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        match k {
            "room" if !v.is_empty() => {
                let v = String::from_utf8(
                    form_field(&[b"v=", v.as_bytes()].concat(), "v").unwrap_or_default(),
                )
                .map_err(|_| "room must be UTF-8".to_owned())?;
                room = Some(v);
            }
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=super::audit::MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "limit must be a whole number from 1 to {}",
                            super::audit::MAX_LIMIT
                        )
                    })?;
            }
            _ => {}
        }
    }
    Ok((room, limit))
}

/// Field `name` of a form body (`application/x-www-form-urlencoded`), decoded.
pub fn form_field(body: &[u8], name: &str) -> Option<Vec<u8>> {
    body.split(|b| *b == b'&')
        .filter_map(|kv| {
            let i = kv.iter().position(|b| *b == b'=')?;
            Some((&kv[..i], &kv[i + 1..]))
        })
        .find(|(k, _)| *k == name.as_bytes())
        .map(|(_, v)| percent_decode(v))
}

fn percent_decode(v: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < v.len() => match (hex(v[i + 1]), hex(v[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// The token of an `Authorization: Bearer <token>` value: `None` for another scheme, no token,
/// or no value. The scheme is case-insensitive (RFC 9110 §11.1).
pub fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let i = value.iter().position(|b| *b == b' ')?;
    let (scheme, given) = (&value[..i], value[i + 1..].trim_ascii());
    (scheme.eq_ignore_ascii_case(b"bearer") && !given.is_empty()).then_some(given)
}

/// Whether a request comes from another site than `host`, the `Host` it was sent to. A
/// browser's `Sec-Fetch-Site` says so when sent (`same-origin`, or `none` for a typed address,
/// pass); else the `Origin` must name `host` (`null`, sent by a page that hides its origin,
/// does not). A request with neither (curl, an old browser) is not cross-site by this check; the
/// CSRF token still guards it.
pub fn cross_site(origin: Option<&str>, fetch_site: Option<&str>, host: &str) -> bool {
    if let Some(site) = fetch_site {
        return !matches!(site, "same-origin" | "none");
    }
    if let Some(origin) = origin {
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        return match authority {
            Some(a) => !a.trim_end_matches('/').eq_ignore_ascii_case(host),
            None => true,
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_form_is_read_with_its_escapes() {
        assert_eq!(
            form_field(b"token=a%2Bb+c%3D&x=1", "token").unwrap(),
            b"a+b c="
        );
        assert_eq!(form_field(b"x=1&token=", "token").unwrap(), b"");
        assert_eq!(form_field(b"x=1", "token"), None);
        assert_eq!(form_field(b"token=%zz%4", "token").unwrap(), b"%zz%4");
        assert_eq!(form_field(b"token=%", "token").unwrap(), b"%");
    }

    #[test]
    fn cross_site_requests_are_known_by_origin_or_fetch_site() {
        let host = "127.0.0.1:9901";
        assert!(!cross_site(Some("http://127.0.0.1:9901"), None, host));
        assert!(!cross_site(Some("https://127.0.0.1:9901/"), None, host));
        assert!(cross_site(Some("http://evil.example"), None, host));
        assert!(cross_site(Some("null"), None, host));
        assert!(cross_site(Some("http://127.0.0.1:9902"), None, host));
        assert!(cross_site(None, Some("cross-site"), host));
        assert!(cross_site(None, Some("same-site"), host));
        assert!(!cross_site(None, Some("same-origin"), host));
        assert!(!cross_site(Some("null"), Some("same-origin"), host));
        assert!(cross_site(
            Some("http://127.0.0.1:9901"),
            Some("cross-site"),
            host
        ));
        assert!(!cross_site(None, None, host));
    }

    #[test]
    fn a_bearer_token_is_the_value_after_its_scheme() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bEaReR  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
        assert_eq!(bearer_token(b"Bearer"), None);
    }

    #[test]
    fn the_audit_query_takes_a_room_and_a_limit() {
        assert_eq!(audit_query("").unwrap(), (None, 100));
        assert_eq!(
            audit_query("room=s%C3%A4le&limit=5").unwrap(),
            (Some("säle".to_owned()), 5)
        );
        assert!(audit_query("limit=0").is_err());
        assert!(audit_query("limit=1001").is_err());
        assert!(audit_query("room=%ff").is_err());
    }

    #[test]
    fn cookies_are_found_by_name() {
        assert_eq!(
            cookie("a=1; vestibule_console=xyz", "vestibule_console"),
            Some("xyz")
        );
        assert_eq!(cookie("vestibule_consolex=1", "vestibule_console"), None);
        assert_eq!(cookie("", "a"), None);
    }
}
