//! The OpenID Provider on the proxy listeners: discovery, authorization, token and JWKS under
//! `{api_prefix}/oidc/`. The core checks and signs ([`vestibule_core::oidc`]); the decision has
//! already made the visitor wait in the room before an authorization request gets here. This
//! writes the answers: JSON, or a `302` back to the client.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::Method;
use pingora::proxy::Session;
use serde_json::json;
use vestibule_core::api::OidcEndpoint;
use vestibule_core::config::OidcConfig;
use vestibule_core::keys::KeyRing;
use vestibule_core::oidc::{self as core, authorize, code::Grant, token};

use super::rooms::{read_body, Reply};
use crate::snapshot::Snapshot;

/// Answers a request for `what`. `cookie` is the room's `Set-Cookie` from the decision, for
/// the visitor the room just let in (it goes with the redirect back to the client).
pub(super) async fn answer(
    session: &mut Session,
    what: OidcEndpoint,
    method: &Method,
    snapshot: &Snapshot,
    cookie: Option<String>,
) -> Reply {
    let Some(oidc) = snapshot.config.oidc.as_ref() else {
        return Reply::error(404, "not_found", "no OpenID Provider is configured");
    };
    let Some(ring) = snapshot.keys.as_ref().filter(|k| !k.jwt().is_empty()) else {
        return Reply::error(500, "server_error", "no JWT key to sign with");
    };
    let read = matches!(*method, Method::GET | Method::HEAD);
    match what {
        OidcEndpoint::Discovery if read => cached(Reply::json(200, core::discovery(oidc, ring))),
        OidcEndpoint::Jwks if read => match ring.jwks() {
            Some(jwks) => Reply {
                status: 200,
                body: Bytes::from(jwks.to_owned()),
                cache_control: KEYS_CACHE,
                headers: Vec::new(),
            },
            None => Reply::error(404, "not_found", "no JWT keys are published"),
        },
        OidcEndpoint::Authorize if read => authorization(session, oidc, ring, snapshot, cookie),
        OidcEndpoint::Token if *method == Method::POST => {
            token_answer(session, oidc, ring, snapshot).await
        }
        OidcEndpoint::Token => {
            Reply::error(405, "method_not_allowed", "this endpoint answers POST")
                .allow("POST, OPTIONS")
        }
        _ => Reply::error(405, "method_not_allowed", "this endpoint answers GET")
            .allow("GET, HEAD, OPTIONS"),
    }
}

/// Keys and discovery change rarely, and a rotation publishes the next key well ahead of its
/// use: relying parties may cache them a while.
const KEYS_CACHE: &str = "public, max-age=300";

fn cached(mut reply: Reply) -> Reply {
    reply.cache_control = KEYS_CACHE;
    reply
}

/// The authorization endpoint, reached once the room let the visitor in: a code, sent back to
/// the client's redirect URI. An unknown client or redirect URI is a `400` and no redirect.
fn authorization(
    session: &Session,
    oidc: &OidcConfig,
    ring: &KeyRing,
    snapshot: &Snapshot,
    cookie: Option<String>,
) -> Reply {
    let query = session.req_header().uri.query();
    let request = match authorize::check(query, oidc) {
        Ok(request) => request,
        Err(authorize::Refusal::Unregistered(why)) => {
            return Reply::error(400, "invalid_request", why)
        }
        Err(refusal) => return redirect(refusal.location().unwrap_or_default(), None),
    };
    // The decision made the visitor wait in this room; without it there is nothing to wait in.
    if !snapshot.rooms.iter().any(|r| r.name() == oidc.room) {
        return Reply::error(500, "server_error", "the [oidc] room is gone");
    }
    let now = crate::time::now();
    let grant = Grant::new(
        request.client_id.clone(),
        request.redirect_uri.clone(),
        request.code_challenge.clone(),
        request.nonce.clone(),
        now,
    );
    let code = grant.seal(ring);
    redirect(authorize::success_location(&request, &code), cookie)
}

/// A `302` to `location`, with the room's cookie if there is one.
fn redirect(location: String, cookie: Option<String>) -> Reply {
    let mut reply = Reply {
        status: 302,
        body: Bytes::new(),
        cache_control: "no-store",
        headers: Vec::new(),
    };
    match HeaderValue::try_from(location) {
        Ok(v) => reply.headers.push((header::LOCATION, v)),
        Err(_) => return Reply::error(400, "invalid_request", "the redirect URI is not fit"),
    }
    if let Some(v) = cookie.and_then(|c| HeaderValue::try_from(c).ok()) {
        reply.headers.push((header::SET_COOKIE, v));
    }
    reply
}

/// The token endpoint: RFC 6749 §5's answers.
async fn token_answer(
    session: &mut Session,
    oidc: &OidcConfig,
    ring: &KeyRing,
    snapshot: &Snapshot,
) -> Reply {
    let body = match read_body(session).await {
        Ok(body) => body,
        Err(reply) => return reply,
    };
    let authorization = session
        .req_header()
        .headers
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let now = crate::time::now();
    let tokens = token::read(&body, authorization).and_then(|request| {
        let room = snapshot
            .rooms
            .iter()
            .find(|r| r.name() == oidc.room)
            .ok_or(token::Error::ServerError)?;
        token::redeem(oidc, room, ring, &snapshot.config.jwt, &request, now)
    });
    match tokens {
        Ok(t) => {
            let mut reply = Reply::json(
                200,
                json!({
                    "access_token": t.access_token,
                    "token_type": "Bearer",
                    "expires_in": t.expires_in,
                    "id_token": t.id_token,
                }),
            );
            reply
                .headers
                .push((header::PRAGMA, HeaderValue::from_static("no-cache")));
            reply
        }
        Err(e) => {
            let mut reply = Reply::json(
                e.status(),
                json!({ "error": e.code(), "error_description": e.description() }),
            );
            if e == (token::Error::InvalidClient { basic: true }) {
                reply.headers.push((
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"vestibule\""),
                ));
            }
            reply
        }
    }
}
