//! What the origin receives: the request's headers cleaned (internal headers, room cookies,
//! `Content-Length`, `X-Forwarded-For`).

use std::net::IpAddr;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use pingora::http::RequestHeader;
use pingora::prelude::*;

use crate::cookie::{self, Stripped};

use super::INTERNAL_PREFIX;

pub(super) const X_FORWARDED_FOR: http::HeaderName =
    http::HeaderName::from_static("x-forwarded-for");

/// Removes every room cookie from the `Cookie` headers bound for the origin; other cookies,
/// and headers without a room cookie, pass byte for byte.
pub(super) fn strip_room_cookies(req: &mut RequestHeader, names: &[String]) -> Result<()> {
    let values = req.headers.get_all(header::COOKIE);
    let mut iter = values.iter();
    let (Some(first), second) = (iter.next(), iter.next()) else {
        return Ok(());
    };
    // One field (the usual HTTP/1.1 request): stripped in one pass, and left alone when it
    // holds no room cookie.
    if second.is_none() {
        return match cookie::strip(first.as_bytes(), names) {
            Stripped::Unchanged => Ok(()),
            Stripped::Empty => replace_cookie(req, Vec::new()),
            Stripped::Changed(bytes) => replace_cookie(req, bytes),
        };
    }
    // Several fields (HTTP/2 sends one per cookie) become one, as an HTTP/1.1 origin expects
    // (RFC 9113 §8.2.3), without the room cookies.
    let mut joined: Vec<u8> = Vec::new();
    for value in values.iter() {
        let part = match cookie::strip(value.as_bytes(), names) {
            Stripped::Unchanged => value.as_bytes().to_vec(),
            Stripped::Changed(bytes) => bytes,
            Stripped::Empty => continue,
        };
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(&part);
    }
    replace_cookie(req, joined)
}

/// Makes `value` the request's only `Cookie` field, or removes the field when it is empty.
pub(super) fn replace_cookie(req: &mut RequestHeader, value: Vec<u8>) -> Result<()> {
    if value.is_empty() {
        req.remove_header(&header::COOKIE);
        return Ok(());
    }
    let value = HeaderValue::from_maybe_shared(Bytes::from(value)).map_err(|_| {
        Error::explain(
            ErrorType::InternalError,
            "stripped cookie is not a header value",
        )
    })?;
    // Replaces every field the request had.
    req.insert_header(header::COOKIE, value)
}

/// Removes every request header in our namespace: the origin must never see one, and a client
/// must never be able to set one. `Vestibule_X` counts too: servers that map headers to
/// variables (CGI, many frameworks) read `_` as `-`.
pub(super) fn strip_internal_headers(req: &mut RequestHeader) {
    let internal: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| is_internal(name.as_str()))
        .cloned()
        .collect();
    for name in internal {
        req.remove_header(&name);
    }
}

/// Whether a (lowercase) header name is in our namespace, spelled with `-` or `_`.
pub(super) fn is_internal(name: &str) -> bool {
    name.len() >= INTERNAL_PREFIX.len()
        && name.as_bytes()[..INTERNAL_PREFIX.len()]
            .iter()
            .zip(INTERNAL_PREFIX.as_bytes())
            .all(|(a, b)| a == b || (*a == b'_' && *b == b'-'))
}

/// `Content-Length` as one value: several equal values (`3, 3`, or the header twice) become one;
/// values that differ are refused (Pingora refuses them first; this holds whatever reaches here).
pub(super) fn single_content_length(req: &mut RequestHeader) -> Result<()> {
    let values = req.headers.get_all(header::CONTENT_LENGTH);
    let mut iter = values.iter();
    let (Some(first), second) = (iter.next(), iter.next()) else {
        return Ok(());
    };
    if second.is_none() && !first.as_bytes().contains(&b',') {
        return Ok(());
    }
    let mut length: Option<u64> = None;
    for item in values
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
    {
        let item = item.trim_ascii();
        let parsed = std::str::from_utf8(item)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok());
        match (parsed, length) {
            (Some(n), None) => length = Some(n),
            (Some(n), Some(m)) if n == m => {}
            _ => return Error::e_explain(ErrorType::HTTPStatus(400), "ambiguous Content-Length"),
        }
    }
    if let Some(n) = length {
        req.insert_header(header::CONTENT_LENGTH, n)?;
    }
    Ok(())
}

/// Appends the TCP peer to `X-Forwarded-For`. A chain is kept only when the peer is a trusted
/// proxy: an untrusted client's own claims are replaced, so every hop the origin sees was
/// recorded by someone we trust.
pub(super) fn set_forwarded_for(
    req: &mut RequestHeader,
    peer: IpAddr,
    trusted: bool,
) -> Result<()> {
    if !trusted || !req.headers.contains_key(X_FORWARDED_FOR) {
        // The usual case: the peer is the whole chain. An IPv4 address is written on the
        // stack and copied once, into a buffer of exactly its length (a `String` of spare
        // capacity became a `Bytes` with a second allocation).
        let value = match peer {
            IpAddr::V4(v4) => HeaderValue::from_bytes(crate::identity::write_ipv4(
                v4,
                &mut [0; crate::identity::IPV4_TEXT_MAX],
            )),
            IpAddr::V6(v6) => HeaderValue::try_from(v6.to_string()),
        }
        .or_err(ErrorType::InternalError, "an address is not a header value")?;
        return req.insert_header("X-Forwarded-For", value);
    }
    let mut chain = String::new();
    for value in req.headers.get_all(X_FORWARDED_FOR) {
        if let Ok(v) = value.to_str() {
            let v = v.trim();
            if !v.is_empty() {
                if !chain.is_empty() {
                    chain.push_str(", ");
                }
                chain.push_str(v);
            }
        }
    }
    if !chain.is_empty() {
        chain.push_str(", ");
    }
    chain.push_str(&crate::identity::ip_text(peer));
    req.insert_header("X-Forwarded-For", chain)?;
    Ok(())
}
