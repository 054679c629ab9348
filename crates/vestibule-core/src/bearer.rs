//! A `jwt` room's JWTs on the request path: the one a request brings, checked as admission,
//! and the one an admitted visitor gets.
//!
//! A visitor a room lets in (through its page, or as an app through the API) also gets a JWT
//! signed by the key ring's first `[[jwt_key]]`: in the cookie `<cookie_name>_jwt`, and to the
//! origin in `Vestibule-Admission`. A request that brings a valid one for the room
//! (`Authorization: Bearer`, or that cookie) is admitted without the room's own cookie: that is
//! how a native app, or an API behind its own gateway, gets in. A JWT that fails its checks is
//! counted by reason and the request goes on to the room's own decision, as one without it.

use http::header;

use crate::config::JwtConfig;
use crate::cookie;
use crate::jwt::{Claims, Expect, Refusal};
use crate::keys::KeyRing;
use crate::room::Room;
use crate::time::Timestamp;

/// What happened to JWTs on one request (`jwt` rooms only).
#[derive(Clone, Debug, Default)]
pub struct JwtNote {
    /// The JWT the origin gets in `Vestibule-Admission`: the one the request brought, or one
    /// signed for it.
    pub admission: Option<String>,
    /// `Set-Cookie` carrying a JWT signed for this request.
    pub set_cookie: Option<String>,
    /// Why a JWT the request brought was refused.
    pub refused: Option<Refusal>,
}

/// Whether the request brings a valid JWT for `room`, which then admits it. Called before the
/// room decides; notes the JWT (for the origin) or why it was refused.
pub fn admits(
    headers: &http::HeaderMap,
    room: &Room,
    ring: &KeyRing,
    issuer: &JwtConfig,
    now: Timestamp,
    note: &mut Option<Box<JwtNote>>,
) -> bool {
    let (Some(jwt), Some(name)) = (&room.config.jwt, room.jwt_cookie()) else {
        return false;
    };
    let Some(token) = presented(headers, name) else {
        return false;
    };
    let expect = Expect {
        issuer: &issuer.issuer,
        audience: &jwt.audience,
        room: room.name(),
        issued_after: 0,
    };
    match ring.jwt().verify(token, &expect, now) {
        Ok(_) => {
            note.get_or_insert_default().admission = Some(token.to_owned());
            true
        }
        Err(reason) => {
            note.get_or_insert_default().refused = Some(reason);
            false
        }
    }
}

/// The JWT a request brings: `Authorization: Bearer <jwt>`, else the room's JWT cookie.
fn presented<'r>(headers: &'r http::HeaderMap, cookie_name: &str) -> Option<&'r str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    bearer.or_else(|| {
        cookie::values(
            headers.get_all(header::COOKIE).iter().map(|v| v.as_bytes()),
            cookie_name,
        )
        .into_iter()
        .find_map(|v| std::str::from_utf8(v).ok())
    })
}

/// Signs a JWT for a visitor `room` just let in, unless the request already brought one: the
/// cookie for the response and the header for the origin go in `note`. `secure` as for the
/// room's own cookie.
pub fn issue(
    room: &Room,
    ring: &KeyRing,
    issuer: &JwtConfig,
    now: Timestamp,
    secure: bool,
    note: &mut Option<Box<JwtNote>>,
) {
    let (Some(jwt), Some(name)) = (&room.config.jwt, room.jwt_cookie()) else {
        return;
    };
    if note.as_ref().is_some_and(|n| n.admission.is_some()) || ring.jwt().is_empty() {
        return;
    }
    let iat = now.secs();
    let validity = jwt.validity.as_secs();
    let event = room
        .event_now(now)
        .filter(|p| p.state == crate::room::event::EventState::Running)
        .map(|p| p.event.name.clone());
    let claims = Claims {
        iss: issuer.issuer.clone(),
        aud: jwt.audience.clone(),
        sub: random_id(),
        iat,
        nbf: iat,
        exp: iat + validity,
        jti: random_id(),
        room: room.name().to_owned(),
        queue_number: None,
        event,
    };
    let token = ring.jwt().sign(&claims);
    let note = note.get_or_insert_default();
    note.set_cookie = Some(cookie::set_named(
        &room.config.cookie,
        name,
        &token,
        validity,
        secure,
    ));
    note.admission = Some(token);
}

/// 128 random bits, hex: a JWT's `sub` and `jti`.
fn random_id() -> String {
    use rand::RngCore;
    let mut id = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut id);
    hex::encode(id)
}
