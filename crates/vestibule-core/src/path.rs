//! Request paths as room and rule prefixes see them.
//!
//! Prefix rules are only as good as the path they test. `/static/../checkout` and
//! `/%73tatic/` must not slip past a `bypass_paths = ["/static/"]` or a guarded `/checkout`, and
//! the rule is: **a bypass prefix never matches a path that an origin could resolve somewhere
//! else**. Origins disagree on how to read a path, so the matcher reads it the strictest way any
//! common one does, and refuses what they would read differently:
//!
//! - Unreserved characters are percent-decoded, `.` and `..` segments resolved, runs of `/`
//!   collapsed. Slashes in any spelling count as separators: `%2F`, and `\` or `%5C` (which many
//!   servers and frameworks read as `/`).
//! - `;` parameters are dropped from each segment, as Tomcat, Jetty and Spring do before they
//!   resolve dot segments: `/checkout;jsessionid=1` is `/checkout`. An encoded `%3B` starts a
//!   parameter too, since an origin that decodes before it splits parameters reads it so.
//! - A control character, raw or percent-encoded (`%00`–`%1F`, `%7F`), is refused: some origins
//!   end the path at NUL, others keep it, so no reading is safe ([`Unfit::ControlCharacter`]).
//! - A path that origins read differently (one with an escape, a `;` parameter or `\`) is
//!   refused when it also has a `.` or `..` segment: whether `..;`, `%2e%2e` or `x%2F..` climbs
//!   one level, two or none depends on the origin ([`Unfit::Ambiguous`]). So is a parameter
//!   holding a separator other than a plain `/`, where origins disagree on where the parameter
//!   ends. Browsers resolve dot segments before they send a request, so no page link is
//!   refused; `/static/../checkout`, plain, is read alike everywhere and resolved.
//! - A bypass prefix must hold for the path as split most finely (decoded, parameters dropped,
//!   every separator spelling a `/`) and as sent (escapes, parameters and `\` kept as
//!   characters): `/static;v=2/app.css` is under `/static/` for Tomcat but names a folder
//!   `static;v=2` for nginx, and `/%73tatic/` is `/static/` only to an origin that decodes
//!   before it routes, so neither is waved through ([`RequestPath::is_under`]).
//!
//! Escapes are decoded once, as every common origin does: `%252e` is the text `%2e`, and an
//! origin that decodes twice is not one a prefix can protect. The request forwarded to the
//! origin is not rewritten.

use std::borrow::Cow;

/// Why a request path is refused (answered with 400 before any room or rule sees it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfit {
    /// A control character (`\0`, a line feed, ...), raw or percent-encoded.
    ControlCharacter,
    /// Origins would resolve it to different places (see the module documentation).
    Ambiguous,
}

impl std::fmt::Display for Unfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unfit::ControlCharacter => "the path holds a control character",
            Unfit::Ambiguous => {
                "the path resolves differently on different servers (a dot segment beside an \
                 escape, a ';' or a '\\', or a separator inside a ';' parameter)"
            }
        })
    }
}

/// A request path, normalised for matching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestPath<'a> {
    /// Parameters dropped, every separator spelling a `/`: what rooms and rules match.
    normal: Cow<'a, str>,
    /// The path as sent (escapes, parameters and `\` left as characters, runs of `/`
    /// collapsed), kept only when origins may read it differently from `normal`.
    literal: Option<String>,
}

impl RequestPath<'_> {
    /// The normalised path: what rooms, rate limit filters and `path` keys see.
    pub fn as_str(&self) -> &str {
        &self.normal
    }

    /// Whether every origin's reading of the path starts with `prefix` (itself normalised):
    /// the test a bypass must pass.
    pub fn is_under(&self, prefix: &str) -> bool {
        self.normal.starts_with(prefix)
            && self.literal.as_ref().is_none_or(|l| l.starts_with(prefix))
    }

    /// Whether some origin's reading of the path is `folder` or inside it (`folder` itself
    /// normalised, without a trailing `/`), in any letter case: the test a reserved path must
    /// pass, so that nothing any origin would read as inside it is ever forwarded (some origins
    /// read paths without regard to case).
    pub fn may_be_in(&self, folder: &str) -> bool {
        let inside = |p: &str| {
            p.get(..folder.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(folder))
                && p[folder.len()..].is_empty() | p[folder.len()..].starts_with('/')
        };
        inside(&self.normal) || self.literal.as_deref().is_some_and(inside)
    }
}

/// The normalised form of `path` (the part of the request target before `?`), or why it is
/// refused.
pub fn normalize(path: &str) -> Result<RequestPath<'_>, Unfit> {
    if is_normal(path) {
        return Ok(RequestPath {
            normal: Cow::Borrowed(path),
            literal: None,
        });
    }
    let scan = scan(path)?;
    let (normal, dots) = resolve(&decode(path, Spelling::Decoded));
    if scan.read_differently && dots {
        return Err(Unfit::Ambiguous);
    }
    // Without dot segments the reading as sent needs no resolving, only its runs of `/`
    // collapsed.
    let literal = scan
        .read_differently
        .then(|| resolve(&decode(path, Spelling::AsSent)).0);
    Ok(RequestPath {
        normal: Cow::Owned(normal),
        literal,
    })
}

/// Fast path: most paths need no work. One pass, since every request comes through here.
fn is_normal(path: &str) -> bool {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return false;
    }
    // Bytes since the last `/` that are all dots (a `.` or `..` segment so far).
    let mut dots = 0usize;
    let mut segment_len = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'/' => {
                if i > 0 && (segment_len == 0 || (dots == segment_len && dots <= 2)) {
                    return false;
                }
                dots = 0;
                segment_len = 0;
                continue;
            }
            b'%' | b'\\' | b';' | 0..=0x1f | 0x7f => return false,
            b'.' => dots += 1,
            _ => {}
        }
        segment_len += 1;
    }
    // A final `.` or `..` segment.
    !(segment_len > 0 && dots == segment_len && dots <= 2)
}

struct Scan {
    /// An escape, a `;` parameter or `\`: origins read such a path differently (they split it
    /// in different places, or match it before or after decoding).
    read_differently: bool,
}

/// Refuses control characters and parameters that hold a separator; notes what origins read
/// differently.
fn scan(path: &str) -> Result<Scan, Unfit> {
    let bytes = path.as_bytes();
    let mut read_differently = false;
    let mut in_parameter = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x20 || b == 0x7f {
            return Err(Unfit::ControlCharacter);
        }
        let escaped = escape_at(bytes, i);
        if let Some(e) = escaped {
            if e < 0x20 || e == 0x7f {
                return Err(Unfit::ControlCharacter);
            }
            // `%2e%2e` is `..` to an origin that decodes before it resolves dot segments, and a
            // name to one that routes on the path as sent.
            read_differently = true;
        }
        let separator = b == b'\\' || matches!(escaped, Some(b'/' | b'\\'));
        if separator {
            read_differently = true;
            if in_parameter {
                // Tomcat ends a parameter at the next plain `/`, a decoding origin at this one.
                return Err(Unfit::Ambiguous);
            }
        }
        if b == b';' || escaped == Some(b';') {
            read_differently = true;
            in_parameter = true;
        }
        if b == b'/' {
            in_parameter = false;
        }
        i += if escaped.is_some() { 3 } else { 1 };
    }
    Ok(Scan { read_differently })
}

/// The byte that a well-formed escape at `i` stands for.
fn escape_at(bytes: &[u8], i: usize) -> Option<u8> {
    match bytes.get(i..i + 3)? {
        [b'%', h, l] if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => {
            Some(hex_value(*h) * 16 + hex_value(*l))
        }
        _ => None,
    }
}

/// Resolves dot segments, drops empty ones and `;` parameters. Returns the path and whether it
/// had a dot segment.
fn resolve(decoded: &str) -> (String, bool) {
    let mut out: Vec<&str> = Vec::new();
    let mut dots = false;
    // A trailing slash is meaningful to prefixes like "/static/": a path ending in `/`, `/.`,
    // `/..` or `/;x` names a folder.
    let mut folder = false;
    for segment in decoded.split('/') {
        let segment = match memchr::memchr(PARAMETER, segment.as_bytes()) {
            Some(at) => &segment[..at],
            None => segment,
        };
        folder = true;
        match segment {
            "" => {}
            "." => dots = true,
            ".." => {
                dots = true;
                out.pop();
            }
            s => {
                folder = false;
                out.push(s);
            }
        }
    }
    let mut normal = String::with_capacity(decoded.len() + 1);
    for s in &out {
        normal.push('/');
        normal.push_str(s);
    }
    if normal.is_empty() || folder {
        normal.push('/');
    }
    (normal, dots)
}

/// Where a parameter starts in a decoded path. In the reading as sent `;` is written `%3B`,
/// which `resolve` leaves alone.
const PARAMETER: u8 = b';';

/// The two readings a bypass must hold for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spelling {
    /// Split most finely: unreserved escapes decoded; `\`, `%2F` and `%5C` become `/`; `;` and
    /// `%3B` start a parameter.
    Decoded,
    /// As sent, split least: every escape stays as it is (in upper case), `\` is written `%5C`
    /// and `;` `%3B`, so none of them separates or starts anything.
    AsSent,
}

fn decode(path: &str, spelling: Spelling) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len() + 1);
    if !path.starts_with('/') {
        out.push('/');
    }
    let split = spelling == Spelling::Decoded;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(b) = escape_at(bytes, i) {
            if split && (b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')) {
                out.push(b as char);
            } else if split && (b == b'/' || b == b'\\') {
                out.push('/');
            } else if split && b == b';' {
                out.push(';');
            } else {
                // Keep other escapes, in one case, so equal paths compare equal.
                out.push('%');
                out.push(bytes[i + 1].to_ascii_uppercase() as char);
                out.push(bytes[i + 2].to_ascii_uppercase() as char);
            }
            i += 3;
            continue;
        }
        match bytes[i] {
            b'\\' if split => out.push('/'),
            b'\\' => out.push_str("%5C"),
            b';' if !split => out.push_str("%3B"),
            // Not an escape: written as one, so that no escape can be spliced together from
            // what the decoding leaves (`%f%44` is `%25fD`, not `%fD`).
            b'%' => out.push_str("%25"),
            _ => {
                // `path` is a &str, so slicing at char boundaries keeps it valid.
                let ch_len = path[i..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&path[i..i + ch_len]);
                i += ch_len;
                continue;
            }
        }
        i += 1;
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

/// How origins read a path, for tests and the fuzzer to check [`RequestPath::is_under`]
/// against. Each returns the path that origin serves, or `None` where it refuses the request.
#[cfg(any(test, fuzzing))]
pub mod origins {
    /// One origin's reading rules.
    #[derive(Clone, Copy, Debug)]
    pub struct Reading {
        /// Percent-decode before resolving dot segments (nginx, Go, Node), else resolve the raw
        /// path as RFC 3986 does.
        pub decode: bool,
        /// `\` is a separator (IIS, Jetty on Windows, many frameworks).
        pub backslash: bool,
        /// Drop `;` parameters: `Some(true)` after decoding (so `%3B` counts, Spring), `Some(false)`
        /// from the raw segment before decoding (Tomcat, Jetty), `None` keeps them (nginx).
        pub parameters: Option<bool>,
        /// The path ends at the first NUL (C string handling).
        pub stop_at_nul: bool,
    }

    /// Every combination of the rules above.
    pub fn all() -> Vec<Reading> {
        let mut out = Vec::new();
        for decode in [false, true] {
            for backslash in [false, true] {
                for parameters in [None, Some(false), Some(true)] {
                    for stop_at_nul in [false, true] {
                        out.push(Reading {
                            decode,
                            backslash,
                            parameters,
                            stop_at_nul,
                        });
                    }
                }
            }
        }
        out
    }

    impl Reading {
        /// The path this origin serves for the raw `path`, as bytes joined by `/`.
        pub fn read(&self, path: &str) -> Vec<u8> {
            let raw = path.as_bytes();
            // Parameters dropped from raw segments first (Tomcat).
            let mut text: Vec<u8> = Vec::with_capacity(raw.len());
            let mut in_parameter = false;
            for &b in raw {
                if b == b'/' || (self.backslash && b == b'\\') {
                    in_parameter = false;
                } else if b == b';' && self.parameters == Some(false) {
                    in_parameter = true;
                }
                if !in_parameter {
                    text.push(b);
                }
            }
            if self.decode {
                text = percent_decode(&text);
            }
            if self.stop_at_nul {
                if let Some(at) = text.iter().position(|&b| b == 0) {
                    text.truncate(at);
                }
            }
            let mut segments: Vec<Vec<u8>> = Vec::new();
            let is_separator = |b: &u8| *b == b'/' || (self.backslash && *b == b'\\');
            // Ends in a folder: a last segment that is empty or dots.
            let mut folder = false;
            for segment in text.split(is_separator) {
                let mut segment = segment;
                if self.parameters == Some(true) {
                    if let Some(at) = segment.iter().position(|&b| b == b';') {
                        segment = &segment[..at];
                    }
                }
                folder = true;
                match segment {
                    b"" | b"." => {}
                    b".." => {
                        segments.pop();
                    }
                    s => {
                        folder = false;
                        segments.push(s.to_vec());
                    }
                }
            }
            let mut out = Vec::new();
            for s in &segments {
                out.push(b'/');
                out.extend_from_slice(s);
            }
            if out.is_empty() || folder {
                out.push(b'/');
            }
            out
        }
    }

    fn percent_decode(text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            if let Some(b) = super::escape_at(text, i) {
                out.push(b);
                i += 3;
            } else {
                out.push(text[i]);
                i += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(path: &str) -> String {
        normalize(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .as_str()
            .to_owned()
    }

    #[test]
    fn leaves_normal_paths_alone() {
        for p in [
            "/",
            "/a",
            "/a/b/",
            "/static/app.css",
            "/a.b/..c/...",
            "/.well-known/x",
        ] {
            let normal = normalize(p).unwrap();
            assert!(matches!(normal.normal, Cow::Borrowed(_)), "{p}");
            assert_eq!(normal.as_str(), p);
        }
        for p in [
            "/a/./b", "/a/../b", "/a/..", "/a/.", "//a", "/a//b", "/a;b", "/%41", "a",
        ] {
            assert!(!is_normal(p), "{p}");
        }
    }

    #[test]
    fn resolves_tricks() {
        assert_eq!(n("/static/../checkout"), "/checkout");
        assert_eq!(n("/static/./x"), "/static/x");
        assert_eq!(n("//static//x"), "/static/x");
        assert_eq!(n("/%73tatic/x"), "/static/x");
        assert_eq!(n("/a/%2Fb"), "/a/b");
        assert_eq!(n("/a/%2fb"), "/a/b");
        assert_eq!(n("/a/%3fb"), "/a/%3Fb");
        assert_eq!(n("/static\\app.css"), "/static/app.css");
        assert_eq!(n("/../../etc"), "/etc");
        assert_eq!(n("/static/.."), "/");
        assert_eq!(n("/static/x/.."), "/static/");
        assert_eq!(n("/a%"), "/a%25");
        assert_eq!(n("/a%zz"), "/a%25zz");
        assert_eq!(n("/é/%"), "/é/%25");
        assert_eq!(n("relative"), "/relative");
        assert_eq!(n("/%aé"), "/%25aé");
        assert_eq!(n("/%"), "/%25");
        // Decoding must not splice a new escape together.
        assert_eq!(n("/f%f%44"), "/f%25fD");
        assert_eq!(n(&n("/f%f%44")), "/f%25fD");
        assert_eq!(n(""), "/");
    }

    #[test]
    fn parameters_are_dropped() {
        assert_eq!(n("/checkout;jsessionid=1"), "/checkout");
        assert_eq!(n("/a;x/b;y=1,2/c"), "/a/b/c");
        assert_eq!(n("/a%3Bx/b"), "/a/b");
        assert_eq!(n("/;x/a"), "/a");
        assert_eq!(n("/a/;x"), "/a/");
    }

    #[test]
    fn control_characters_are_refused() {
        for p in [
            "/static/..%00/checkout",
            "/static/%00",
            "/a%0a",
            "/a%0D%0Ab",
            "/a%7f",
            "/a%1F",
            "/a\0b",
            "/a\tb",
            "/a\u{7f}",
            "/static/app.css%00.html",
        ] {
            assert_eq!(normalize(p), Err(Unfit::ControlCharacter), "{p:?}");
        }
        // An escaped `%` is not a control character.
        assert_eq!(n("/a%2500"), "/a%2500");
    }

    #[test]
    fn dot_segments_that_origins_split_differently_are_refused() {
        for p in [
            "/static/..;/checkout",
            "/static/%2e%2e;/checkout",
            "/static/..;x=1/checkout",
            "/static/.;/../checkout",
            "/static/..%3B/checkout",
            "/static/..%3b/checkout",
            "/static/;x/../../checkout",
            "/static/%2e%2e/checkout",
            "/static/%2e%2e/%2e%2e/checkout",
            "/static/%2E./checkout",
            "/checkout/%2e%2e/static/x",
            "/a%20b/../c",
            "./f%f%44",
            "/static/..%2fcheckout",
            "/static/..%2Fcheckout",
            "/static/%2e%2e%2fcheckout",
            "/static/..%5ccheckout",
            "/static/..\\checkout",
            "/static%2F..%2Fcheckout",
            "/static\\x/..",
            "/a;b/../c",
            // A separator inside a parameter: where does the parameter end?
            "/checkout;%2F..%2Fother",
            "/checkout;x%2Fother",
            "/checkout;x\\other",
            "/checkout%3Bx%5Cy",
        ] {
            assert_eq!(normalize(p), Err(Unfit::Ambiguous), "{p}");
        }
        // Plain dot segments, which every origin resolves alike, are resolved, not refused.
        assert_eq!(n("/static/../checkout"), "/checkout");
        assert_eq!(n("/a/b%2Fc"), "/a/b/c");
        assert_eq!(n("/a/%2e%2eb"), "/a/..b");
    }

    #[test]
    fn a_bypass_holds_for_every_split() {
        let under = |p: &str| normalize(p).unwrap().is_under("/static/");
        assert!(under("/static/app.css"));
        assert!(under("/static/app.css;v=2"));
        assert!(under("/static/a/b;x/c"));
        assert!(under("/static/%41pp.css"));
        assert!(under("/static/./app.css"));
        // Tomcat reads these under /static/; nginx reads a folder `static;v=2` or a file
        // `static\app.css` at the root.
        assert!(!under("/static;v=2/app.css"));
        assert!(!under("/static\\app.css"));
        assert!(!under("/static%2Fapp.css"));
        assert!(!under("/static%3Bx/app.css"));
        // Only an origin that decodes before it routes reads `/static/` here.
        assert!(!under("/%73tatic/app.css"));
        assert!(!under("/static%2fapp.css"));
        assert!(!under("/static/../checkout"));
        // Found by the fuzzer: `.%2e` pops `c` only for an origin that decodes first.
        assert_eq!(normalize("/c/.%2e//a/b/~e"), Err(Unfit::Ambiguous));
    }

    /// Path pieces that mix the tricks origins read differently.
    fn piece() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "static", "checkout", "a", "x", "/", "//", ".", "..", "%2e", "%2E%2e", ";", ";x=1",
            "%3B", "%3b", "%00", "\0", "%0a", "%1f", "%7F", "\\", "%5C", "%5c", "%2F", "%2f", "%",
            "%25", "%2500", "%73", "tatic", "%73tatic", "b/", "é", "?", "%3F", "\t",
        ])
    }

    fn tricky_path() -> impl Strategy<Value = String> {
        (prop::bool::ANY, prop::collection::vec(piece(), 0..12)).prop_map(|(rooted, pieces)| {
            let mut p = String::from(if rooted { "/static/" } else { "/" });
            for piece in pieces {
                p.push_str(piece);
            }
            p
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// If a bypass prefix matches, no origin's reading of the path leaves it.
        #[test]
        fn a_bypass_match_stays_under_the_prefix_for_every_origin(path in tricky_path()) {
            for prefix in ["/static/", "/static", "/", "/a/b/"] {
                if let Ok(normal) = normalize(&path) {
                    if normal.is_under(prefix) {
                        for origin in origins::all() {
                            let read = origin.read(&path);
                            prop_assert!(
                                read.starts_with(prefix.as_bytes()),
                                "{path:?} passes {prefix} but {origin:?} reads {:?}",
                                String::from_utf8_lossy(&read)
                            );
                        }
                    }
                }
            }
        }

        /// Normalising is idempotent, and a refusal is the same however often it is asked.
        #[test]
        fn normalising_twice_changes_nothing(path in tricky_path()) {
            if let Ok(normal) = normalize(&path) {
                let again = normalize(normal.as_str()).map(|p| p.as_str().to_owned());
                prop_assert_eq!(again, Ok(normal.as_str().to_owned()));
            }
        }

        /// Every path gets an answer (never a panic), and a path the fast path passes is one
        /// the slow path leaves alone.
        #[test]
        fn any_text_gets_an_answer(path in prop_oneof![".{0,40}".boxed(), tricky_path().boxed()]) {
            let answer = normalize(&path);
            if is_normal(&path) {
                prop_assert_eq!(answer.map(|p| p.as_str().to_owned()), Ok(path.clone()));
                prop_assert!(scan(&path).is_ok_and(|s| !s.read_differently));
                prop_assert_eq!(resolve(&decode(&path, Spelling::Decoded)).0, path);
            }
        }
    }
}
