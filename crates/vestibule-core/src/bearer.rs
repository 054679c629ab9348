//! A `jwt` room's JWTs on the request path: the one a request brings, checked as admission,
//! and the one an admitted visitor gets.
//!
//! A visitor a room lets in also gets a JWT signed by the key ring's first `[[jwt_key]]`: in the
//! cookie `<cookie_name>_jwt`, and to the origin in `Vestibule-Admission`. It lasts
//! `jwt_validity`, and never longer than the room counts the admission (a capacity room's
//! session, a lottery's allow period).
//!
//! A request that brings a valid JWT for the room (`Authorization: Bearer`, or that cookie) and
//! not the room's own cookie is admitted by it: that is how a native app, or an API behind its
//! own gateway, gets in. A request that brings the room's cookie is decided by the room as
//! always (its session counted and checked in, a revoke honoured), and a valid JWT it also
//! brings is only passed on to the origin. A JWT that fails its checks is counted by reason and
//! the request goes on to the room's own decision, as one without it.

use http::header;

use crate::config::{Admission, JwtConfig};
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

/// Checks the JWTs a request brings for `room` (`Authorization: Bearer`, then each value of the
/// room's JWT cookie): notes the first valid one (for the origin), or why the first one was
/// refused. Returns whether one is valid. Nothing is checked in rooms without `jwt`.
pub fn check(
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
    let expect = Expect {
        issuer: &issuer.issuer,
        audience: &jwt.audience,
        room: room.name(),
        // A reset voids what was issued before it (to the second, rounded up).
        issued_after: room
            .numbered(now)
            .map_or(0, |q| q.reset_at_ms().div_ceil(1000)),
    };
    let mut refused = None;
    for token in presented(headers, name) {
        match ring.jwt().verify(token, &expect, now) {
            Ok(_) => {
                note.get_or_insert_default().admission = Some(token.to_owned());
                return true;
            }
            Err(reason) => {
                refused.get_or_insert(reason);
            }
        }
    }
    if let Some(reason) = refused {
        note.get_or_insert_default().refused = Some(reason);
    }
    false
}

/// Whether a valid JWT admits on its own: only a request without the room's own cookie (an
/// app). A browser holds the room cookie too, and the room decides it as usual, so its session
/// is counted and checked in, and an origin's revoke ends it.
pub fn admits_alone(headers: &http::HeaderMap, room: &Room) -> bool {
    let cookies = headers.get_all(header::COOKIE);
    cookie::values(
        cookies.iter().map(|v| v.as_bytes()),
        &room.config.cookie.name,
    )
    .is_empty()
}

/// The JWTs a request brings: `Authorization: Bearer <jwt>`, then the room's JWT cookie (each
/// value, at most [`cookie::MAX_CANDIDATES`]).
fn presented<'r>(
    headers: &'r http::HeaderMap,
    cookie_name: &str,
) -> impl Iterator<Item = &'r str> + 'r {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    let cookies = cookie::values(
        headers.get_all(header::COOKIE).iter().map(|v| v.as_bytes()),
        cookie_name,
    );
    bearer.into_iter().chain(
        cookies
            .into_iter()
            .take(cookie::MAX_CANDIDATES)
            .filter_map(|v| std::str::from_utf8(v).ok()),
    )
}

/// After the room decided: a visitor it let in gets a JWT unless they brought a valid one; a
/// visitor it did not let in (forwarded by a room in shadow mode) keeps no JWT for the origin.
/// `admitted`: whether it let them in, and their queue number as shown (rooms with the queue
/// API), for the `queue_number` claim.
pub fn settle(
    admitted: (bool, Option<u64>),
    room: &Room,
    ring: &KeyRing,
    issuer: &JwtConfig,
    now: Timestamp,
    secure: bool,
    note: &mut Option<Box<JwtNote>>,
) {
    if let (true, queue_number) = admitted {
        issue(room, ring, issuer, (now, queue_number), secure, note);
    } else if let Some(n) = note.as_mut() {
        n.admission = None;
    }
}

/// Signs a JWT for a visitor `room` just let in, unless the request already brought one: the
/// cookie for the response and the header for the origin go in `note`. `secure` as for the
/// room's own cookie. It is valid for `jwt_validity`, but never longer than the room counts the
/// admission it stands for (a capacity room's `session_duration`, a lottery's `allow_period`),
/// so a JWT used alone never outlives a counted session.
fn issue(
    room: &Room,
    ring: &KeyRing,
    issuer: &JwtConfig,
    (now, queue_number): (Timestamp, Option<u64>),
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
    let counted = match &room.config.admission {
        Admission::Lottery { allow_period, .. } => *allow_period,
        Admission::Capacity(c) => c.session_duration,
    };
    let validity = jwt.validity.min(counted).as_secs().max(1);
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
        queue_number,
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
