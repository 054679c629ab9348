//! The API's answers on the proxy listeners: the endpoint the decision named
//! ([`vestibule_core::api::Endpoint`]), written as JSON with the CORS headers
//! `[server] api_cors_origins` allows.
//!
//! Every answer is JSON; an error is `{"error": "<code>", "message": "..."}` with a 4xx status.
//! Nothing here is ever forwarded to the origin.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::Method;
use pingora::prelude::*;
use pingora::proxy::Session;

use crate::app::App;
use crate::snapshot::Snapshot;

pub use vestibule_core::api::*;

mod oidc;
mod rooms;
mod stream;

pub(crate) use rooms::{refusal_body, MAX_BODY};

const JSON: &str = "application/json";

/// Answers a request for `endpoint`, sent by `identity`. `cookie` is the room's `Set-Cookie`
/// the decision noted (the OpenID Provider's sign-in, once the room let the visitor in).
pub(crate) async fn answer(
    session: &mut Session,
    endpoint: Endpoint,
    identity: &vestibule_core::identity::Identity,
    cookie: Option<String>,
    snapshot: &Snapshot,
    app: &App,
) -> Result<()> {
    let metrics = &app.metrics;
    let req = session.req_header();
    let mut extra = cors(
        req.headers.get(header::ORIGIN),
        &snapshot.config.server.api_cors_origins,
    );
    let mut cache_control = "no-store";
    let method = req.method.clone();
    // A visitor's stream writes its own answer, for as long as it runs.
    if let (Endpoint::Room(room, RoomEndpoint::Stream), false) =
        (&endpoint, method == Method::OPTIONS && !extra.is_empty())
    {
        let opened = stream::serve(session, room, identity, snapshot, app, extra).await?;
        count(metrics, snapshot, &endpoint, opened.status);
        return Ok(());
    }
    let (status, body) = if method == Method::OPTIONS && !extra.is_empty() {
        preflight(&mut extra);
        (204, Bytes::new())
    } else {
        match (&endpoint, &method) {
            (Endpoint::Room(room, what), _) => {
                let asked = rooms::Asked {
                    room,
                    what,
                    method: &method,
                    identity,
                };
                let answer = rooms::answer(session, asked, snapshot, app).await;
                cache_control = answer.cache_control;
                extra.extend(answer.headers);
                (answer.status, answer.body)
            }
            (Endpoint::Oidc(what), _) => {
                let answer = oidc::answer(session, *what, &method, snapshot, cookie).await;
                cache_control = answer.cache_control;
                extra.extend(answer.headers);
                (answer.status, answer.body)
            }
            (Endpoint::Jwks, &Method::GET | &Method::HEAD) => {
                let (status, body) = jwks(snapshot);
                if status == 200 {
                    // Gateways cache the keys; a rotation publishes the next key well ahead of
                    // its use.
                    cache_control = "public, max-age=300";
                }
                (status, body)
            }
            (Endpoint::Jwks, _) => {
                extra.push((
                    header::ALLOW,
                    HeaderValue::from_static("GET, HEAD, OPTIONS"),
                ));
                error(405, "method_not_allowed", "this endpoint answers GET")
            }
            (Endpoint::Unknown, _) => error(404, "not_found", "no API endpoint at this path"),
        }
    };
    count(metrics, snapshot, &endpoint, status);
    crate::proxy::respond_cached(session, status, JSON, cache_control, extra, body).await
}

/// Counts an answer in `vestibule_api_requests_total`.
fn count(metrics: &crate::metrics::Metrics, snapshot: &Snapshot, endpoint: &Endpoint, status: u16) {
    // A room label only for a room the config has: the label set stays bounded.
    let room = endpoint
        .room()
        .filter(|r| snapshot.rooms.iter().any(|room| room.name() == *r))
        .unwrap_or("");
    metrics
        .api_requests
        .with_label_values(&[room, endpoint.as_str(), status_class(status)])
        .inc();
}

/// The published JWT keys, or 404 when the key ring has none.
fn jwks(snapshot: &Snapshot) -> (u16, Bytes) {
    match snapshot.keys.as_ref().and_then(|k| k.jwks()) {
        Some(jwks) => (200, Bytes::from(jwks.to_owned())),
        None => error(404, "not_found", "no JWT keys are published"),
    }
}

/// A JSON error body.
pub(crate) fn error(status: u16, code: &str, message: &str) -> (u16, Bytes) {
    let body = serde_json::json!({ "error": code, "message": message });
    (status, Bytes::from(body.to_string()))
}

/// The CORS headers for a request from `origin`: none unless `allowed` names it (or is `"*"`).
/// `Vary: Origin` whenever the answer depends on it.
fn cors(origin: Option<&HeaderValue>, allowed: &[String]) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::new();
    if allowed.is_empty() {
        return out;
    }
    let any = allowed.iter().any(|o| o == "*");
    if !any {
        out.push((header::VARY, HeaderValue::from_static("Origin")));
    }
    let Some(origin) = origin else {
        return out;
    };
    let listed = origin
        .to_str()
        .is_ok_and(|o| allowed.iter().any(|a| a.eq_ignore_ascii_case(o)));
    if any {
        out.push((
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        ));
    } else if listed {
        out.push((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone()));
    }
    out
}

/// Completes a preflight's answer.
fn preflight(extra: &mut Vec<(HeaderName, HeaderValue)>) {
    extra.push((
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    ));
    extra.push((
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type"),
    ));
    extra.push((
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    ));
}

pub(crate) fn status_class(status: u16) -> &'static str {
    match status / 100 {
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(h: &[(HeaderName, HeaderValue)]) -> Vec<String> {
        h.iter()
            .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap()))
            .collect()
    }

    #[test]
    fn cors_answers_only_the_origins_it_lists() {
        let shop = HeaderValue::from_static("https://shop.example");
        let other = HeaderValue::from_static("https://evil.example");
        let list = vec!["https://shop.example".to_owned()];
        assert!(cors(Some(&shop), &[]).is_empty());
        assert_eq!(
            names(&cors(Some(&shop), &list)),
            [
                "vary: Origin",
                "access-control-allow-origin: https://shop.example"
            ]
        );
        assert_eq!(names(&cors(Some(&other), &list)), ["vary: Origin"]);
        assert_eq!(names(&cors(None, &list)), ["vary: Origin"]);
        assert_eq!(
            names(&cors(Some(&other), &["*".to_owned()])),
            ["access-control-allow-origin: *"]
        );
    }

    #[test]
    fn errors_are_json_with_a_code() {
        let (status, body) = error(404, "not_found", "no \"such\" thing");
        assert_eq!(status, 404);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "not_found");
        assert_eq!(v["message"], "no \"such\" thing");
    }
}
