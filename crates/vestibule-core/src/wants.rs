//! Which kind of answer a held request gets ([`Wants`]), from its `Accept` and
//! `Sec-Fetch-Mode` headers.

/// What kind of answer a held request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wants {
    /// `Accept` names `application/json`: the JSON body (apps, `fetch` from single-page sites).
    Json,
    /// A browser's subresource (favicon, image, script): a short 503 with `Retry-After`, and
    /// no new cookie.
    Subresource,
    /// A navigation (or a client that says nothing, like curl): the HTML page and its cookie.
    Page,
}

/// The media ranges an `Accept` value lists (at most 64: a longer list is not a browser's).
fn media_ranges(accept: &[u8]) -> impl Iterator<Item = &str> {
    std::str::from_utf8(accept)
        .unwrap_or("")
        .split(',')
        .take(64)
        .map(|m| m.split(';').next().unwrap_or("").trim())
}

/// Which answer a held request gets, from its `Accept` and `Sec-Fetch-Mode` headers.
pub fn wants(accept: Option<&[u8]>, sec_fetch_mode: Option<&[u8]>) -> Wants {
    if let Some(accept) = accept {
        if media_ranges(accept).any(|m| m.eq_ignore_ascii_case("application/json")) {
            return Wants::Json;
        }
    }
    if sec_fetch_mode.is_some_and(|m| !m.trim_ascii().eq_ignore_ascii_case(b"navigate")) {
        return Wants::Subresource;
    }
    if let Some(accept) = accept {
        let page = media_ranges(accept).any(|m| m.eq_ignore_ascii_case("text/html") || m == "*/*");
        if !page {
            return Wants::Subresource;
        }
    }
    Wants::Page
}

/// Whether a request asked for JSON rather than a page.
pub fn wants_json(accept: Option<&[u8]>) -> bool {
    wants(accept, None) == Wants::Json
}
