//! The answers vestibule writes itself: room pages (or their JSON), the 429 of a rate limit,
//! error pages, and the rate-limit headers of forwarded responses.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::Session;

use crate::decide::{set_cookie_value, Limited};
use crate::invite;
use crate::pages::{self, PageContext, PageKind, RoomPages, WaitingJson};
use crate::room::{Decision, Outcome, Room};
use crate::snapshot::Snapshot;
use crate::time::Timestamp;

use super::NO_STORE;

/// How a room page answers one request.
pub(super) struct PageAnswer<'a> {
    /// Over TLS (or so a trusted proxy said): the cookie is `Secure`.
    pub(super) secure: bool,
    /// The JSON body rather than the page.
    pub(super) json: bool,
    /// Deletes a used solution cookie.
    pub(super) clear_solution: Option<String>,
    /// `[server] api_prefix`: where a verifiable draw is published.
    pub(super) api_prefix: &'a str,
}

/// A waiting or deny page (or its JSON), served from memory: the origin is never contacted.
pub(super) async fn write_room_page(
    session: &mut Session,
    (room, pages): (&Room, &RoomPages),
    outcome: &Outcome,
    answer: PageAnswer<'_>,
    now: Timestamp,
) -> Result<()> {
    let PageAnswer {
        secure,
        json,
        clear_solution,
        api_prefix,
    } = answer;
    // Room for every header a page can carry: two cookies, Retry-After, Content-Language, Vary.
    let mut extra = Vec::with_capacity(5);
    let cookies = set_cookie_value(room, &outcome.cookie, secure)
        .into_iter()
        .chain(clear_solution);
    for value in cookies {
        if let Ok(v) = HeaderValue::try_from(value) {
            extra.push((header::SET_COOKIE, v));
        }
    }
    // `Retry-After` only: a `Refresh` header would reload the page on top of its own script
    // (two requests per check-in). Pages reload by script, or by a `<noscript>` meta refresh.
    if matches!(
        outcome.decision,
        Decision::Anon
            | Decision::Wait
            | Decision::Lost
            | Decision::Deny
            | Decision::SoldOut
            | Decision::QueueFull
            | Decision::PreQueue
    ) {
        extra.push((header::RETRY_AFTER, HeaderValue::from(outcome.refresh_secs)));
    }
    let language = if json {
        0
    } else {
        pages.language_for(room, accept_language(session), now)
    };
    let mut page = pages::room_context(room, pages, outcome, language, now);
    crate::draws::on_page(&mut page, room, outcome, api_prefix, now);
    if crate::push::streams(outcome) {
        page.stream_url = pages.stream_url();
    }
    let (content_type, body) = if json {
        let mut answer = WaitingJson::from(&page);
        answer.challenge = outcome.challenge.as_ref().map(|c| pages::ChallengeJson {
            algorithm: "sha256",
            difficulty: c.difficulty,
            value: &c.value,
            expires_in: c.expires_in,
        });
        answer.invitation_refused = outcome
            .invitation
            .and_then(Result::err)
            .map(invite::Refusal::as_str);
        answer.receipt = outcome.receipt.map(|r| r.text());
        ("application/json", pages::json(&answer))
    } else {
        language_headers(&mut extra, &page);
        let body = pages.at(room, now).render(outcome.decision.page(), &page);
        let body = match &outcome.challenge {
            Some(c) => pages::splice_challenge(&body, &c.value),
            None => body,
        };
        let body = match outcome.receipt {
            Some(r) if !page.receipt.is_empty() => crate::draws::splice_receipt(&body, &r.text()),
            _ => body,
        };
        ("text/html; charset=utf-8", body)
    };
    respond(session, page.status, content_type, extra, body).await
}

/// `RateLimit-Policy` and `RateLimit` values for the token buckets that passed a request.
pub(super) fn quota_headers(
    snapshot: &Snapshot,
    quotas: &[(usize, u64, u64)],
) -> (HeaderValue, HeaderValue) {
    if let [(rule, remaining, reset)] = quotas {
        // One bucket (the usual case): its policy value was made at load, and its item is
        // written to a buffer of exactly its size.
        if let Some(rule) = snapshot.rules.get(*rule) {
            let item = Bytes::from(rule.ratelimit_item(*remaining, *reset));
            let item = HeaderValue::from_maybe_shared(item)
                .unwrap_or_else(|_| HeaderValue::from_static(""));
            return (rule.policy_value(), item);
        }
    }
    let mut items = String::with_capacity(32 * quotas.len());
    let mut policy = String::with_capacity(32 * quotas.len());
    for (i, (rule, remaining, reset)) in quotas.iter().enumerate() {
        let Some(rule) = snapshot.rules.get(*rule) else {
            continue;
        };
        if i > 0 {
            policy.push_str(", ");
            items.push_str(", ");
        }
        policy.push_str(rule.policy());
        rule.write_ratelimit_item(&mut items, *remaining, *reset);
    }
    (list_value(policy), list_value(items))
}

/// A header value made of a list built in `s`, without a second allocation: `Bytes` takes a
/// buffer whose length is its capacity as it is, and allocates a shared header for any other
/// (shrinking in place is a few instructions with mimalloc).
pub(super) fn list_value(mut s: String) -> HeaderValue {
    s.shrink_to_fit();
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The 429 answer: `Retry-After`, IETF `RateLimit-Policy` / `RateLimit`, and the
/// `ratelimited` page of the request's room (or the server's) or JSON.
pub(super) async fn write_rate_limited(
    session: &mut Session,
    snapshot: &Snapshot,
    room: Option<usize>,
    limited: &Limited,
    set_cookie: Option<String>,
) -> Result<()> {
    let mut extra = Vec::with_capacity(4);
    extra.push((header::RETRY_AFTER, HeaderValue::from(limited.retry_after)));
    let policy = HeaderValue::try_from(limited.policy.as_str());
    let item = HeaderValue::try_from(format!(
        "\"{}\";r=0;t={}",
        limited.rule, limited.retry_after
    ));
    if let (Ok(policy), Ok(item)) = (policy, item) {
        extra.push((RATELIMIT_POLICY, policy));
        extra.push((RATELIMIT, item));
    }
    if let Some(v) = set_cookie.and_then(|v| HeaderValue::try_from(v).ok()) {
        extra.push((header::SET_COOKIE, v));
    }
    let (content_type, body) = if wants_json(session) {
        let body = pages::json(&serde_json::json!({
            "error": "rate_limited",
            "rule": limited.rule,
            "retry_after": limited.retry_after,
        }));
        ("application/json", body)
    } else {
        let room = room.and_then(|i| snapshot.rooms.get(i).zip(snapshot.pages_of(i)));
        let pages = room.map_or(&snapshot.pages, |(_, p)| p.own());
        let mut ctx = PageContext::plain(
            room.map_or("this site", |(r, _)| r.name()),
            "ratelimited",
            limited.retry_after,
            429,
        );
        ctx.title = room.map_or("this site", |(r, _)| r.config.title.as_str());
        ctx.queueing = room.map_or("", |(r, _)| r.config.admission.method());
        ctx.rule = &limited.rule;
        let default = room.map_or(0, |(r, p)| p.language_for(r, None, crate::time::now()));
        let language = pages
            .catalogs()
            .negotiate(accept_language(session), default);
        let ctx = ctx.in_language(pages.catalogs(), language, default);
        language_headers(&mut extra, &ctx);
        (
            "text/html; charset=utf-8",
            pages.render(PageKind::RateLimited, &ctx),
        )
    };
    respond(session, 429, content_type, extra, body).await
}

/// The request's `Accept-Language`, if it sent one.
pub(super) fn accept_language(session: &Session) -> Option<&[u8]> {
    session
        .req_header()
        .headers
        .get(header::ACCEPT_LANGUAGE)
        .map(|v| v.as_bytes())
}

/// `Content-Language` of a page, and `Vary: Accept-Language` (a cache must not give one
/// visitor's language to another).
pub(super) fn language_headers(
    extra: &mut Vec<(http::HeaderName, HeaderValue)>,
    page: &PageContext,
) {
    if let Ok(v) = HeaderValue::try_from(page.lang) {
        extra.push((header::CONTENT_LANGUAGE, v));
    }
    extra.push((header::VARY, HeaderValue::from_static("Accept-Language")));
}

/// Whether the client asked for JSON rather than a page.
pub(super) fn wants_json(session: &Session) -> bool {
    let accept = session.req_header().headers.get(header::ACCEPT);
    pages::wants_json(accept.map(|v| v.as_bytes()))
}

/// Writes a complete synthetic response with `Content-Length`, keeping the connection alive.
/// Header names are given as written on the wire (`Retry-After`): appended to a fresh header,
/// they need no case conversion and no lookup.
pub(crate) async fn respond(
    session: &mut Session,
    status: u16,
    content_type: &'static str,
    extra: Vec<(http::HeaderName, HeaderValue)>,
    body: Bytes,
) -> Result<()> {
    respond_cached(session, status, content_type, NO_STORE, extra, body).await
}

/// [`respond`], with `cache_control` for `Cache-Control` instead of `no-store` (the JWKS, which
/// gateways cache).
pub(crate) async fn respond_cached(
    session: &mut Session,
    status: u16,
    content_type: &'static str,
    cache_control: &'static str,
    extra: Vec<(http::HeaderName, HeaderValue)>,
    body: Bytes,
) -> Result<()> {
    // Built without Pingora's case map, straight into the header map: no name is parsed or
    // kept twice. HTTP/1 writes the common names titled and the others in lowercase (header
    // names are case-insensitive; HTTP/2 sends them all in lowercase).
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status =
        http::StatusCode::from_u16(status).or_err(ErrorType::InternalError, "an invalid status")?;
    let headers = &mut parts.headers;
    headers.reserve(3 + extra.len());
    headers.append(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.append(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    headers.append(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    for (name, value) in extra {
        headers.append(name, value);
    }
    let resp = ResponseHeader::from(parts);
    let head_only = session.req_header().method == http::Method::HEAD;
    session
        .write_response_header(Box::new(resp), head_only)
        .await?;
    if !head_only {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(())
}

pub(super) async fn write_error_page(
    session: &mut Session,
    snapshot: &Snapshot,
    code: u16,
    set_cookie: Option<String>,
) -> Result<()> {
    let retry_after = 5u64;
    let mut extra = vec![(header::RETRY_AFTER, HeaderValue::from(retry_after))];
    if let Some(v) = set_cookie.and_then(|v| HeaderValue::try_from(v).ok()) {
        extra.push((header::SET_COOKIE, v));
    }
    if wants_json(session) {
        let body = pages::json(&serde_json::json!({
            "error": if code == 502 { "origin_unavailable" } else { "proxy_error" },
            "status": code,
            "retry_after": retry_after,
        }));
        return respond(session, code, "application/json", extra, body).await;
    }
    let catalogs = snapshot.pages.catalogs();
    let language = catalogs.negotiate(accept_language(session), 0);
    let ctx = PageContext::plain("this site", "error", retry_after, code)
        .in_language(catalogs, language, 0);
    language_headers(&mut extra, &ctx);
    let body = snapshot.pages.render(PageKind::Error, &ctx);
    respond(session, code, "text/html; charset=utf-8", extra, body).await
}

const RATELIMIT_POLICY: http::HeaderName = http::HeaderName::from_static("ratelimit-policy");
const RATELIMIT: http::HeaderName = http::HeaderName::from_static("ratelimit");
