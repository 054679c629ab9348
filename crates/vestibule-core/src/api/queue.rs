//! The queue API's requests: an app gets in line ([`enqueue`]), checks where it stands
//! ([`check_in`]), and gets its JWT once the room has let it in ([`token`]); the private API's
//! moves (tokens for a request, sessions ended, a reset).
//!
//! An API request is a visitor of the room like any other: it arrives, waits, checks in and is
//! let in by the same admission, counted in the same counters, under the same pause, events and
//! operator actions. Where a browser carries its place in the room's cookie, an app carries a
//! **request id**, `qn.arr.nonce.mac.kid`: its queue number, its arrival (Unix ms), a random
//! nonce that names its identity in the room, and a MAC under the room's key ring, so nobody can
//! make one up or change its number; only one spelling of an id is accepted. An id of an
//! earlier numbering (a restarted process, a store that lost its data) or from before the
//! room's last reset is unknown. The room's latest token for each request is kept in this
//! node's [`Ledger`] (a check-in at another node starts again from the id); what must hold in
//! the whole cluster is in the store's marks, by queue number:
//!
//! - [`MarkKind::Reached`]: the room let the request in at `until − hold − KEEP` (ms); its
//!   place is counted from then for a session, or until `queue_position_expiry` when it is not
//!   redeemed by then. JWTs are issued for it only within that session.
//! - [`MarkKind::Redeemed`]: its JWT was issued; until the JWT's expiry and [`KEEP`] more, so
//!   expired tokens can be listed.
//! - [`MarkKind::Ended`]: its session was marked completed or abandoned; its place was freed.

use std::collections::{HashMap, VecDeque};
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
/// Queue numbers fit in this many bits of a mark's id; the numbering's start fills the rest.
const NUMBER_BITS: u32 = 40;

/// Why an API request got no answer it wanted.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiError {
    /// The room has no queue API.
    UnknownRoom,
    /// Not a request id of this room (made up, changed, another room's, of an earlier
    /// numbering, or from before a reset).
    UnknownRequest,
    /// Its number's place expired unredeemed (`queue_position_expiry`), its session is over,
    /// or it left the line.
    Expired,
    /// Its session was marked completed or abandoned.
    Ended,
    /// Not yet: the room has not let it in.
    NotYet(Status),
    /// The line is full (`max_waiting_users`).
    QueueFull,
    /// The room lets nobody new in: `sold_out`, or switched off (`room_disabled`).
    Closed(&'static str),
    /// A cluster node that has used up its queue numbers until its next sync.
    NumbersPending,
    /// The room cannot sign JWTs (no `[[jwt_key]]`).
    NoKeys,
    /// An `enqueue` room refused the request's enqueue token, or the lack of one.
    Enqueue(crate::enqueue::Refusal),
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
    /// When it arrived, Unix ms.
    pub arr_ms: u64,
    nonce: String,
}

impl RequestId {
    /// The identity the request waits as in the room.
    fn uid(&self) -> Identity {
        Identity::from_encoded(&format!("api.{}", self.nonce))
    }

    /// Its arrival as the room's tokens carry it, Unix seconds.
    fn arr_secs(&self) -> u64 {
        self.arr_ms / 1000
    }

    fn mac(&self, room: &str, key: &crate::sign::SigningKey) -> String {
        let qn = self.qn.to_string();
        let arr = self.arr_ms.to_string();
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
            self.arr_ms,
            self.nonce,
            self.mac(room, key),
            key.id()
        )
    }

    /// Reads an id of `room`, in its one spelling: its MAC must be the one a key of the ring
    /// makes.
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
        // Digits without a leading zero, lowercase hex: one spelling per id.
        let number = |s: &str| {
            (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u64>().ok())
                .flatten()
                .filter(|n| n.to_string() == s)
        };
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(nonce, 16) || !hex(mac, 32) {
            return None;
        }
        let id = RequestId {
            qn: number(qn)?,
            arr_ms: number(arr)?,
            nonce: nonce.to_owned(),
        };
        let key = ring.get(kid)?;
        let expected = id.mac(room, key);
        use subtle::ConstantTimeEq;
        bool::from(expected.as_bytes().ct_eq(mac.as_bytes())).then_some(id)
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
    /// Places let in here and not redeemed yet, in the order they expire: (the request, when
    /// the place expires (ms)), to free once expired.
    held: VecDeque<(RequestId, u64)>,
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

    /// This node's entry for `id`, if it is that request's (not one of another numbering).
    fn entry(&self, id: &str, qn: u64) -> Option<Entry> {
        self.book()
            .requests
            .get(&qn)
            .filter(|e| e.id == id)
            .cloned()
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

/// The mark of `kind` for queue number `qn` of the numbering that began at `since` (ms).
fn mark(kind: MarkKind, qn: u64, since: u64) -> Mark {
    let era = (since / 1000) & ((1 << (64 - NUMBER_BITS)) - 1);
    Mark {
        kind,
        id: era << NUMBER_BITS | (qn & ((1 << NUMBER_BITS) - 1)),
    }
}

/// The queue number of a mark of the numbering that began at `since`, if it is one of it.
fn number_of(id: u64, since: u64) -> Option<u64> {
    (mark(MarkKind::Reached, 0, since).id == id & !((1 << NUMBER_BITS) - 1))
        .then_some(id & ((1 << NUMBER_BITS) - 1))
}

/// How long a place the room let in is held unredeemed: `queue_position_expiry`, else a
/// session.
fn hold(room: &Room, queue: &Capacity) -> Duration {
    match room.config.api.as_ref().map(|a| a.position_expiry) {
        Some(d) if !d.is_zero() => d,
        _ => session(queue),
    }
}

fn session(queue: &Capacity) -> Duration {
    Duration::from_secs(queue.session_minutes() * 60)
}

/// What the store says of a request's number.
struct Marks {
    /// When the room let it in (ms), if it did.
    reached_ms: Option<u64>,
    redeemed: bool,
    ended: bool,
}

fn marks_of(room: &Room, queue: &Capacity, rid: &RequestId, now: Timestamp) -> Marks {
    let (store, since) = (queue.store(), queue.numbering_since());
    let reached_ms = store
        .marked_until(room.name(), mark(MarkKind::Reached, rid.qn, since), now)
        .map(|until| {
            until
                .millis()
                .saturating_sub((hold(room, queue) + KEEP).as_millis() as u64)
        });
    Marks {
        reached_ms,
        redeemed: store.is_marked(room.name(), mark(MarkKind::Redeemed, rid.qn, since), now),
        ended: store.is_marked(room.name(), mark(MarkKind::Ended, rid.qn, since), now),
    }
}

/// Reads request id `id` of `room`: its MAC, and that it is of the current numbering and
/// since the last reset.
fn read_current(
    queue: &Capacity,
    room: &Room,
    ring: &KeyRing,
    id: &str,
) -> Result<RequestId, ApiError> {
    RequestId::read(id, room.name(), ring)
        .filter(|rid| queue.current_number(rid.arr_ms, 0))
        .ok_or(ApiError::UnknownRequest)
}

/// Who a `POST queue` is in `room`: the account of the enqueue token it brings (`token`: the
/// body's `enqueue_token`, else the `Vestibule-Enqueue` header) in a room with `enqueue` on,
/// else `address` (its identity by address or trusted header). A token is never ignored in such
/// a room: a bad one, or none in a `required` room, is refused.
pub fn identity_of(
    room: &Room,
    token: Option<&str>,
    address: &Identity,
    now: Timestamp,
) -> Result<Identity, ApiError> {
    let Some(settings) = &room.config.enqueue else {
        return Ok(address.clone());
    };
    match token {
        Some(t) => {
            crate::enqueue::verify(t, &settings.key, room.name(), now).map_err(ApiError::Enqueue)
        }
        None if settings.mode == crate::enqueue::Mode::Required => {
            Err(ApiError::Enqueue(crate::enqueue::Refusal::Missing))
        }
        None => Ok(address.clone()),
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
        (Decision::SoldOut, _) => return Err(ApiError::Closed("sold_out")),
        (Decision::Bypass, _) => return Err(ApiError::Closed("room_disabled")),
        (_, Some(qn)) => qn,
        (_, None) => {
            // No number to give: the place the room just made is given back.
            if let Some(place) = outcome.place {
                queue.revoke(place, now);
            }
            return Err(ApiError::NumbersPending);
        }
    };
    let rid = RequestId {
        qn,
        arr_ms: now.millis(),
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
        reached(room, queue, ledger, &rid, now);
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

/// The room let request `rid` in at `now`: its place is held until redeemed or expired.
fn reached(room: &Room, queue: &Capacity, ledger: &Ledger, rid: &RequestId, now: Timestamp) {
    let hold = hold(room, queue);
    let until = Timestamp::from_millis(now.millis() + (hold + KEEP).as_millis() as u64);
    let since = queue.numbering_since();
    queue.store().mark(
        room.name(),
        mark(MarkKind::Reached, rid.qn, since),
        until,
        now,
    );
    let mut book = ledger.book();
    book.held
        .push_back((rid.clone(), now.millis() + hold.as_millis() as u64));
}

/// The place the room counts for request `rid`, let in at `reached_ms`: the session its
/// admission made, in the minute it was made (any node can name it).
fn place_of(rid: &RequestId, reached_ms: u64) -> Place {
    let mut claims = Claims::new(Dec::Allow, 0, &rid.uid(), "");
    claims.arr = Some(rid.arr_secs());
    claims.acc = Some(reached_ms);
    Place {
        session: crate::room::capacity::session_of(&claims),
        minute: reached_ms / 60_000,
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
    let rid = read_current(queue, room, ring, id)?;
    sweep(room, ledger, now);
    let marks = marks_of(room, queue, &rid, now);
    if marks.ended {
        return Err(ApiError::Ended);
    }
    if let Some(at) = marks.reached_ms {
        let expiry = room.config.api.as_ref().map(|a| a.position_expiry);
        let expired = !marks.redeemed
            && expiry.is_some_and(|e| !e.is_zero() && now.millis() >= at + e.as_millis() as u64);
        // A session the room counted is over: the request is a new arrival.
        let over = now.millis() >= at + session(queue).as_millis() as u64;
        if expired || over {
            return Err(ApiError::Expired);
        }
        let mut s = waiting_status(queue, &rid, id.to_owned(), now);
        s.reached_at = Some(at / 1000);
        s.expires_at = expiring(room, at, marks.redeemed);
        s.retry_after = 0;
        return Ok(s);
    }
    let token = next_token(queue, ring, ledger, (id, &rid), now);
    // Gone longer than `rejoin_grace`: the place is lost, as a browser's would be.
    if Token::parse(token.as_bytes()).is_ok_and(|t| !queue.still_in_line(&t.claims, now)) {
        return Err(ApiError::Expired);
    }
    let outcome = room.decide(ring, &rid.uid(), &[token.as_bytes()], now);
    if let CookieAction::Set(t) = &outcome.cookie {
        if let Some(e) = ledger
            .book()
            .requests
            .get_mut(&rid.qn)
            .filter(|e| e.id == id)
        {
            e.token = t.clone();
        }
    }
    if outcome.admitted {
        reached(room, queue, ledger, &rid, now);
    }
    let s = status(room, queue, &rid, id.to_owned(), &outcome, now);
    if outcome.decision == Decision::Allow {
        Ok(s)
    } else {
        Err(ApiError::NotYet(s))
    }
}

/// What a visitor's stream watches for request `id` (`GET {api_prefix}/rooms/<room>/stream
/// ?request_id=`): who it is and the wait token its next check-in presents. `Ok(None)` when the
/// room has let it in already: its turn has come.
pub fn watched(
    room: &Room,
    ring: &KeyRing,
    ledger: &Ledger,
    id: &str,
    now: Timestamp,
) -> Result<Option<(Identity, Arc<str>)>, ApiError> {
    let queue = queue_of(room, now)?;
    let rid = read_current(queue, room, ring, id)?;
    let marks = marks_of(room, queue, &rid, now);
    if marks.ended {
        return Err(ApiError::Ended);
    }
    if marks.reached_ms.is_some() {
        return Ok(None);
    }
    let token = next_token(queue, ring, ledger, (id, &rid), now);
    Ok(Some((rid.uid(), token)))
}

/// A wait token for a request this node does not remember (checked in elsewhere, or before a
/// restart): due now, counted from a tick ago.
/// The wait token request `id`'s next check-in presents: this node's last one for it, else
/// one made again from the request id (its place, due now).
fn next_token(
    queue: &Capacity,
    ring: &KeyRing,
    ledger: &Ledger,
    (id, rid): (&str, &RequestId),
    now: Timestamp,
) -> Arc<str> {
    ledger
        .entry(id, rid.qn)
        .map(|e| e.token)
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| again(queue, ring, rid, now))
}

fn again(queue: &Capacity, ring: &KeyRing, rid: &RequestId, now: Timestamp) -> Arc<str> {
    let key = ring.active();
    let mut claims = Claims::new(Dec::Wait, now.secs(), &rid.uid(), key.id());
    claims.arr = Some(rid.arr_secs());
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
/// before and has not expired). It never outlives the session the room counts for it.
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
    let rid = read_current(queue, room, ring, id)?;
    if let Some((jwt, exp)) = ledger
        .entry(id, rid.qn)
        .and_then(|e| e.jwt)
        .filter(|(_, exp)| *exp > now.secs())
    {
        return Ok(Issued {
            access_token: jwt,
            expires_in: exp - now.secs(),
        });
    }
    let reached_ms = status.reached_at.map_or(now.millis(), |s| s * 1000);
    let left = (reached_ms + session(queue).as_millis() as u64).saturating_sub(now.millis());
    let validity = Duration::from_millis(left);
    let issued = sign(
        room,
        queue,
        ring,
        (&issuer.issuer, None, validity),
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
    let since = queue.numbering_since();
    queue.store().mark(
        room.name(),
        mark(MarkKind::Redeemed, rid.qn, since),
        until,
        now,
    );
    let mut book = ledger.book();
    let room_for_more = book.requests.len() < MAX_REQUESTS;
    match book.requests.get_mut(&rid.qn) {
        Some(e) if e.id == id => e.jwt = Some((issued.access_token.clone(), exp)),
        Some(_) => {}
        None if room_for_more => {
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
        None => {}
    }
    book.held.retain(|(held, _)| held != rid);
}

/// Signs the JWT of a request. `issuer` and `validity` override the room's; `cap` bounds it.
fn sign(
    room: &Room,
    queue: &Capacity,
    ring: &KeyRing,
    (issuer, validity, cap): (&str, Option<Duration>, Duration),
    id: &str,
    status: &Status,
    now: Timestamp,
) -> Result<Issued, ApiError> {
    if ring.jwt().is_empty() {
        return Err(ApiError::NoKeys);
    }
    let mut claims = room_claims(room, queue, issuer, id, validity, now);
    claims.exp = claims.exp.min(claims.iat + cap.as_secs().max(1));
    claims.queue_number = Some(status.queue_number);
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
    let (audience, configured) = match &room.config.jwt {
        Some(j) => (j.audience.clone(), j.validity),
        None => (room.name().to_owned(), Duration::from_secs(3600)),
    };
    let validity = validity
        .unwrap_or(configured.min(session(queue)))
        .as_secs()
        .max(1);
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

/// Frees the places let in here whose `queue_position_expiry` passed unredeemed (those let in
/// before the room's last reset were cleared with it).
pub fn sweep(room: &Room, ledger: &Ledger, now: Timestamp) {
    let Ok(queue) = queue_of(room, now) else {
        return;
    };
    let mut due = Vec::new();
    {
        let mut book = ledger.book();
        while book
            .held
            .front()
            .is_some_and(|(_, expires)| *expires <= now.millis())
        {
            if let Some((rid, _)) = book.held.pop_front() {
                due.push(rid);
            }
        }
    }
    let expiry = room.config.api.as_ref().map(|a| a.position_expiry);
    if expiry.is_none_or(|e| e.is_zero()) {
        return;
    }
    for rid in due {
        let marks = marks_of(room, queue, &rid, now);
        let Some(at) = marks.reached_ms else { continue };
        if !marks.redeemed && !marks.ended && at >= queue.reset_at_ms() {
            queue.revoke(place_of(&rid, at), now);
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
    let rid = read_current(queue, room, ring, id)?;
    let status = waiting_status(queue, &rid, id.to_owned(), now);
    let cap = Duration::from_secs(7 * 86_400);
    let issued = sign(room, queue, ring, (issuer, validity, cap), id, &status, now)?;
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
    let (store, since) = (queue.store(), queue.numbering_since());
    let reset = queue.reset_at_ms();
    let ended: std::collections::HashSet<u64> = store
        .marks_of(room.name(), MarkKind::Ended, now)
        .into_iter()
        .filter_map(|(id, _)| number_of(id, since))
        .collect();
    let keep = KEEP.as_millis() as u64;
    let mut count = 0;
    let mut ids = Vec::new();
    let book = ledger.book();
    for (id, until) in store.marks_of(room.name(), MarkKind::Redeemed, now) {
        let Some(qn) = number_of(id, since) else {
            continue;
        };
        let expiry = until.millis().saturating_sub(keep);
        // Issued before the last reset (a JWT lives at most a week): void, not counted.
        if expiry.saturating_sub(7 * 86_400_000) < reset && reset > 0 && expiry < reset {
            continue;
        }
        let expired = expiry <= now.millis();
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

/// Marks request `id`'s session completed or abandoned: its place is freed (once, on any
/// node), and its JWT no longer counts as active.
pub fn end_session(
    room: &Room,
    ring: &KeyRing,
    ledger: &Ledger,
    id: &str,
    _how: SessionEnd,
    now: Timestamp,
) -> Result<(), ApiError> {
    let queue = queue_of(room, now)?;
    let rid = read_current(queue, room, ring, id)?;
    let marks = marks_of(room, queue, &rid, now);
    let until = Timestamp::from_millis(now.millis() + (KEEP * 2).as_millis() as u64);
    let since = queue.numbering_since();
    if !queue.store().mark(
        room.name(),
        mark(MarkKind::Ended, rid.qn, since),
        until,
        now,
    ) {
        // Ended before: nothing more to free.
        return Ok(());
    }
    if let Some(at) = marks.reached_ms {
        queue.revoke(place_of(&rid, at), now);
    }
    ledger.book().held.retain(|(held, _)| held != &rid);
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
mod tests_support {
    use std::path::Path;

    use super::*;
    use crate::jwt::testing::ES256_PEM;
    use crate::room::testing::rooms;

    pub const T0: u64 = 1_800_000_000;

    pub fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(T0 + secs)
    }

    /// The test HMAC key and an ES256 JWT key.
    pub fn ring() -> KeyRing {
        let text = format!(
            "active = \"key1\"\n[ring]\nkey1 = \"{}\"\n[[jwt_key]]\nkid = \"es1\"\nalgorithm = \"ES256\"\nprivate_key = \"es.pem\"\n",
            crate::keys::testing::KEY1
        );
        KeyRing::parse_with(&text, Path::new("/k/keys.toml"), &|_| {
            Ok(ES256_PEM.to_owned())
        })
        .unwrap()
    }

    pub fn room(extra: &str) -> crate::room::RoomSet {
        rooms(&format!(
            "[[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 2\nrefresh = \"10s\"\napi = true\n{extra}"
        ))
    }

    pub fn who(n: u8) -> Identity {
        Identity::of_ip(std::net::IpAddr::from([10, 0, 0, n]), 64)
    }

    pub fn issuer() -> JwtConfig {
        JwtConfig {
            issuer: "vestibule".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::tests_support::*;
    use super::*;
    use crate::jwt::testing::expect;
    use crate::room::testing::rooms;

    #[test]
    fn request_ids_are_signed_and_bound_to_their_room() {
        let ring = ring();
        let id = RequestId {
            qn: 42,
            arr_ms: T0 * 1000,
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
        let upper = {
            let mut parts: Vec<String> = text.split('.').map(str::to_owned).collect();
            parts[3] = parts[3].to_uppercase();
            parts.join(".")
        };
        for bad in [
            "",
            "42",
            &text.replacen("42.", "042.", 1),
            &upper,
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
        assert!(matches!(
            check_in(sale, &ring, &ledger, &e.request_id, at(63)),
            Err(ApiError::NotYet(_))
        ));
        assert_eq!(sale.numbered(at(63)).unwrap().move_serving(1, at(63)), 5);
        assert!(check_in(sale, &ring, &ledger, &e.request_id, at(63)).is_ok());
        assert!(matches!(
            check_in(sale, &ring, &ledger, &f.request_id, at(63)),
            Err(ApiError::NotYet(_))
        ));
        // A move far past the last number lets in those in line, not whoever comes next.
        let queue = sale.numbered(at(64)).unwrap();
        assert!(queue.move_serving(100, at(64)) > 100);
        assert!(check_in(sale, &ring, &ledger, &f.request_id, at(65)).is_ok());
        let g = enqueue(sale, &ring, &ledger, &who(7), at(70)).unwrap();
        assert!(matches!(
            check_in(sale, &ring, &ledger, &g.request_id, at(80)),
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
    fn ids_of_an_earlier_numbering_are_unknown_and_a_session_bounds_the_jwts() {
        let ring = ring();
        let (before, ledger) = (room(""), Ledger::default());
        let old = enqueue(
            before.iter().next().unwrap(),
            &ring,
            &ledger,
            &who(1),
            at(0),
        )
        .unwrap();
        // A restarted process: numbers from 1 again, and the old id is nobody's.
        let (after, ledger) = (room(""), Ledger::default());
        let sale = after.iter().next().unwrap();
        assert_eq!(
            check_in(sale, &ring, &ledger, &old.request_id, at(5)),
            Err(ApiError::UnknownRequest),
            "before the new numbering's first number"
        );
        let new = enqueue(sale, &ring, &ledger, &who(2), at(10)).unwrap();
        assert_eq!(
            new.queue_number, old.queue_number,
            "the same number, another request"
        );
        assert_eq!(
            token(sale, &ring, &ledger, &issuer(), &old.request_id, at(11)),
            Err(ApiError::UnknownRequest)
        );
        // The new one's JWTs never outlive the session the room counts for it (5 minutes by
        // default); after it, none.
        let jwt = token(sale, &ring, &ledger, &issuer(), &new.request_id, at(12)).unwrap();
        assert!(jwt.expires_in <= 300 - 2, "{jwt:?}");
        assert_eq!(
            token(
                sale,
                &ring,
                &ledger,
                &issuer(),
                &new.request_id,
                at(10 + 300)
            ),
            Err(ApiError::Expired)
        );
    }

    #[test]
    fn a_rebuilt_room_after_a_reset_keeps_what_it_counted_since() {
        let toml = "[[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 100\napi = true\n";
        let store: Arc<dyn crate::store::CounterStore> =
            Arc::new(crate::store::local::LocalStore::new());
        let build = || {
            let config = crate::config::Config::parse(
                &format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{toml}"),
                Path::new("/tmp/x.toml"),
                &crate::config::testing::Bare,
            )
            .unwrap();
            Room::new(config.rooms.into_iter().next().unwrap(), &store)
        };
        let (first, ring, ledger) = (build(), ring(), Ledger::default());
        for n in 1..=3 {
            enqueue(&first, &ring, &ledger, &who(n), at(0)).unwrap();
        }
        reset(&first, &ledger, at(30)).unwrap();
        let active = |r: &Room| r.figures(at(31)).unwrap().active;
        assert_eq!(
            active(&first),
            0,
            "those of before the reset went, its minute's too"
        );
        for n in 4..=5 {
            enqueue(&first, &ring, &ledger, &who(n), at(30)).unwrap();
        }
        assert_eq!(active(&first), 2);
        // A reload builds the room again: what it counted since the reset stays.
        let second = build();
        assert_eq!(active(&second), 2);
    }

    #[test]
    fn apps_take_numbers_in_an_events_prequeue_and_go_in_at_its_start() {
        let (set, ring, ledger) = (
            room("[[room.event]]\nname = \"launch\"\nprequeue_start = \"2027-01-15T08:00:00Z\"\nstart = \"2027-01-15T08:10:00Z\"\nend = \"2027-01-15T09:00:00Z\"\n"),
            ring(),
            Ledger::default(),
        );
        let sale = set.iter().next().unwrap();
        let a = enqueue(sale, &ring, &ledger, &who(1), at(10)).unwrap();
        let b = enqueue(sale, &ring, &ledger, &who(2), at(20)).unwrap();
        assert_eq!((a.queue_number, b.queue_number), (1, 2));
        assert!(matches!(
            check_in(sale, &ring, &ledger, &a.request_id, at(300)),
            Err(ApiError::NotYet(_))
        ));
        // The event starts: the pre-queue goes first, in the order of its numbers.
        let mut let_in = None;
        for t in (600..700).step_by(5) {
            if check_in(sale, &ring, &ledger, &a.request_id, at(t)).is_ok() {
                let_in = Some(t);
                break;
            }
        }
        assert!(
            let_in.is_some(),
            "the first of the pre-queue is let in after the start"
        );
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

#[cfg(test)]
mod account_tests {
    use super::tests_support::*;
    use super::*;
    use crate::enqueue::account_identity;

    /// Two devices of one account, each without the other's cookie: one place, one number;
    /// another account behind the same address: a place of its own.
    #[test]
    fn an_accounts_devices_share_one_place_in_a_capacity_room() {
        let (set, ring) = (room(""), ring());
        let sale = set.iter().next().unwrap();
        // Two let in straight away fill the minute; the line forms.
        for n in 1..=2 {
            sale.decide(&ring, &who(n), &[], at(0));
        }
        let alice = account_identity("sale", "alice");
        let phone = sale.decide(&ring, &alice, &[], at(1));
        let laptop = sale.decide(&ring, &alice, &[], at(30));
        assert_eq!(phone.decision, Decision::Anon);
        assert_eq!(laptop.queue_number, phone.queue_number, "one number");
        let arrival = |o: &Outcome| match &o.cookie {
            CookieAction::Set(t) => Token::parse(t.as_bytes()).unwrap().claims.arr,
            _ => None,
        };
        assert_eq!(arrival(&laptop), arrival(&phone), "one place");
        let bob = sale.decide(&ring, &account_identity("sale", "bob"), &[], at(31));
        assert_ne!(bob.queue_number, phone.queue_number);
        assert_ne!(arrival(&bob), arrival(&phone));
        // Addresses never share: two arrivals by address are two places.
        let a = sale.decide(&ring, &who(9), &[], at(32));
        let b = sale.decide(&ring, &who(9), &[], at(33));
        assert_ne!(a.queue_number, b.queue_number);
    }
}
