//! The room cookie on the wire: finding it in `Cookie` headers, removing it before the origin
//! sees the request, and writing `Set-Cookie`.
//!
//! Pure byte handling, no HTTP types. Other cookies reach the origin byte for byte: a `Cookie`
//! header without a room cookie is left untouched, and one with a room cookie loses exactly that
//! pair and its separator.

use crate::config::{CookieConfig, CookieSecure, SameSite};

/// At most this many candidate values of one cookie are looked at (a client may send several
/// `Cookie` headers, or one name several times).
pub const MAX_CANDIDATES: usize = 4;

/// Values of cookie `name` in `headers` (each a raw `Cookie` header value), in order.
pub fn values<'a, I>(headers: I, name: &str) -> Vec<&'a [u8]>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut found = Vec::new();
    for header in headers {
        for pair in pairs(header) {
            let pair = trim(pair);
            let Some(eq) = memchr::memchr(b'=', pair) else {
                continue;
            };
            if trim(&pair[..eq]) == name.as_bytes() {
                found.push(trim(&pair[eq + 1..]));
                if found.len() == MAX_CANDIDATES {
                    return found;
                }
            }
        }
    }
    found
}

/// The `;`-separated pieces of a header, found with a SIMD search (cookie values are long).
fn pairs(header: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        match memchr::memchr(b';', &header[start..]) {
            Some(i) => {
                let pair = &header[start..start + i];
                start += i + 1;
                Some(pair)
            }
            None => {
                done = true;
                Some(&header[start..])
            }
        }
    })
}

/// What stripping did to one `Cookie` header value.
#[derive(Debug, PartialEq, Eq)]
pub enum Stripped {
    /// No room cookie in it: forward it as it was.
    Unchanged,
    /// Forward this instead.
    Changed(Vec<u8>),
    /// Nothing left: drop the header.
    Empty,
}

/// Removes every cookie named in `names` from one `Cookie` header value.
pub fn strip<S: AsRef<str>>(header: &[u8], names: &[S]) -> Stripped {
    let is_ours = |pair: &[u8]| {
        let pair = trim(pair);
        let name = memchr::memchr(b'=', pair).map_or(pair, |eq| trim(&pair[..eq]));
        names.iter().any(|n| n.as_ref().as_bytes() == name)
    };
    // One pass; the output is only built once a room cookie is found.
    let mut out: Option<Vec<u8>> = None;
    let mut start = 0usize;
    for pair in pairs(header) {
        let ours = is_ours(pair);
        if ours && out.is_none() {
            // Everything before this pair is kept as it was. Nothing is allocated until a
            // pair is kept: a header holding only the room cookie (an admitted visitor's
            // usual request) is dropped without one.
            let mut v = Vec::new();
            for earlier in pairs(&header[..start.saturating_sub(1)]) {
                if !trim(earlier).is_empty() {
                    push_pair(&mut v, earlier, header.len());
                }
            }
            out = Some(v);
        } else if !ours && !trim(pair).is_empty() {
            if let Some(v) = out.as_mut() {
                push_pair(v, pair, header.len());
            }
        }
        start += pair.len() + 1;
    }
    match out {
        None => Stripped::Unchanged,
        Some(v) if v.is_empty() => Stripped::Empty,
        Some(v) => Stripped::Changed(v),
    }
}

/// Appends one kept pair, byte for byte (the first without its leading space). The first
/// reserves room for the whole header, which the kept pairs never exceed.
fn push_pair(out: &mut Vec<u8>, pair: &[u8], header_len: usize) {
    if out.is_empty() {
        out.reserve_exact(header_len);
        out.extend_from_slice(trim_start(pair));
    } else {
        out.push(b';');
        out.extend_from_slice(pair);
    }
}

/// A `Set-Cookie` value giving the room cookie `value`.
pub fn set(config: &CookieConfig, value: &str, secure: bool) -> String {
    // Written piece by piece: it is on every waiting page, and `format!` costs more than the
    // rest of it.
    let mut max_age = itoa::Buffer::new();
    let max_age = max_age.format(config.lifetime.as_secs());
    let mut s = String::with_capacity(config.name.len() + value.len() + max_age.len() + 56);
    for part in [
        config.name.as_str(),
        "=",
        value,
        "; Path=/; Max-Age=",
        max_age,
        "; HttpOnly; SameSite=",
        same_site(config.same_site),
    ] {
        s.push_str(part);
    }
    if is_secure(config.secure, secure) {
        s.push_str("; Secure");
    }
    s
}

/// A `Set-Cookie` value giving cookie `name` (another of the room's, like its JWT's) `value`
/// for `max_age` seconds, with the room cookie's attributes.
pub fn set_named(
    config: &CookieConfig,
    name: &str,
    value: &str,
    max_age: u64,
    secure: bool,
) -> String {
    let mut s = format!(
        "{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite={}",
        same_site(config.same_site)
    );
    if is_secure(config.secure, secure) {
        s.push_str("; Secure");
    }
    s
}

/// A `Set-Cookie` value deleting the room cookie.
pub fn delete(config: &CookieConfig, secure: bool) -> String {
    delete_named(config, &config.name, secure)
}

/// A `Set-Cookie` value deleting cookie `name` of the room (its own, or its JWT's).
pub fn delete_named(config: &CookieConfig, name: &str, secure: bool) -> String {
    let mut s = format!(
        "{name}=deleted; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; SameSite={}",
        same_site(config.same_site)
    );
    if is_secure(config.secure, secure) {
        s.push_str("; Secure");
    }
    s
}

/// Removes a `pow` room's solution cookie, as its challenge page set it.
pub(crate) fn delete_solution(name: &str) -> String {
    format!("{name}=; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; SameSite=Lax")
}

fn same_site(s: SameSite) -> &'static str {
    match s {
        SameSite::Lax => "Lax",
        SameSite::Strict => "Strict",
        SameSite::None => "None",
    }
}

/// `request_secure`: whether the request arrived over TLS (directly or per a trusted proxy).
fn is_secure(setting: CookieSecure, request_secure: bool) -> bool {
    match setting {
        CookieSecure::Always => true,
        CookieSecure::Never => false,
        CookieSecure::Auto => request_secure,
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let b = trim_start(b);
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &b[..end]
}

fn trim_start(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    &b[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cfg() -> CookieConfig {
        CookieConfig {
            name: "waiting_room".into(),
            lifetime: Duration::from_secs(7200),
            same_site: SameSite::Lax,
            secure: CookieSecure::Auto,
        }
    }

    #[test]
    fn finds_values_across_headers() {
        let h1: &[u8] = b"a=1; waiting_room=dec=wait&exp=1; b=2";
        let h2: &[u8] = b"waiting_room=second";
        assert_eq!(
            values([h1, h2], "waiting_room"),
            vec![&b"dec=wait&exp=1"[..], &b"second"[..]]
        );
        assert!(values([&b"waiting_roomx=1; xwaiting_room=2"[..]], "waiting_room").is_empty());
        let many = "waiting_room=1;".repeat(100);
        assert_eq!(
            values([many.as_bytes()], "waiting_room").len(),
            MAX_CANDIDATES
        );
    }

    #[test]
    fn strips_exactly_our_pair() {
        let names = ["waiting_room"];
        assert_eq!(strip(b"a=1; b=2", &names), Stripped::Unchanged);
        assert_eq!(
            strip(b"a=1; waiting_room=x&y=z; b=2", &names),
            Stripped::Changed(b"a=1; b=2".to_vec())
        );
        assert_eq!(
            strip(b"waiting_room=x; b=2;  c=3", &names),
            Stripped::Changed(b"b=2;  c=3".to_vec())
        );
        assert_eq!(
            strip(b"a=1;waiting_room=x", &names),
            Stripped::Changed(b"a=1".to_vec())
        );
        assert_eq!(strip(b"waiting_room=x", &names), Stripped::Empty);
        assert_eq!(strip(b" waiting_room = x ;", &names), Stripped::Empty);
        assert_eq!(
            strip(b"a=\"q;uoted\"; waiting_room=1", &names),
            Stripped::Changed(b"a=\"q;uoted\"".to_vec())
        );
        assert_eq!(
            strip(b"r1=a; r2=b; keep=c", &["r1", "r2"]),
            Stripped::Changed(b"keep=c".to_vec())
        );
    }

    /// The obvious two-pass version, as the reference for the one-pass `strip`.
    fn strip_reference(header: &[u8], names: &[&str]) -> Stripped {
        let is_ours = |pair: &[u8]| {
            let pair = trim(pair);
            let name = pair
                .iter()
                .position(|b| *b == b'=')
                .map_or(pair, |eq| trim(&pair[..eq]));
            names.iter().any(|n| n.as_bytes() == name)
        };
        if !header.split(|b| *b == b';').any(is_ours) {
            return Stripped::Unchanged;
        }
        let kept: Vec<&[u8]> = header
            .split(|b| *b == b';')
            .filter(|p| !is_ours(p) && !trim(p).is_empty())
            .collect();
        if kept.is_empty() {
            return Stripped::Empty;
        }
        let mut out = Vec::new();
        for p in kept {
            push_pair(&mut out, p, header.len());
        }
        Stripped::Changed(out)
    }

    proptest::proptest! {
        #[test]
        fn one_pass_strip_matches_the_reference(header in "[ a-z=;_]{0,40}(waiting_room=[a-z0-9&=]{0,8})?[ a-z=;_]{0,40}") {
            let names = ["waiting_room", "ab"];
            proptest::prop_assert_eq!(strip(header.as_bytes(), &names), strip_reference(header.as_bytes(), &names));
        }
    }

    #[test]
    fn set_cookie_attributes() {
        let mut c = cfg();
        assert_eq!(
            set(&c, "v", false),
            "waiting_room=v; Path=/; Max-Age=7200; HttpOnly; SameSite=Lax"
        );
        assert!(set(&c, "v", true).ends_with("; Secure"));
        c.secure = CookieSecure::Never;
        assert!(!set(&c, "v", true).contains("Secure"));
        c.secure = CookieSecure::Always;
        c.same_site = SameSite::None;
        assert!(set(&c, "v", false).ends_with("SameSite=None; Secure"));
        let d = delete(&cfg(), false);
        assert!(d.starts_with("waiting_room=deleted; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970"));
    }
}
