//! Request paths as room and rule prefixes see them.
//!
//! Prefix rules are only as good as the path they test. `/static/../checkout` and
//! `/%73tatic/` must not slip past a `bypass_paths = ["/static/"]` or a guarded `/checkout`, so
//! matching uses a normalised path: unreserved characters percent-decoded, `.` and `..` segments
//! resolved, runs of `/` collapsed. Slashes in any spelling count as separators: `%2F`, and `\`
//! or `%5C` (which many servers and frameworks read as `/`). An origin that decodes
//! `/static/..%2fcheckout` serves `/checkout`, so that is the path the rooms and rules see: a
//! bypass prefix never matches a path that decodes to somewhere else (SPEC §11). The request
//! forwarded to the origin is not rewritten.

use std::borrow::Cow;

/// The normalised form of `path` (the part of the request target before `?`).
pub fn normalize(path: &str) -> Cow<'_, str> {
    if is_normal(path) {
        return Cow::Borrowed(path);
    }
    let decoded = decode_unreserved(path);
    let mut out: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut normal = String::with_capacity(decoded.len() + 1);
    for s in &out {
        normal.push('/');
        normal.push_str(s);
    }
    // A trailing slash is meaningful to prefixes like "/static/".
    let trailing = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    if normal.is_empty() || trailing {
        normal.push('/');
    }
    Cow::Owned(normal)
}

/// Fast path: most paths need no work.
fn is_normal(path: &str) -> bool {
    path.starts_with('/')
        && !path.contains("//")
        && !path.contains("/./")
        && !path.contains("/../")
        && !path.ends_with("/.")
        && !path.ends_with("/..")
        && !path.contains('%')
        && !path.contains('\\')
}

fn decode_unreserved(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len() + 1);
    if !path.starts_with('/') {
        out.push('/');
    }
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            let b = hex_value(bytes[i + 1]) * 16 + hex_value(bytes[i + 2]);
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(b as char);
            } else if b == b'/' || b == b'\\' {
                out.push('/');
            } else {
                // Keep other escapes, in one case, so equal paths compare equal.
                out.push('%');
                out.push(bytes[i + 1].to_ascii_uppercase() as char);
                out.push(bytes[i + 2].to_ascii_uppercase() as char);
            }
            i += 3;
            continue;
        }
        if bytes[i] == b'\\' {
            out.push('/');
            i += 1;
            continue;
        }
        if bytes[i] == b'%' {
            // Not an escape: written as one, so that no escape can be spliced together from
            // what the decoding leaves (`%f%44` is `%25fD`, not `%fD`).
            out.push_str("%25");
            i += 1;
            continue;
        }
        // `path` is a &str, so slicing at char boundaries keeps it valid.
        let ch_len = path[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&path[i..i + ch_len]);
        i += ch_len;
    }
    out
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_normal_paths_alone() {
        for p in ["/", "/a", "/a/b/", "/static/app.css"] {
            assert!(matches!(normalize(p), Cow::Borrowed(_)), "{p}");
        }
    }

    #[test]
    fn resolves_tricks() {
        assert_eq!(normalize("/static/../checkout"), "/checkout");
        assert_eq!(normalize("/static/./x"), "/static/x");
        assert_eq!(normalize("//static//x"), "/static/x");
        assert_eq!(normalize("/%73tatic/x"), "/static/x");
        assert_eq!(normalize("/static/%2e%2e/checkout"), "/checkout");
        assert_eq!(normalize("/a/%2Fb"), "/a/b");
        assert_eq!(normalize("/a/%2fb"), "/a/b");
        assert_eq!(normalize("/a/%3fb"), "/a/%3Fb");
        // Encoded and backslash traversal resolve like the plain kind.
        assert_eq!(normalize("/static/..%2fcheckout"), "/checkout");
        assert_eq!(normalize("/static/..%2Fcheckout"), "/checkout");
        assert_eq!(normalize("/static/%2e%2e%2fcheckout"), "/checkout");
        assert_eq!(normalize("/static/..%5ccheckout"), "/checkout");
        assert_eq!(normalize("/static/..\\checkout"), "/checkout");
        assert_eq!(normalize("/static\\app.css"), "/static/app.css");
        assert_eq!(normalize("/static/%2e%2e/%2e%2e/checkout"), "/checkout");
        assert_eq!(normalize("/../../etc"), "/etc");
        assert_eq!(normalize("/static/.."), "/");
        assert_eq!(normalize("/static/x/.."), "/static/");
        assert_eq!(normalize("/a%"), "/a%25");
        assert_eq!(normalize("/a%zz"), "/a%25zz");
        assert_eq!(normalize("/é/%"), "/é/%25");
        assert_eq!(normalize("relative"), "/relative");
        assert_eq!(normalize("/%aé"), "/%25aé");
        assert_eq!(normalize("/%"), "/%25");
        // Found by the fuzzer: decoding must not splice a new escape together.
        assert_eq!(normalize("./f%f%44\0"), "/f%25fD\0");
        assert_eq!(normalize(&normalize("./f%f%44\0")), "/f%25fD\0");
        assert_eq!(normalize(""), "/");
    }
}
