//! The queue API's requests: an app gets in line ([`enqueue`]), checks where it stands
//! ([`check_in`]), and gets its JWT once the serving counter has passed its number ([`token`]);
//! the private API's moves (tokens for a request, sessions ended, a reset).
//!
//! An API request is a visitor of the room like any other: it arrives, waits, checks in and is
//! let in by the same admission, counted in the same counters, under the same pause, events and
//! operator actions. Where a browser carries its place in the room's cookie, an app carries a
//! **request id**, `qn.arr.nonce.mac.kid`: its queue number, its arrival (Unix seconds), a random
//! nonce that names its identity in the room, and a MAC under the room's key ring, so nobody can
//! make one up or change its number. The room's latest token for each request is kept in this
//! node's [`Ledger`] (a check-in at another node starts again from the id); what must hold in a
//! whole cluster is in the store's marks, by queue number:
//!
//! - [`MarkKind::Reached`]: the room let the request in at `until − hold − KEEP`; its place is
//!   held until it is redeemed, or with `queue_position_expiry` until then.
//! - [`MarkKind::Redeemed`]: its JWT was issued; until the JWT's expiry and [`KEEP`] more, so
//!   expired tokens can be listed.
//! - [`MarkKind::Ended`]: its session was marked completed or abandoned.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::JwtConfig;
use crate::identity::Identity;
use crate::jwt::Claims as JwtClaims;
use crate::keys::KeyRing;
use crate::room::capacity::Capacity;
use crate::room::{CookieAction, Decision, Outcome, Place, Room};
use crate::store::{Mark, MarkKind};
use crate::time::Timestamp;
use crate::token::{Claims, Dec, Token};

/// How long marks outlive what they stand for, so the private API can list them.
pub const KEEP: Duration = Duration::from_secs(86_400);
/// Requests a node remembers per room at most; beyond it the oldest go (they check in again
/// from their id).
pub const MAX_REQUESTS: usize = 200_000;
/// The domain of a request id's MAC.
const DOMAIN: &[u8] = b"vestibule request id";

/// Why an API request got no answer it wanted.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiError {
    /// The room has no queue API.
    UnknownRoom,
    /// Not a request id of this room (made up, changed, another room's, or from before a reset).
    UnknownRequest,
    /// Its number's place expired unredeemed (`queue_position_expiry`), or it left the line.
    Expired,
    /// Its session was marked completed or abandoned.
    Ended,
    /// Not yet: the serving counter has not reached its number.
    NotYet(Status),
    /// The line is full (`max_waiting_users`).
    QueueFull,
    /// A cluster node that has used up its queue numbers until its next sync.
    NumbersPending,
    /// The room cannot sign JWTs (no `[[jwt_key]]`).
    NoKeys,
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    pub request_id: String,
    /// As shown: counted from the room's last reset.
    pub queue_number: u64,
    pub serving_number: u64,
    /// Visitors queued and not yet let in.
    pub waiting: u64,
    /// The median wait estimate, seconds; `None` when there is none (paused, let in).
    pub estimate_seconds: Option<u64>,
    /// When the room let it in, if it did (Unix seconds).
    pub reached_at: Option<u64>,
    /// When its number's place expires unredeemed (Unix seconds), if it does.
    pub expires_at: Option<u64>,
    /// When to check in again, seconds.
    pub retry_after: u64,
}

/// A JWT issued for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub access_token: String,
    pub expires_in: u64,
}

/// A request id, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId {
    pub qn: u64,
    pub arr: u64,
    nonce: String,
}

impl RequestId {
    /// The identity the request waits as in the room.
    fn uid(&self) -> Identity {
        Identity::from_encoded(&format!("api.{}", self.nonce))
    }

    fn mac(&self, room: &str, key: &crate::sign::SigningKey) -> String {
        let qn = self.qn.to_string();
        let arr = self.arr.to_string();
        let parts: [&[u8]; 4] = [
            room.as_bytes(),
            qn.as_bytes(),
            arr.as_bytes(),
            self.nonce.as_bytes(),
        ];
        hex::encode(key.short_mac(DOMAIN, &parts))
    }

    /// The id as the app holds it, signed with the ring's active key.
    pub fn write(&self, room: &str, ring: &KeyRing) -> String {
        let key = ring.active();
        format!(
            "{}.{}.{}.{}.{}",
            self.qn,
            self.arr,
            self.nonce,
            self.mac(room, key),
            key.id()
        )
    }

    /// Reads an id of `room`: its MAC must be the one a key of the ring makes.
    pub fn read(text: &str, room: &str, ring: &KeyRing) -> Option<RequestId> {
        if text.len() > 200 {
            return None;
        }
        let mut parts = text.splitn(5, '.');
        let (qn, arr, nonce, mac, kid) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
        );
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !digits(qn) || !digits(arr) || !hex(nonce, 16) || !hex(mac, 32) {
            return None;
        }
        let id = RequestId {
            qn: qn.parse().ok()?,
            arr: arr.parse().ok()?,
            nonce: nonce.to_ascii_lowercase(),
        };
        let key = ring.get(kid)?;
        let expected = id.mac(room, key);
        use subtle::ConstantTimeEq;
        bool::from(
            expected
                .as_bytes()
                .ct_eq(mac.to_ascii_lowercase().as_bytes()),
        )
        .then_some(id)
    }
}

/// What this node remembers of a room's API requests.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    /// By queue number.
    requests: HashMap<u64, Entry>,
    /// Identity (or account) → queue number: asking again gets the same place.
    by_identity: HashMap<String, u64>,
    /// Places let in here and not redeemed yet: (queue number, when the place expires (ms),
    /// the place), to free once expired.
    held: Vec<(u64, u64, Place)>,
}

#[derive(Clone, Debug)]
struct Entry {
    id: String,
    /// The room's latest token for the request.
    token: Arc<str>,
    identity: String,
    /// The JWT issued, and its expiry (so asking again gets the same one).
    jwt: Option<(String, u64)>,
}

impl Ledger {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests this node remembers.
    pub fn len(&self) -> usize {
        self.book().requests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every room's ledger, by name: the same one for every snapshot.
#[derive(Debug, Default)]
pub struct Ledgers {
    cells: Mutex<HashMap<String, Arc<Ledger>>>,
}

impl Ledgers {
    pub fn cell(&self, name: &str) -> Arc<Ledger> {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.entry(name.to_owned()).or_default().clone()
    }
}

/// The capacity room behind `room`'s API.
fn queue_of(room: &Room, now: Timestamp) -> Result<&Capacity, ApiError> {
    room.numbered(now).ok_or(ApiError::UnknownRoom)
}

fn mark(kind: MarkKind, qn: u64) -> Mark {
    Mark { kind, id: qn }
}

/// How long a place the room let in is held unredeemed: `queue_position_expiry`, else a
/// session.
fn hold(room: &Room, queue: &Capacity) -> Duration {
    match room.config.api.as_ref().map(|a| a.position_expiry) {
        Some(d) if !d.is_zero() => d,
        _ => Duration::from_secs(queue.session_minutes() * 60),
    }
}

/// A new request in line for `identity` (an address or an account); the same place if it
/// already has one here.
pub fn enqueue(
    room: &Room,
    ring: &KeyRing,
    ledger: &Ledger,
    identity: &Identity,
    now: Timestamp,
) -> Result<Status, ApiError> {
    let queue = queue_of(room, now)?;
    let known = {
        let book = ledger.book();
        book.by_identity
            .get(identity.as_str())
            .and_then(|qn| book.requests.get(qn))
            .map(|e| e.id.clone())
    };
    if let Some(id) = known {
        match check_in(room, ring, ledger, &id, now) {
            Err(ApiError::NotYet(s)) => return Ok(s),
            Ok(s) => return Ok(s),
            // Gone from the line: a new place.
            Err(_) => {}
        }
    }
    let nonce = {
        use rand::RngCore;
        let mut b = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut b);
        hex::encode(b)
    };
    let uid = Identity::from_encoded(&format!("api.{nonce}"));
    let outcome = room.decide(ring, &uid, &[], now);
    let qn = match (outcome.decision, outcome.queue_number) {
        (Decision::QueueFull, _) => return Err(ApiError::QueueFull),
        (_, Some(qn)) => qn,
        (_, None) => return Err(ApiError::NumbersPending),
    };
    let rid = RequestId {
        qn,
        arr: now.secs(),
        nonce,
    };
    let id = rid.write(room.name(), ring);
    {
        let mut book = ledger.book();
        if book.requests.len() >= MAX_REQUESTS {
            forget_oldest(&mut book);
        }
        book.by_identity.insert(identity.as_str().to_owned(), qn);
        let token = match &outcome.cookie {
            CookieAction::Set(t) => t.clone(),
            _ => Arc::from(""),
        };
        book.requests.insert(
            qn,
            Entry {
                id: id.clone(),
                token,
                identity: identity.as_str().to_owned(),
                jwt: None,
            },
        );
    }
    if outcome.admitted {
        reached(room, queue, ledger, qn, &outcome, now);
    }
    Ok(status(room, queue, &rid, id, &outcome, now))
}

/// Forgets the tenth of the requests with the lowest numbers (the oldest).
fn forget_oldest(book: &mut Book) {
    let mut numbers: Vec<u64> = book.requests.keys().copied().collect();
    numbers.sort_unstable();
    for qn in numbers.iter().take(MAX_REQUESTS / 10) {
        if let Some(e) = book.requests.remove(qn) {
            book.by_identity.remove(&e.identity);
        }
    }
}

/// The room let request `qn` in: its place is held until redeemed or expired.
fn reached(
    room: &Room,
    queue: &Capacity,
    ledger: &Ledger,
    qn: u64,
    outcome: &Outcome,
    now: Timestamp,
) {
    let hold = hold(room, queue);
    let until = Timestamp::from_millis(now.millis() + (hold + KEEP).as_millis() as u64);
    queue
        .store()
        .mark(room.name(), mark(MarkKind::Reached, qn), until, now);
    if let Some(place) = outcome.place {
        let expires = now.millis() + hold.as_millis() as u64;
        ledger.book().held.push((qn, expires, place));
    }
}

/// Where request `id` stands, as a check-in: the room may let it in now.
pub fn check_in(
    room: &Room,
    ring: &KeyRing,
    ledger: &Ledger,
    id: &str,
    now: Timestamp,
) -> Result<Status, ApiError> {
    let queue = queue_of(room, now)?;
    sweep(room, ledger, now);
    let rid = RequestId::read(id, room.name(), ring).ok_or(ApiError::UnknownRequest)?;
    if queue.before_reset_number(rid.qn) || rid.arr * 1000 < queue.reset_at_ms() {
        return Err(ApiError::UnknownRequest);
    }
    let store = queue.store();
    if store.is_marked(room.name(), mark(MarkKind::Ended, rid.qn), now) {
        return Err(ApiError::Ended);
    }
    if let Some(until) = store.marked_until(room.name(), mark(MarkKind::Reached, rid.qn), now) {
        let hold = hold(room, queue);
        let at = until
            .millis()
            .saturating_sub((hold + KEEP).as_millis() as u64);
        let redeemed = store.is_marked(room.name(), mark(MarkKind::Redeemed, rid.qn), now);
        let deadline = at + hold.as_millis() as u64;
        if !redeemed
            && room
                .config
                .api
                .as_ref()
                .is_some_and(|a| !a.position_expiry.is_zero())
            && now.millis() >= deadline
        {
            return Err(ApiError::Expired);
        }
        let mut s = waiting_status(queue, &rid, id.to_owned(), now);
        s.reached_at = Some(at / 1000);
        s.expires_at = expiring(room, at, redeemed);
        return Ok(s);
    }
    let token = ledger
        .book()
        .requests
        .get(&rid.qn)
        .map(|e| e.token.clone())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| again(queue, ring, &rid, now));
    // Gone longer than `rejoin_grace`: the place is lost, as a browser's would be.
    if Token::parse(token.as_bytes()).is_ok_and(|t| !queue.still_in_line(&t.claims, now)) {
        return Err(ApiError::Expired);
    }
    let outcome = room.decide(ring, &rid.uid(), &[token.as_bytes()], now);
    if let CookieAction::Set(t) = &outcome.cookie {
        if let Some(e) = ledger.book().requests.get_mut(&rid.qn) {
            e.token = t.clone();
        }
    }
    if outcome.admitted {
        reached(room, queue, ledger, rid.qn, &outcome, now);
    }
    let s = status(room, queue, &rid, id.to_owned(), &outcome, now);
    if outcome.decision == Decision::Allow {
        Ok(s)
    } else {
        Err(ApiError::NotYet(s))
    }
}

/// A wait token for a request this node does not remember (checked in elsewhere, or before a
/// restart): due now, counted from a tick ago.
fn again(queue: &Capacity, ring: &KeyRing, rid: &RequestId, now: Timestamp) -> Arc<str> {
    let key = ring.active();
    let mut claims = Claims::new(Dec::Wait, now.secs(), &rid.uid(), key.id());
    claims.arr = Some(rid.arr);
    claims.chk = Some(now.secs().saturating_sub(crate::room::capacity::TICK_SECS));
    claims.refresh = Some(queue.refresh_secs() as u32);
    claims.qn = Some(rid.qn);
    if let Some(room) = queue.bound() {
        claims.room = Some(room.clone());
    }
    claims.sign(key).into()
}

fn expiring(room: &Room, at_ms: u64, redeemed: bool) -> Option<u64> {
    let expiry = room.config.api.as_ref()?.position_expiry;
    (!expiry.is_zero() && !redeemed).then(|| (at_ms + expiry.as_millis() as u64) / 1000)
}

fn waiting_status(queue: &Capacity, rid: &RequestId, id: String, now: Timestamp) -> Status {
    Status {
        request_id: id,
        queue_number: queue.shown(rid.qn),
        serving_number: queue.serving_number(),
        waiting: queue.figures(now).waiting,
        estimate_seconds: None,
        reached_at: None,
        expires_at: None,
        retry_after: queue.refresh_secs(),
    }
}

fn status(
    room: &Room,
    queue: &Capacity,
    rid: &RequestId,
    id: String,
    outcome: &Outcome,
    now: Timestamp,
) -> Status {
    let mut s = waiting_status(queue, rid, id, now);
    if outcome.decision == Decision::Allow {
        s.reached_at = Some(now.secs());
        s.expires_at = expiring(room, now.millis(), false);
        s.retry_after = 0;
    } else {
        s.estimate_seconds = outcome
            .estimates
            .p50
            .map(|m| (m * 60.0).round().max(0.0) as u64);
        s.retry_after = outcome.refresh_secs.max(1);
    }
    s
}

/// The JWT of request `id`, once the room has let it in (the same one if it was issued here
/// before).
pub fn token(
    room: &Room,
    ring: &KeyRing,
    ledger: &Ledger,
    issuer: &JwtConfig,
    id: &str,
    now: Timestamp,
) -> Result<Issued, ApiError> {
    let status = check_in(room, ring, ledger, id, now)?;
    let queue = queue_of(room, now)?;
    let rid = RequestId::read(id, room.name(), ring).ok_or(ApiError::UnknownRequest)?;
    if let Some((jwt, exp)) = ledger
        .book()
        .requests
        .get(&rid.qn)
        .and_then(|e| e.jwt.clone())
        .filter(|(_, exp)| *exp > now.secs())
    {
        return Ok(Issued {
            access_token: jwt,
            expires_in: exp - now.secs(),
        });
    }
    let issued = sign(
        room,
        queue,
        ring,
        (&issuer.issuer, None),
        &rid,
        id,
        &status,
        now,
    )?;
    remember(room, queue, ledger, &rid, id, &issued, now);
    Ok(issued)
}

/// Notes that request `rid`'s JWT was issued.
fn remember(
    room: &Room,
    queue: &Capacity,
    ledger: &Ledger,
    rid: &RequestId,
    id: &str,
    issued: &Issued,
    now: Timestamp,
) {
    let exp = now.secs() + issued.expires_in;
    let until = Timestamp::from_secs(exp + KEEP.as_secs());
    queue
        .store()
        .mark(room.name(), mark(MarkKind::Redeemed, rid.qn), until, now);
    let mut book = ledger.book();
    if let Some(e) = book.requests.get_mut(&rid.qn) {
        e.jwt = Some((issued.access_token.clone(), exp));
    } else if book.requests.len() < MAX_REQUESTS {
        book.requests.insert(
            rid.qn,
            Entry {
                id: id.to_owned(),
                token: Arc::from(""),
                identity: String::new(),
                jwt: Some((issued.access_token.clone(), exp)),
            },
        );
    }
    book.held.retain(|(qn, _, _)| *qn != rid.qn);
}

/// Signs the JWT of a request the room let in. `issuer` and `validity` override the room's.
#[allow(clippy::too_many_arguments)]
fn sign(
    room: &Room,
    queue: &Capacity,
    ring: &KeyRing,
    (issuer, validity): (&str, Option<Duration>),
    rid: &RequestId,
    id: &str,
    status: &Status,
    now: Timestamp,
) -> Result<Issued, ApiError> {
    if ring.jwt().is_empty() {
        return Err(ApiError::NoKeys);
    }
    let mut claims = room_claims(room, queue, issuer, id, validity, now);
    claims.queue_number = Some(status.queue_number);
    let _ = rid;
    Ok(Issued {
        access_token: ring.jwt().sign(&claims),
        expires_in: claims.exp - claims.iat,
    })
}

/// The claims of a room's JWT for `sub`, whom `room` let in at `now`: the room's audience and
/// validity (at most a session; `validity` overrides it), its running event, a fresh `jti`.
/// Used by the queue API's tokens and the OpenID Provider's access tokens alike.
pub fn room_claims(
    room: &Room,
    queue: &Capacity,
    issuer: &str,
    sub: &str,
    validity: Option<Duration>,
    now: Timestamp,
) -> JwtClaims {
    let session = Duration::from_secs(queue.session_minutes() * 60);
    let (audience, configured) = match &room.config.jwt {
        Some(j) => (j.audience.clone(), j.validity),
        None => (room.name().to_owned(), Duration::from_secs(3600)),
    };
    let validity = validity.unwrap_or(configured.min(session)).as_secs().max(1);
    let iat = now.secs();
    let event = room
        .event_now(now)
        .filter(|p| p.state == crate::room::event::EventState::Running)
        .map(|p| p.event.name.clone());
    JwtClaims {
        iss: issuer.to_owned(),
        aud: audience,
        sub: sub.to_owned(),
        iat,
        nbf: iat,
        exp: iat + validity,
        jti: random_id(),
        room: room.name().to_owned(),
        queue_number: None,
        event,
    }
}

fn random_id() -> String {
    use rand::RngCore;
    let mut id = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut id);
    hex::encode(id)
}

/// Frees the places let in here whose `queue_position_expiry` passed unredeemed.
pub fn sweep(room: &Room, ledger: &Ledger, now: Timestamp) {
    let Ok(queue) = queue_of(room, now) else {
        return;
    };
    let due: Vec<(u64, u64, Place)> = {
        let mut book = ledger.book();
        let (due, keep) = book
            .held
            .drain(..)
            .partition(|(_, expires, _)| *expires <= now.millis());
        book.held = keep;
        due
    };
    let expiry = room.config.api.as_ref().map(|a| a.position_expiry);
    for (qn, _, place) in due {
        let redeemed = queue
            .store()
            .is_marked(room.name(), mark(MarkKind::Redeemed, qn), now);
        if !redeemed && expiry.is_some_and(|e| !e.is_zero()) {
            queue.revoke(place, now);
        }
    }
}

/// The private API's `tokens` (AuthGenerateToken): a JWT for request `id` now, whether or not
/// the room let it in, with `validity` and `issuer` overriding the room's.
pub fn generate(
    room: &Room,
    ring: &KeyRing,
    ledger: &Ledger,
    (issuer, validity): (&str, Option<Duration>),
    id: &str,
    now: Timestamp,
) -> Result<Issued, ApiError> {
    let queue = queue_of(room, now)?;
    let rid = RequestId::read(id, room.name(), ring).ok_or(ApiError::UnknownRequest)?;
    if queue.before_reset_number(rid.qn) {
        return Err(ApiError::UnknownRequest);
    }
    let status = waiting_status(queue, &rid, id.to_owned(), now);
    let issued = sign(
        room,
        queue,
        ring,
        (issuer, validity),
        &rid,
        id,
        &status,
        now,
    )?;
    remember(room, queue, ledger, &rid, id, &issued, now);
    Ok(issued)
}

/// Which tokens the private API counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenState {
    /// Issued, not expired, not completed or abandoned.
    Active,
    /// Issued and expired (within a day of their expiry).
    Expired,
}

/// The private API's token counts (GetNumActiveTokens, GetExpiredTokens): the count, and for
/// expired tokens their request ids where this node knows them.
pub fn tokens(
    room: &Room,
    ledger: &Ledger,
    state: TokenState,
    now: Timestamp,
) -> Result<(u64, Vec<String>), ApiError> {
    let queue = queue_of(room, now)?;
    let store = queue.store();
    let ended: std::collections::HashSet<u64> = store
        .marks_of(room.name(), MarkKind::Ended, now)
        .into_iter()
        .map(|(qn, _)| qn)
        .collect();
    let keep = KEEP.as_millis() as u64;
    let mut count = 0;
    let mut ids = Vec::new();
    let book = ledger.book();
    for (qn, until) in store.marks_of(room.name(), MarkKind::Redeemed, now) {
        if queue.before_reset_number(qn) {
            continue;
        }
        let expired = until.millis().saturating_sub(keep) <= now.millis();
        match state {
            TokenState::Active if !expired && !ended.contains(&qn) => count += 1,
            TokenState::Expired if expired => {
                count += 1;
                if let Some(e) = book.requests.get(&qn) {
                    ids.push(e.id.clone());
                }
            }
            _ => {}
        }
    }
    Ok((count, ids))
}

/// How a session ended (UpdateSession).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    Completed,
    Abandoned,
}

/// Marks request `id`'s session completed or abandoned: its place is freed (once), and its
/// JWT no longer counts as active.
pub fn end_session(
    room: &Room,
    ring: &KeyRing,
    ledger: &Ledger,
    id: &str,
    _how: SessionEnd,
    now: Timestamp,
) -> Result<(), ApiError> {
    let queue = queue_of(room, now)?;
    let rid = RequestId::read(id, room.name(), ring).ok_or(ApiError::UnknownRequest)?;
    if queue.before_reset_number(rid.qn) {
        return Err(ApiError::UnknownRequest);
    }
    let until = Timestamp::from_millis(now.millis() + (KEEP * 2).as_millis() as u64);
    if !queue
        .store()
        .mark(room.name(), mark(MarkKind::Ended, rid.qn), until, now)
    {
        // Ended before: nothing more to free.
        return Ok(());
    }
    // The place the room counts for it: its admission's session, from its allow token.
    let token = ledger.book().requests.get(&rid.qn).map(|e| e.token.clone());
    if let Some(t) = token.and_then(|t| Token::parse(t.as_bytes()).ok()) {
        if t.claims.dec == Dec::Allow {
            let place = Place {
                session: crate::room::capacity::session_of(&t.claims),
                minute: t.claims.chk.map_or(now.minute(), |c| c / 60),
            };
            queue.revoke(place, now);
        }
    }
    ledger.book().held.retain(|(qn, _, _)| *qn != rid.qn);
    Ok(())
}

/// Resets the room's queue (ResetState): every token and JWT issued before is void, the
/// numbers start over, and this node forgets its requests.
pub fn reset(room: &Room, ledger: &Ledger, now: Timestamp) -> Result<(), ApiError> {
    let queue = queue_of(room, now)?;
    queue.reset(now);
    let mut book = ledger.book();
    *book = Book::default();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::jwt::testing::{expect, ES256_PEM};
    use crate::room::testing::rooms;

    const T0: u64 = 1_800_000_000;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(T0 + secs)
    }

    /// The test HMAC key and an ES256 JWT key.
    fn ring() -> KeyRing {
        let text = format!(
            "active = \"key1\"\n[ring]\nkey1 = \"{}\"\n[[jwt_key]]\nkid = \"es1\"\nalgorithm = \"ES256\"\nprivate_key = \"es.pem\"\n",
            crate::keys::testing::KEY1
        );
        KeyRing::parse_with(&text, Path::new("/k/keys.toml"), &|_| {
            Ok(ES256_PEM.to_owned())
        })
        .unwrap()
    }

    fn room(extra: &str) -> crate::room::RoomSet {
        rooms(&format!(
            "[[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 2\nrefresh = \"10s\"\napi = true\n{extra}"
        ))
    }

    fn who(n: u8) -> Identity {
        Identity::of_ip(std::net::IpAddr::from([10, 0, 0, n]), 64)
    }

    fn issuer() -> JwtConfig {
        JwtConfig {
            issuer: "vestibule".into(),
        }
    }

    #[test]
    fn request_ids_are_signed_and_bound_to_their_room() {
        let ring = ring();
        let id = RequestId {
            qn: 42,
            arr: T0,
            nonce: "00112233445566ff".into(),
        };
        let text = id.write("sale", &ring);
        assert_eq!(RequestId::read(&text, "sale", &ring), Some(id.clone()));
        assert_eq!(
            RequestId::read(&text, "other", &ring),
            None,
            "another room's"
        );
        // The fuzz seed, made outside (HMAC-SHA512 in Python): the same id.
        let seed = include_str!("../../../../fuzz/seeds/request_id/valid");
        assert_eq!(seed, text);
        let forged = text.replacen("42.", "41.", 1);
        assert_eq!(
            RequestId::read(&forged, "sale", &ring),
            None,
            "another number"
        );
        for bad in [
            "",
            "42",
            "42.1.2.3.key1",
            &format!("{text}x"),
            &text.replace("key1", "key9"),
            &"9".repeat(300),
        ] {
            assert_eq!(RequestId::read(bad, "sale", &ring), None, "{bad}");
        }
    }

    #[test]
    fn numbers_are_ranks_of_arrival_and_the_serving_counter_follows_admissions() {
        let (set, ring, ledger) = (room(""), ring(), Ledger::default());
        let sale = set.iter().next().unwrap();
        // Two straight in, the next two wait; asking again keeps the place.
        let a = enqueue(sale, &ring, &ledger, &who(1), at(0)).unwrap();
        let b = enqueue(sale, &ring, &ledger, &who(2), at(0)).unwrap();
        let c = enqueue(sale, &ring, &ledger, &who(3), at(1)).unwrap();
        let d = enqueue(sale, &ring, &ledger, &who(4), at(1)).unwrap();
        assert_eq!(
            [
                a.queue_number,
                b.queue_number,
                c.queue_number,
                d.queue_number
            ],
            [1, 2, 3, 4]
        );
        assert_eq!((a.reached_at, c.reached_at), (Some(T0), None));
        assert_eq!(c.serving_number, 2);
        assert_eq!(
            enqueue(sale, &ring, &ledger, &who(3), at(2))
                .unwrap()
                .request_id,
            c.request_id
        );
        // Not yet: 409 material; a JWT for the first.
        assert!(matches!(
            token(sale, &ring, &ledger, &issuer(), &c.request_id, at(2)),
            Err(ApiError::NotYet(s)) if s.queue_number == 3 && s.serving_number == 2
        ));
        let jwt = token(sale, &ring, &ledger, &issuer(), &a.request_id, at(2)).unwrap();
        let again = token(sale, &ring, &ledger, &issuer(), &a.request_id, at(3)).unwrap();
        assert_eq!(again.access_token, jwt.access_token, "the same token again");
        let mut expect = expect();
        expect.issuer = "vestibule";
        expect.audience = "sale";
        let claims = ring
            .jwt()
            .verify(&jwt.access_token, &expect, at(3))
            .unwrap();
        assert_eq!(
            (claims.sub.as_str(), claims.queue_number),
            (a.request_id.as_str(), Some(1))
        );
        // The next minute lets two more in, in the order of their numbers.
        let c2 = check_in(sale, &ring, &ledger, &c.request_id, at(61)).unwrap();
        assert_eq!(c2.serving_number, 3);
        let d2 = check_in(sale, &ring, &ledger, &d.request_id, at(62)).unwrap();
        assert_eq!((d2.queue_number, d2.serving_number), (4, 4));
        // An operator's move lets the next in beyond the limits, at once.
        let e = enqueue(sale, &ring, &ledger, &who(5), at(62)).unwrap();
        let f = enqueue(sale, &ring, &ledger, &who(6), at(62)).unwrap();
        assert!(check_in(sale, &ring, &ledger, &e.request_id, at(63)).is_err());
        assert_eq!(sale.numbered(at(63)).unwrap().move_serving(1), 5);
        assert!(check_in(sale, &ring, &ledger, &e.request_id, at(63)).is_ok());
        assert!(matches!(
            check_in(sale, &ring, &ledger, &f.request_id, at(63)),
            Err(ApiError::NotYet(_))
        ));
    }

    #[test]
    fn browsers_get_numbers_too_and_a_reset_voids_everything_before_it() {
        let (set, ring, ledger) = (room(""), ring(), Ledger::default());
        let sale = set.iter().next().unwrap();
        let page = sale.decide(&ring, &who(1), &[], at(0));
        assert_eq!(
            (page.decision, page.queue_number),
            (Decision::Allow, Some(1))
        );
        let api = enqueue(sale, &ring, &ledger, &who(2), at(0)).unwrap();
        assert_eq!(api.queue_number, 2);
        let cookie = match page.cookie {
            CookieAction::Set(c) => c,
            _ => panic!("a cookie"),
        };
        let jwt = token(sale, &ring, &ledger, &issuer(), &api.request_id, at(1)).unwrap();
        reset(sale, &ledger, at(5)).unwrap();
        // The browser is a new arrival, numbered from 1 again; the request is unknown; the
        // JWT is refused as issued before the reset.
        let after = sale.decide(&ring, &who(1), &[cookie.as_bytes()], at(6));
        let queue = sale.numbered(at(6)).unwrap();
        assert_eq!(after.queue_number.map(|n| queue.shown(n)), Some(1));
        assert_eq!(
            check_in(sale, &ring, &ledger, &api.request_id, at(6)),
            Err(ApiError::UnknownRequest)
        );
        let mut expect = expect();
        expect.issuer = "vestibule";
        expect.audience = "sale";
        expect.issued_after = sale.numbered(at(6)).unwrap().reset_at_ms().div_ceil(1000);
        assert_eq!(
            ring.jwt().verify(&jwt.access_token, &expect, at(6)),
            Err(crate::jwt::Refusal::Reset)
        );
    }

    #[test]
    fn an_unredeemed_place_expires_and_is_freed_and_ended_sessions_stop_counting() {
        let (set, ring, ledger) = (
            room("total_active_users = 1\nqueue_position_expiry = \"30s\"\n"),
            ring(),
            Ledger::default(),
        );
        let sale = set.iter().next().unwrap();
        let a = enqueue(sale, &ring, &ledger, &who(1), at(0)).unwrap();
        assert_eq!(a.expires_at, Some(T0 + 30));
        let b = enqueue(sale, &ring, &ledger, &who(2), at(0)).unwrap();
        assert!(b.reached_at.is_none(), "the one active place is a's");
        assert_eq!(
            token(sale, &ring, &ledger, &issuer(), &a.request_id, at(31)),
            Err(ApiError::Expired)
        );
        // Its place is free again: b gets in at its next check-in.
        assert!(check_in(sale, &ring, &ledger, &b.request_id, at(40)).is_ok());
        token(sale, &ring, &ledger, &issuer(), &b.request_id, at(41)).unwrap();
        assert_eq!(
            tokens(sale, &ledger, TokenState::Active, at(42)).unwrap().0,
            1
        );
        end_session(
            sale,
            &ring,
            &ledger,
            &b.request_id,
            SessionEnd::Completed,
            at(43),
        )
        .unwrap();
        assert_eq!(
            tokens(sale, &ledger, TokenState::Active, at(44)).unwrap().0,
            0
        );
        assert_eq!(
            check_in(sale, &ring, &ledger, &b.request_id, at(45)),
            Err(ApiError::Ended)
        );
        // Its place is free: a newcomer of the next minute goes straight in.
        let c = enqueue(sale, &ring, &ledger, &who(3), at(61)).unwrap();
        assert!(c.reached_at.is_some(), "{c:?}");
        // The token expires; the private API lists it by id.
        let expired = tokens(sale, &ledger, TokenState::Expired, at(41 + 2 * 3600)).unwrap();
        assert_eq!(expired, (1, vec![b.request_id.clone()]));
    }

    #[test]
    fn rooms_without_the_api_answer_unknown_room() {
        let set =
            rooms("[[room]]\nname = \"plain\"\nadmission = \"fifo\"\nnew_users_per_minute = 2\n");
        let plain = set.iter().next().unwrap();
        assert_eq!(
            enqueue(plain, &ring(), &Ledger::default(), &who(1), at(0)),
            Err(ApiError::UnknownRoom)
        );
    }
}
