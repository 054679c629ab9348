//! The decision: what one request is owed.
//!
//! The proxy reads a request once into a [`Request`], calls [`decide`] with the [`Policy`] in
//! service and the clock, and writes the [`Verdict`]. Nothing here touches a socket, Pingora or
//! the metrics: the decision reads the request, the rooms and rules of the policy, and the
//! counter store behind them, and says what to answer and what the rest of the request needs.
//!
//! # The steps, in order
//!
//! 1. **`redirect_to_https`**: a plain request is sent to the TLS listener
//!    ([`Answer::Redirect`]), except ACME HTTP-01 challenges and requests a trusted proxy says
//!    arrived over https.
//! 2. **Rules of scope `all`**: a rule that blocks answers [`Answer::RateLimited`] before any
//!    room sees the request.
//! 3. **The API**: a path under `[server] api_prefix` (or the well-known JWKS path) answers
//!    [`Answer::Api`] with the endpoint it names ([`api::route`]); no room sees it and it is
//!    never forwarded.
//!    The exception is the OpenID Provider's authorization endpoint (`[oidc]`): a well-formed
//!    sign-in is decided in the `[oidc]` room as step 4 would decide a request for it, and
//!    answers that room's page ([`Answer::RoomPage`]) until the room lets the visitor in.
//! 4. **The room** the host and path route to, unless the route is a bypass, the room is off,
//!    the request is an ACME challenge (with `bypass_acme_challenge`), or there is no key ring:
//!    - a subresource of a held page (its favicon, say) neither joins nor checks in:
//!      [`Answer::Held`] unless its visitor is admitted;
//!    - a room whose `enqueue` is on knows the request by the account of the enqueue token it
//!      brings, or of its account-bound room cookie ([`enqueue::identify`]); a token refused,
//!      or none in a `required` room, answers [`Answer::EnqueueRefused`];
//!    - otherwise the room decides with the request's cookies, proof-of-work solution and
//!      invitation;
//!    - a page opened by an invitation's link that got a place answers [`Answer::Invited`]
//!      (a `303` to the same target without the code);
//!    - a decision that does not forward answers [`Answer::RoomPage`];
//!    - a room in shadow mode decides, sets its cookie and counts like any other, and forwards.
//! 5. **Rules of scope `origin`**, for what would be forwarded.
//! 6. Otherwise [`Answer::Forward`], with the room's cookie to set on the origin's response.
//!
//! # What it may do
//!
//! It counts in the counter store (rate windows, buckets, a capacity room's admissions and
//! queue) and takes concurrency slots, which the verdict carries and which are given back when
//! they are dropped. It never waits: the store answers from memory.

use std::borrow::Cow;
use std::net::IpAddr;

use http::header;
use smallvec::SmallVec;

use crate::api;
use crate::bearer;
use crate::config::{Config, RoomMode, Scope};
use crate::cookie;
use crate::enqueue;
use crate::identity::IdentityPolicy;
use crate::invite;
use crate::keys::KeyRing;
use crate::path::RequestPath;
use crate::ratelimit::{Checks, Outcome as RuleOutcome, RequestView, RuleSet};
use crate::room::{
    Brought, CookieAction, Decision, Outcome, Place, PowCount, Room, RoomSet, Route,
};
use crate::time::Timestamp;
use crate::token::{Dec, Reject};
use crate::wants::{self, Wants};

/// A request as the proxy read it: everything the decision looks at, read once.
pub struct Request<'a> {
    pub method: &'a http::Method,
    pub uri: &'a http::Uri,
    pub headers: &'a http::HeaderMap,
    /// The host it is routed by: lowercase, without port or trailing dot.
    pub host: Cow<'a, str>,
    /// The path, normalized once (a path origins would read in different ways never gets
    /// here: the proxy answers it `400`).
    pub path: RequestPath<'a>,
    /// Who sent it (see [`client_address`]).
    pub client: ClientAddress,
    /// It arrived over TLS.
    pub tls: bool,
}

/// Who sent a request: the client's address after trusted proxies, and the connection's peer.
#[derive(Clone, Copy, Debug)]
pub struct ClientAddress {
    pub ip: IpAddr,
    pub peer: IpAddr,
    /// The peer is a trusted proxy: `ip` came from its `X-Forwarded-For`.
    pub trusted: bool,
}

/// The client behind `peer`: `X-Forwarded-For` is looked up only when the peer is one whose
/// word counts.
pub fn client_address(
    headers: &http::HeaderMap,
    policy: &IdentityPolicy,
    peer: IpAddr,
) -> ClientAddress {
    let trusted = policy.is_trusted(peer);
    let ip = if trusted {
        let xff = headers.get_all(X_FORWARDED_FOR);
        policy.client_ip(peer, xff.iter().map(|v| v.as_bytes()))
    } else {
        peer.to_canonical()
    };
    ClientAddress { ip, peer, trusted }
}

/// What to answer.
#[derive(Debug)]
pub enum Answer {
    /// Forward to the origin.
    Forward,
    /// A request for the API's reserved path: the edge's API answers it; it is never
    /// forwarded. `identity` is who sent it, as the rooms would see them.
    Api {
        endpoint: api::Endpoint,
        identity: crate::identity::Identity,
    },
    /// `308` to this https URL (`redirect_to_https`).
    Redirect(String),
    /// Show this room's page for this outcome.
    RoomPage(usize, Outcome),
    /// A rule blocks it.
    RateLimited(Limited),
    /// This room (an index into the policy's rooms) refuses the request's enqueue token, or
    /// wants one and got none: a 403.
    EnqueueRefused(usize, enqueue::Refusal),
    /// A held subresource: a short 503 asking to retry after this many seconds.
    Held(u64),
    /// A page opened by an invitation's link got a place: `303` to the same target without
    /// the code, with the place's cookies, so the code leaves the address bar (and the
    /// `Referer` of the origin's page).
    Invited {
        location: String,
        cookies: Vec<String>,
    },
}

/// A blocking verdict, with what the 429 needs.
#[derive(Debug)]
pub struct Limited {
    pub rule: String,
    pub policy: String,
    pub retry_after: u64,
}

/// The decision for one request: the answer, and what the rest of the request needs from it.
pub struct Verdict {
    pub answer: Answer,
    pub notes: Notes,
}

/// What the decision leaves for the response, the metrics and the access log.
#[derive(Default)]
pub struct Notes {
    /// The client's address after trusted proxies (absent when the request was redirected
    /// before it was looked at).
    pub client_ip: Option<IpAddr>,
    /// Over TLS, or so a trusted proxy said: cookies are `Secure`, `X-Forwarded-Proto` is https.
    pub secure: bool,
    /// The room the request was routed to (an index into the policy's rooms).
    pub room: Option<usize>,
    pub decision: Option<Decision>,
    /// What the client asked for, when a room looked (its page answers in kind).
    pub wants: Option<Wants>,
    /// `Set-Cookie` to add to the forwarded response.
    pub set_cookie: Option<String>,
    /// `pow` rooms: removes the solution cookie once it has been used.
    pub clear_solution: Option<String>,
    /// Capacity rooms: the admitted user's place (what a revoke gives back).
    pub place: Option<Place>,
    /// The room's decision as the metrics count it.
    pub counted: Option<(usize, Counted)>,
    /// Each rule checked, with its verdict (for the metrics and the access log).
    pub rule_outcomes: SmallVec<[(usize, RuleOutcome); 4]>,
    /// Concurrency slots, given back when dropped.
    pub slots: SmallVec<[crate::inflight::Guard; 2]>,
    /// `jwt` rooms: the JWT the request brought or got, or why the one it brought was refused
    /// (boxed: nearly every request has none, and the notes stay small).
    pub jwt: Option<Box<crate::bearer::JwtNote>>,
    /// Rooms whose `enqueue` is on: the enqueue token the request brought was accepted, or why
    /// it (or its lack) was refused; `None` when it brought none and needed none.
    pub enqueue: Option<Result<(), enqueue::Refusal>>,
    /// Token buckets that let this through: (rule, remaining, seconds to reset), for the
    /// `RateLimit-Policy` and `RateLimit` headers of the response.
    pub quotas: SmallVec<[(usize, u64, u64); 2]>,
    /// A visitor this request let into its room: who, for the `admission.granted` event
    /// (boxed: one request in very many has one).
    pub admitted: Option<Box<Admitted>>,
}

/// A visitor let into a room by this request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Who they are, as the room knows them (their address, or the header's identity).
    pub identity: crate::identity::Identity,
    /// Fifo rooms with `api = true`: the queue number they were let in with.
    pub queue_number: Option<u64>,
    /// The priority lane they were let in from (`None`: `public`, or no lanes).
    pub lane: Option<std::sync::Arc<str>>,
}

/// A room decision as `vestibule_room_*` counts it.
#[derive(Clone, Copy, Debug)]
pub struct Counted {
    pub decision: Decision,
    pub admitted: bool,
    /// A visitor new to the room (see [`Outcome::arrived`]).
    pub arrived: bool,
    /// An admission from the line: how long they waited (see [`Outcome::waited_secs`]).
    pub waited_secs: Option<u64>,
    pub rejected: Option<Reject>,
    pub invitation: Option<Result<(), invite::Refusal>>,
    pub pow: PowCount,
}

impl From<&Outcome> for Counted {
    fn from(o: &Outcome) -> Counted {
        Counted {
            decision: o.decision,
            admitted: o.admitted,
            arrived: o.arrived,
            waited_secs: o.waited_secs.filter(|_| o.admitted),
            rejected: o.rejected,
            invitation: o.invitation,
            pow: o.pow,
        }
    }
}

/// What a decision reads besides the request: one generation of configuration, as the rooms
/// and rules built from it. The edge's snapshot lends it for each request; it is a few
/// references, made on the request path.
#[derive(Clone, Copy)]
pub struct Policy<'a> {
    pub config: &'a Config,
    /// The key ring; `None` when no room needs one.
    pub keys: Option<&'a KeyRing>,
    pub rooms: &'a RoomSet,
    pub rules: &'a RuleSet,
}

/// Decides one request: see the [module documentation](self) for the steps.
pub fn decide(req: &Request, policy: &Policy, now: Timestamp) -> Verdict {
    let mut notes = Notes::default();
    let answer = decide_into(req, policy, now, &mut notes);
    Verdict { answer, notes }
}

/// [`decide`], writing the notes into `notes` (a fresh [`Notes`]) in place: the proxy keeps them
/// in its per-request context, and this spares moving them there.
pub fn decide_into(req: &Request, policy: &Policy, now: Timestamp, notes: &mut Notes) -> Answer {
    if policy.config.server.redirect_to_https && !req.tls {
        if let Some(location) = https_location(req, policy) {
            return Answer::Redirect(location);
        }
    }
    let who = &policy.config.identity;
    let ClientAddress {
        ip: client_ip,
        peer,
        trusted,
    } = req.client;
    let header_identity = who
        .header_name()
        .and_then(|h| req.headers.get(h))
        .map(|v| v.as_bytes());
    let identity = who.identify(client_ip, peer, header_identity);
    notes.client_ip = Some(client_ip);
    notes.secure = req.tls || (trusted && forwarded_https(req.headers));
    let view = RequestView {
        identity: &identity,
        client_ip,
        host: &req.host,
        path: req.path.as_str(),
        method: req.method,
        headers: req.headers,
    };

    let jwks = policy.keys.is_some_and(|k| k.jwks().is_some());
    if let Some(endpoint) = api::route(&req.path, &policy.config.server.api_prefix, jwks) {
        if let Some(limited) = check_rules(policy, Scope::All, &view, now, notes) {
            return Answer::RateLimited(limited);
        }
        if endpoint == api::Endpoint::Oidc(api::OidcEndpoint::Authorize) {
            if let Some(answer) = oidc_authorize(req, policy, &identity, now, notes) {
                return answer;
            }
        }
        return Answer::Api { endpoint, identity };
    }
    let route = policy.rooms.route(&req.host, &req.path, client_ip);
    notes.room = route.map(|r| r.index);
    if let Some(limited) = check_rules(policy, Scope::All, &view, now, notes) {
        return Answer::RateLimited(limited);
    }
    if let Some(route) = route {
        if let Some(answer) = in_room(req, policy, route, &identity, now, notes) {
            return answer;
        }
    }
    match check_rules(policy, Scope::Origin, &view, now, notes) {
        Some(limited) => Answer::RateLimited(limited),
        None => Answer::Forward,
    }
}

/// The OpenID Provider's authorization endpoint: a request whose client and redirect URI are
/// registered (and otherwise well formed) is decided in the `[oidc]` room as a request for that
/// room would be, with the same cookies and pages: `Some` answer (its page) while the room holds
/// the visitor; `None` once it lets them in (noted as for any room), and for a request the edge
/// refuses ([`crate::oidc::authorize::check`]), which the room never sees.
fn oidc_authorize(
    req: &Request,
    policy: &Policy,
    identity: &crate::identity::Identity,
    now: Timestamp,
    notes: &mut Notes,
) -> Option<Answer> {
    let oidc = policy.config.oidc.as_ref()?;
    if !matches!(*req.method, http::Method::GET | http::Method::HEAD) {
        return None;
    }
    crate::oidc::authorize::check(req.uri.query(), oidc).ok()?;
    let (index, room) = policy
        .rooms
        .iter()
        .enumerate()
        .find(|(_, r)| r.name() == oidc.room)?;
    notes.room = Some(index);
    let route = Route {
        index,
        room,
        bypass: false,
    };
    in_room(req, policy, route, identity, now, notes)
}

/// Step 4, the room `route` names: `Some` answer when the room holds, invites or shows its
/// page; `None` when the request goes on to the origin (the room's cookie and JWT noted).
fn in_room(
    req: &Request,
    policy: &Policy,
    route: Route,
    identity: &crate::identity::Identity,
    now: Timestamp,
    notes: &mut Notes,
) -> Option<Answer> {
    let room = route.room;
    // ACME HTTP-01 validators must reach the origin during a long sale, or certificate
    // renewals fail: no room, challenge or invitation holds them (rate rules still do).
    let acme = policy.config.server.bypass_acme_challenge && req.path.is_under(ACME_CHALLENGE);
    let admission = match (policy.keys, route.bypass || acme || !room.config.enabled) {
        (Some(ring), false)
            if bearer::check(
                req.headers,
                room,
                ring,
                &policy.config.jwt,
                now,
                &mut notes.jwt,
            ) && bearer::admits_alone(req.headers, room) =>
        {
            Admission::Decided(Outcome::new(Decision::Allow, CookieAction::Keep), false)
        }
        (Some(ring), false) => match room_identity(req, room, ring, now, notes) {
            Ok(account) => {
                let who = account.as_ref().unwrap_or(identity);
                room_admission(req, room, ring, who, now, notes)
            }
            Err(refusal) => {
                notes.wants = Some(request_wants(req));
                return Some(Answer::EnqueueRefused(route.index, refusal));
            }
        },
        _ => Admission::Decided(Outcome::new(Decision::Bypass, CookieAction::Keep), false),
    };
    let (outcome, invited_by_link) = match admission {
        Admission::Decided(outcome, invited_by_link) => (outcome, invited_by_link),
        Admission::Held(outcome) => {
            notes.counted = Some((route.index, Counted::from(&outcome)));
            notes.decision = Some(outcome.decision);
            return Some(Answer::Held(room.retry_after()));
        }
    };
    notes.counted = Some((route.index, Counted::from(&outcome)));
    notes.decision = Some(outcome.decision);
    // Only for the `admission.granted` event: no allocation where no sink wants it (the
    // config in service keeps the sinks it started with, as the running sinks do).
    let wanted = || {
        policy
            .config
            .sinks
            .iter()
            .any(|s| s.wants("admission.granted", Some(room.name())))
    };
    if outcome.admitted && wanted() {
        notes.admitted = Some(Box::new(Admitted {
            identity: identity.clone(),
            queue_number: outcome.queue_number,
            lane: outcome.lane.clone(),
        }));
    }
    if invited_by_link && room.config.mode == RoomMode::Enforce {
        if let Some(location) = invitation_free_target(req.uri) {
            let cookies = set_cookie_value(room, &outcome.cookie, notes.secure);
            return Some(Answer::Invited {
                location,
                cookies: cookies.into_iter().collect(),
            });
        }
    }
    // A shadow room decides, sets its cookie and counts like any other, and forwards.
    if !outcome.decision.forwards() && room.config.mode == RoomMode::Enforce {
        if let Some(jwt) = notes.jwt.as_mut() {
            jwt.admission = None;
        }
        return Some(Answer::RoomPage(route.index, outcome));
    }
    notes.set_cookie = set_cookie_value(room, &outcome.cookie, notes.secure);
    notes.place = outcome.place;
    if let (Some(ring), Some(_)) = (policy.keys, &room.config.jwt) {
        let shown = room
            .numbered(now)
            .and_then(|q| outcome.queue_number.map(|n| q.shown(n)));
        let admitted = (outcome.decision == Decision::Allow, shown);
        let jwt = &policy.config.jwt;
        bearer::settle(admitted, room, ring, jwt, now, notes.secure, &mut notes.jwt);
    }
    None
}

/// What a room made of a request it looked at.
enum Admission {
    /// Its outcome, and whether an invitation's link got the visitor a place.
    Decided(Outcome, bool),
    /// A subresource of a held page, in a room that enforces: a short 503.
    Held(Outcome),
}

/// The account a room with `enqueue` on knows the request by (`None`: its address, or the
/// room has `enqueue` off), or why the room refuses it. A room in shadow mode counts a refusal
/// and goes on by address.
fn room_identity(
    req: &Request,
    room: &Room,
    ring: &crate::keys::KeyRing,
    now: Timestamp,
    notes: &mut Notes,
) -> Result<Option<crate::identity::Identity>, enqueue::Refusal> {
    let Some(settings) = &room.config.enqueue else {
        return Ok(None);
    };
    let token = enqueue::token_of(req.headers, req.uri.query());
    let cookies = cookie::values(
        req.headers
            .get_all(header::COOKIE)
            .iter()
            .map(|v| v.as_bytes()),
        &room.config.cookie.name,
    );
    let found = enqueue::identify(
        (settings.mode, &settings.key),
        room.name(),
        token,
        &cookies,
        ring,
        now,
    );
    match &found {
        Ok(_) if token.is_some() => notes.enqueue = Some(Ok(())),
        Ok(_) => {}
        Err(refusal) => notes.enqueue = Some(Err(*refusal)),
    }
    match found {
        Err(_) if room.config.mode == RoomMode::Shadow => Ok(None),
        found => found,
    }
}

/// What the client asked for: a page, JSON, or a subresource.
fn request_wants(req: &Request) -> Wants {
    wants::wants(
        req.headers.get(header::ACCEPT).map(|v| v.as_bytes()),
        req.headers.get(SEC_FETCH_MODE).map(|v| v.as_bytes()),
    )
}

/// The room's part: its cookies, what the client wants, the held subresource, and the room's
/// own decision with the request's solution and invitation.
fn room_admission(
    req: &Request,
    room: &Room,
    ring: &crate::keys::KeyRing,
    identity: &crate::identity::Identity,
    now: Timestamp,
    notes: &mut Notes,
) -> Admission {
    let cookies = cookie::values(
        req.headers
            .get_all(header::COOKIE)
            .iter()
            .map(|v| v.as_bytes()),
        &room.config.cookie.name,
    );
    let wants = request_wants(req);
    notes.wants = Some(wants);
    // A subresource of a held page (its favicon, say) neither joins the queue nor checks in:
    // only an admitted visitor's goes on.
    let holding =
        (wants == Wants::Subresource).then(|| room.holding(ring, identity, &cookies, now));
    match holding {
        Some(Some(Dec::Allow)) | None => {
            let solution = room
                .solution_cookie()
                .and_then(|name| solution_of(req.headers, name));
            let invitation = invitation_of(req);
            let brought = Brought {
                solution: solution.map(|(s, _)| s),
                invitation: invitation.as_ref().map(|(code, _)| code.as_bytes()),
            };
            let outcome = room.decide_bringing(ring, identity, &cookies, brought, now);
            let invited_by_link = invitation.is_some_and(|(_, link)| link)
                && wants == Wants::Page
                && matches!(*req.method, http::Method::GET | http::Method::HEAD)
                && outcome.invitation == Some(Ok(()))
                && matches!(outcome.cookie, CookieAction::Set(_));
            // A solution cookie, once used, is removed.
            if let (Some((_, Some(name))), true) = (solution, outcome.pow.solved) {
                notes.clear_solution = Some(cookie::delete_solution(name));
            }
            Admission::Decided(outcome, invited_by_link)
        }
        Some(held) => {
            let decision = if held.is_some() {
                Decision::Wait
            } else {
                Decision::Anon
            };
            let outcome = Outcome::new(decision, CookieAction::Keep);
            if room.config.mode == RoomMode::Shadow {
                // Counted as held, and forwarded.
                Admission::Decided(outcome, false)
            } else {
                Admission::Held(outcome)
            }
        }
    }
}

/// Runs the rules of one scope, notes their verdicts, concurrency slots and token-bucket
/// headers, and returns the blocking verdict if there is one.
fn check_rules(
    policy: &Policy,
    scope: Scope,
    view: &RequestView,
    now: Timestamp,
    notes: &mut Notes,
) -> Option<Limited> {
    if !policy.rules.has_scope(scope) {
        return None;
    }
    let mut checks = Checks::new();
    let blocked = policy.rules.check(scope, view, now, &mut checks);
    let mut limited = None;
    for (i, checked) in checks.into_iter().enumerate() {
        let Some(rule) = policy.rules.get(checked.rule) else {
            continue;
        };
        let check = checked.check;
        notes.rule_outcomes.push((checked.rule, check.outcome));
        if Some(i) == blocked {
            limited = Some(Limited {
                rule: rule.name().to_owned(),
                policy: rule.policy().to_owned(),
                retry_after: check.retry_after,
            });
        } else if rule.is_token_bucket() && check.outcome == RuleOutcome::Pass {
            notes
                .quotas
                .push((checked.rule, check.remaining, check.reset));
        }
        if let Some(guard) = check.guard {
            notes.slots.push(guard);
        }
    }
    limited
}

/// Where ACME HTTP-01 validators fetch their tokens (RFC 8555 §8.3).
const ACME_CHALLENGE: &str = "/.well-known/acme-challenge/";

/// Where `redirect_to_https` sends a plain request: the same host, path and query on the first
/// TLS listener's port. `None` for ACME HTTP-01 challenges (proxied, so certificate renewals
/// keep working) and for requests a trusted proxy says arrived over https.
fn https_location(req: &Request, policy: &Policy) -> Option<String> {
    if req.path.is_under(ACME_CHALLENGE) {
        return None;
    }
    if policy.config.identity.is_trusted(req.client.peer) && forwarded_https(req.headers) {
        return None;
    }
    let host = &req.host;
    if host.is_empty() {
        return None;
    }
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let port = policy
        .config
        .server
        .tls_listen
        .first()
        .map_or(443, |a| a.port());
    let target = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let target = if target.starts_with('/') { target } else { "/" };
    Some(if port == 443 {
        format!("https://{host}{target}")
    } else {
        format!("https://{host}:{port}{target}")
    })
}

/// `X-Forwarded-Proto: https` (believed only from a trusted proxy, checked by the caller).
fn forwarded_https(headers: &http::HeaderMap) -> bool {
    headers
        .get(X_FORWARDED_PROTO)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

/// The `Set-Cookie` value of a room's cookie action.
pub fn set_cookie_value(room: &Room, action: &CookieAction, secure: bool) -> Option<String> {
    match action {
        CookieAction::Keep => None,
        CookieAction::Set(value) => Some(cookie::set(&room.config.cookie, value, secure)),
        CookieAction::Delete => Some(cookie::delete(&room.config.cookie, secure)),
    }
}

/// A `pow` room's solution: the `Vestibule-Solution` header, else the solution
/// cookie `cookie` (whose name comes back with it, to remove it once used).
fn solution_of<'r, 'c>(
    headers: &'r http::HeaderMap,
    cookie: &'c str,
) -> Option<(&'r [u8], Option<&'c str>)> {
    if let Some(v) = headers.get(VESTIBULE_SOLUTION) {
        return Some((v.as_bytes(), None));
    }
    let values = cookie::values(
        headers.get_all(header::COOKIE).iter().map(|v| v.as_bytes()),
        cookie,
    );
    values.first().map(|v| (*v, Some(cookie)))
}

/// An invitation: the `Vestibule-Invite` header, else the link parameter
/// `vestibule_invite` (percent-decoded); and whether it came by the link.
fn invitation_of<'r>(req: &Request<'r>) -> Option<(Cow<'r, str>, bool)> {
    if let Some(v) = req.headers.get(VESTIBULE_INVITE) {
        let code = std::str::from_utf8(v.as_bytes()).unwrap_or("\u{fffd}");
        return Some((Cow::Borrowed(code), false));
    }
    invite::from_query(req.uri.query()?).map(|code| (code, true))
}

/// The request's path and query without the invitation link parameter, when it had one.
fn invitation_free_target(uri: &http::Uri) -> Option<String> {
    let query = invite::strip_from_query(uri.query()?)?;
    let mut target = uri.path().to_owned();
    if !query.is_empty() {
        target.push('?');
        target.push_str(&query);
    }
    Some(target)
}

/// The request's target without the invitation link parameter, when it had one: the origin
/// never sees an invitation.
pub fn without_invitation(uri: &http::Uri) -> Option<http::Uri> {
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(invitation_free_target(uri)?.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

/// The request's target without the enqueue token parameter ([`enqueue::PARAMETER`]), when it
/// had one: the origin never sees a token.
pub fn without_enqueue_token(uri: &http::Uri) -> Option<http::Uri> {
    let query = enqueue::strip_from_query(uri.query()?)?;
    let mut target = uri.path().to_owned();
    if !query.is_empty() {
        target.push('?');
        target.push_str(&query);
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(target.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: http::HeaderName = http::HeaderName::from_static("x-forwarded-proto");
const VESTIBULE_SOLUTION: http::HeaderName = http::HeaderName::from_static("vestibule-solution");
const VESTIBULE_INVITE: http::HeaderName = http::HeaderName::from_static("vestibule-invite");
const SEC_FETCH_MODE: http::HeaderName = http::HeaderName::from_static("sec-fetch-mode");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{testing::Bare, Config};
    use crate::keys::testing::ring;
    use crate::keys::KeyRing;
    use crate::ratelimit::{Rule, RuleStates};
    use crate::room::Room;
    use crate::store::{local::LocalStore, CounterStore};
    use std::sync::Arc;

    /// One generation of configuration, built as the edge's snapshot builds it (without pages,
    /// which the decision never reads).
    struct Built {
        config: Config,
        keys: KeyRing,
        rooms: RoomSet,
        rules: RuleSet,
    }

    impl Built {
        fn policy(&self) -> Policy<'_> {
            Policy {
                config: &self.config,
                keys: Some(&self.keys),
                rooms: &self.rooms,
                rules: &self.rules,
            }
        }
    }

    /// `rooms_and_rules` behind one origin, with the test key ring.
    fn snapshot(server: &str, rooms_and_rules: &str) -> Built {
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:1\"]\n{server}\n[upstream]\npeers = [\"127.0.0.1:2\"]\nhealth_check = \"0s\"\n{rooms_and_rules}"
        );
        let config = Config::parse(&text, std::path::Path::new("/etc/v/vestibule.toml"), &Bare)
            .unwrap_or_else(|e| panic!("{e}"));
        let store: Arc<dyn CounterStore> = Arc::new(LocalStore::new());
        let states = RuleStates::default();
        let rooms = RoomSet::new(
            config
                .rooms
                .iter()
                .map(|r| Room::new(r.clone(), &store))
                .collect(),
        );
        let rules = RuleSet::new(
            config
                .rate_limits
                .iter()
                .map(|r| Rule::new(r.clone(), &states, &store))
                .collect(),
        );
        Built {
            config,
            keys: ring(),
            rooms,
            rules,
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_millis(1_800_000_000_000)
    }

    /// A request from `192.0.2.10` for `target` on `shop.example`, with `headers`.
    struct Sent {
        method: http::Method,
        uri: http::Uri,
        headers: http::HeaderMap,
        tls: bool,
    }

    fn get(target: &str, headers: &[(&str, &str)]) -> Sent {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        Sent {
            method: http::Method::GET,
            uri: target.parse().unwrap(),
            headers: map,
            tls: false,
        }
    }

    fn run(sent: &Sent, snapshot: &Built, at: Timestamp) -> Verdict {
        let peer: IpAddr = "192.0.2.10".parse().unwrap();
        let request = Request {
            method: &sent.method,
            uri: &sent.uri,
            headers: &sent.headers,
            host: Cow::Borrowed("shop.example"),
            path: crate::path::normalize(sent.uri.path()).unwrap(),
            client: client_address(&sent.headers, &snapshot.config.identity, peer),
            tls: sent.tls,
        };
        decide(&request, &snapshot.policy(), at)
    }

    /// A held `fifo` room whose `enqueue` is `required`, behind a trusted proxy (the tests pick
    /// the client's address by `X-Forwarded-For`).
    fn enqueue_room() -> Built {
        use crate::enqueue::{testing::SECRET, EnqueueKey, Mode};
        let mut built = snapshot(
            "",
            &format!("[identity]\ntrusted_proxies = [\"192.0.2.10/32\"]\n{HELD_ROOM}"),
        );
        let mut config = built.config.rooms[0].clone();
        config.enqueue = Some(crate::config::RoomEnqueue {
            mode: Mode::Required,
            key: EnqueueKey::from_bytes(SECRET).unwrap(),
            key_file: "site.key".into(),
        });
        let store: Arc<dyn CounterStore> = Arc::new(LocalStore::new());
        built.rooms = RoomSet::new(vec![Room::new(config, &store)]);
        built
    }

    /// An enqueue token for `account` in the room `sale`, valid for a minute from [`now`].
    fn enqueue_token(account: &str) -> String {
        crate::enqueue::testing::hs256(&serde_json::json!({
            "sub": account, "aud": "sale", "exp": now().secs() + 60,
        }))
    }

    /// The room cookie a page answer sets (`name=value`), and its decision.
    fn placed(v: &Verdict) -> (Decision, Option<String>) {
        let Answer::RoomPage(0, outcome) = &v.answer else {
            panic!("{:?}", v.answer);
        };
        let cookie = match &outcome.cookie {
            CookieAction::Set(value) => Some(format!("waiting_room={value}")),
            _ => None,
        };
        (outcome.decision, cookie)
    }

    #[test]
    fn an_enqueue_room_binds_places_to_accounts_not_addresses() {
        use crate::enqueue::Refusal;
        let snap = enqueue_room();
        fn from<'a>(ip: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
            let mut headers = vec![("accept", "text/html"), ("x-forwarded-for", ip)];
            headers.extend_from_slice(extra);
            headers
        }
        // No token: refused, as a page.
        let v = run(&get("/", &from("198.51.100.1", &[])), &snap, now());
        assert!(
            matches!(v.answer, Answer::EnqueueRefused(0, Refusal::Missing)),
            "{:?}",
            v.answer
        );
        assert_eq!(v.notes.wants, Some(Wants::Page));
        assert_eq!(v.notes.enqueue, Some(Err(Refusal::Missing)));
        // Alice joins from one address with her token in the link...
        let target = format!("/?vestibule_enqueue={}", enqueue_token("alice"));
        let v = run(&get(&target, &from("198.51.100.1", &[])), &snap, now());
        assert_eq!(v.notes.enqueue, Some(Ok(())));
        let (decision, alice) = placed(&v);
        assert_eq!(decision, Decision::Anon);
        let alice = alice.expect("a place");
        assert!(alice.contains("uid=%_acct:"), "{alice}");
        // ...and her cookie keeps the place from another address, without the token.
        let v = run(
            &get("/", &from("203.0.113.9", &[("cookie", &alice)])),
            &snap,
            now(),
        );
        assert_eq!(placed(&v), (Decision::Wait, None));
        // So does her token from a third address, with no cookie: the same place.
        let header = enqueue_token("alice");
        let v = run(
            &get("/", &from("192.0.2.77", &[("vestibule-enqueue", &header)])),
            &snap,
            now(),
        );
        let (_, again) = placed(&v);
        let uid = |c: &str| {
            c.split('&')
                .find(|f| f.starts_with("uid="))
                .unwrap()
                .to_owned()
        };
        assert_eq!(uid(&again.unwrap()), uid(&alice));
        // Bob, behind Alice's first address, gets a place of his own; Alice's cookie beside his
        // token is not his.
        let bob = enqueue_token("bob");
        let v = run(
            &get(
                "/",
                &from(
                    "198.51.100.1",
                    &[("vestibule-enqueue", &bob), ("cookie", &alice)],
                ),
            ),
            &snap,
            now(),
        );
        let Answer::RoomPage(0, outcome) = &v.answer else {
            panic!("{:?}", v.answer);
        };
        assert!(outcome.rejected.is_some());
        let (decision, bobs) = placed(&v);
        assert_eq!(decision, Decision::Anon);
        assert_ne!(uid(&bobs.unwrap()), uid(&alice));
        // A bad token is refused, never ignored, even beside a good cookie; JSON clients too.
        let v = run(
            &get(
                "/",
                &[
                    ("accept", "application/json"),
                    ("vestibule-enqueue", "x.y.z"),
                    ("cookie", &alice),
                ],
            ),
            &snap,
            now(),
        );
        assert!(
            matches!(v.answer, Answer::EnqueueRefused(0, Refusal::Malformed)),
            "{:?}",
            v.answer
        );
        assert_eq!(v.notes.wants, Some(Wants::Json));
    }

    #[test]
    fn the_enqueue_parameter_never_reaches_the_origin() {
        let strip = |t: &str| without_enqueue_token(&t.parse().unwrap()).map(|u| u.to_string());
        assert_eq!(strip("/a?b=1"), None);
        assert_eq!(strip("/a?vestibule_enqueue=x.y.z").as_deref(), Some("/a"));
        assert_eq!(
            strip("/a?b=1&vestibule_enqueue=x.y.z&c=2").as_deref(),
            Some("/a?b=1&c=2")
        );
    }

    const HELD_ROOM: &str = "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nbypass_paths = [\"/static/\"]\nadmission = \"fifo\"\nnew_users_per_minute = 1\nqueue_all = true\n";

    #[test]
    fn a_held_page_shows_the_room_and_a_held_subresource_gets_a_short_503() {
        let snap = snapshot("", HELD_ROOM);
        let page = run(&get("/tickets", &[("accept", "text/html")]), &snap, now());
        let Answer::RoomPage(0, outcome) = &page.answer else {
            panic!("{:?}", page.answer);
        };
        assert!(!outcome.decision.forwards(), "{:?}", outcome.decision);
        assert_eq!(page.notes.room, Some(0));
        assert_eq!(page.notes.wants, Some(Wants::Page));
        assert_eq!(page.notes.counted.map(|(room, _)| room), Some(0));
        assert!(
            page.notes.set_cookie.is_none(),
            "a page's cookie is written with the page"
        );

        let icon = run(
            &get(
                "/favicon.ico",
                &[("sec-fetch-mode", "no-cors"), ("accept", "image/*")],
            ),
            &snap,
            now(),
        );
        assert!(
            matches!(icon.answer, Answer::Held(s) if s > 0),
            "{:?}",
            icon.answer
        );
        assert_eq!(icon.notes.decision, Some(Decision::Anon));
        assert_eq!(
            icon.notes.counted.map(|(_, c)| c.decision),
            Some(Decision::Anon)
        );
    }

    #[test]
    fn a_bypass_path_forwards_and_counts_as_bypass() {
        let snap = snapshot("", HELD_ROOM);
        let v = run(&get("/static/app.css", &[]), &snap, now());
        assert!(matches!(v.answer, Answer::Forward), "{:?}", v.answer);
        assert_eq!(v.notes.decision, Some(Decision::Bypass));
        assert!(v.notes.set_cookie.is_none());
    }

    #[test]
    fn a_shadow_room_decides_sets_its_cookie_and_forwards() {
        let shadow = format!("{HELD_ROOM}mode = \"shadow\"\n");
        let snap = snapshot("", &shadow);
        let v = run(&get("/tickets", &[("accept", "text/html")]), &snap, now());
        assert!(matches!(v.answer, Answer::Forward), "{:?}", v.answer);
        let decision = v.notes.decision.unwrap();
        assert!(!decision.forwards(), "counted as held: {decision:?}");
        let cookie = v.notes.set_cookie.as_deref().unwrap_or_default();
        assert!(cookie.starts_with("waiting_room="), "{cookie}");

        // A held subresource is counted as held, and forwarded too.
        let icon = run(
            &get("/favicon.ico", &[("sec-fetch-mode", "no-cors")]),
            &snap,
            now(),
        );
        assert!(matches!(icon.answer, Answer::Forward), "{:?}", icon.answer);
        assert_eq!(icon.notes.decision, Some(Decision::Anon));
    }

    #[test]
    fn a_rule_of_scope_all_blocks_before_the_room_and_origin_rules_after_it() {
        let rules = "[[rate_limit]]\nname = \"burst\"\nkey = [\"client_ip\"]\nalgorithm = \"token_bucket\"\nlimit = 1\nperiod = \"60s\"\npenalty = \"0s\"\nscope = \"all\"\n";
        let snap = snapshot("", &format!("{HELD_ROOM}{rules}"));
        let first = run(&get("/static/a.css", &[]), &snap, now());
        assert!(
            matches!(first.answer, Answer::Forward),
            "{:?}",
            first.answer
        );
        assert_eq!(
            first.notes.quotas.len(),
            1,
            "the bucket's headers go on the response"
        );
        let second = run(&get("/tickets", &[]), &snap, now());
        let Answer::RateLimited(limited) = &second.answer else {
            panic!("{:?}", second.answer);
        };
        assert_eq!(limited.rule, "burst");
        assert!(limited.retry_after > 0);
        assert_eq!(second.notes.rule_outcomes.len(), 1);
        assert!(second.notes.counted.is_none(), "the room never saw it");

        // Scope `origin`: only what would be forwarded is counted, after the room.
        let origin = rules.replace("scope = \"all\"", "scope = \"origin\"");
        let snap = snapshot("", &format!("{HELD_ROOM}{origin}"));
        for _ in 0..3 {
            let held = run(&get("/tickets", &[]), &snap, now());
            assert!(
                matches!(held.answer, Answer::RoomPage(..)),
                "{:?}",
                held.answer
            );
            assert!(held.notes.rule_outcomes.is_empty());
        }
        let passed = run(&get("/static/a.css", &[]), &snap, now());
        assert!(
            matches!(passed.answer, Answer::Forward),
            "{:?}",
            passed.answer
        );
        let blocked = run(&get("/static/b.css", &[]), &snap, now());
        assert!(
            matches!(blocked.answer, Answer::RateLimited(_)),
            "{:?}",
            blocked.answer
        );
    }

    #[test]
    fn plain_requests_go_to_https_except_acme_challenges() {
        // The decision reads only the listeners; the certificates are the edge's to load.
        let tls = "[tls]\ncertificates = [{ cert = \"c.pem\", key = \"k.pem\" }]\n";
        let snap = snapshot(
            "redirect_to_https = true\ntls_listen = [\"127.0.0.1:3\"]\n",
            tls,
        );
        let v = run(&get("/a?b=1", &[]), &snap, now());
        let Answer::Redirect(location) = &v.answer else {
            panic!("{:?}", v.answer);
        };
        assert_eq!(location, "https://shop.example:3/a?b=1");
        let acme = run(&get("/.well-known/acme-challenge/x", &[]), &snap, now());
        assert!(matches!(acme.answer, Answer::Forward), "{:?}", acme.answer);
        let mut tls = get("/a", &[]);
        tls.tls = true;
        let v = run(&tls, &snap, now());
        assert!(matches!(v.answer, Answer::Forward), "{:?}", v.answer);
        assert!(v.notes.secure);
    }

    #[test]
    fn an_admitted_visitor_forwards_with_its_cookie_renewed_or_kept() {
        let open = HELD_ROOM
            .replace("queue_all = true\n", "")
            .replace("new_users_per_minute = 1", "new_users_per_minute = 100");
        // Without a sink that wants it, nobody is named for an `admission.granted` event.
        let first = run(
            &get("/tickets", &[("accept", "text/html")]),
            &snapshot("", &open),
            now(),
        );
        assert!(matches!(first.answer, Answer::Forward));
        assert!(first.notes.admitted.is_none());
        let open = format!(
            "{open}[[events.sink]]\nname = \"archive\"\nkind = \"file\"\ntypes = [\"admission.granted\"]\n"
        );
        let snap = snapshot("", &open);
        let first = run(&get("/tickets", &[("accept", "text/html")]), &snap, now());
        assert!(
            matches!(first.answer, Answer::Forward),
            "{:?}",
            first.answer
        );
        assert!(first.notes.place.is_some(), "a capacity room's place");
        // Let in by this request: who, for the `admission.granted` event.
        let admitted = first.notes.admitted.as_deref().expect("admitted now");
        assert!(!admitted.identity.as_str().is_empty());
        let set = first.notes.set_cookie.clone().unwrap();
        let value = set.split(';').next().unwrap().to_owned();
        let again = run(
            &get("/tickets", &[("accept", "text/html"), ("cookie", &value)]),
            &snap,
            now(),
        );
        assert!(
            matches!(again.answer, Answer::Forward),
            "{:?}",
            again.answer
        );
        assert_eq!(again.notes.decision, Some(Decision::Allow));
        assert!(
            again.notes.admitted.is_none(),
            "admitted once, not at each request"
        );
    }

    fn jwt(v: &Verdict) -> crate::bearer::JwtNote {
        v.notes.jwt.as_deref().cloned().unwrap_or_default()
    }

    /// A `jwt` room gives a JWT to a visitor it lets in (and the origin gets it), takes a valid
    /// one as admission, and counts a refused one's reason before deciding as without it.
    #[test]
    fn a_jwt_room_gives_jwts_and_takes_valid_ones() {
        use crate::jwt::testing::ES256_PEM;
        let mut built = snapshot(
            "",
            "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nallow_percentage = 100\njwt = true\n\
             [[room]]\nname = \"app\"\npaths = [\"/app\"]\ncookie_name = \"app\"\nqueue_all = true\njwt = true\n",
        );
        built.keys = KeyRing::parse_with(
            &format!(
                "active = \"key1\"\n[ring]\nkey1 = \"{}\"\n[[jwt_key]]\nkid = \"k1\"\nalgorithm = \"ES256\"\nprivate_key = \"k1.pem\"\n",
                crate::keys::testing::KEY1
            ),
            std::path::Path::new("keys.toml"),
            &|_| Ok(ES256_PEM.to_owned()),
        )
        .unwrap();
        let v = run(&get("/", &[]), &built, now());
        assert!(matches!(v.answer, Answer::Forward), "{:?}", v.answer);
        let cookie = jwt(&v).set_cookie.clone().expect("a JWT cookie");
        assert!(cookie.starts_with("waiting_room_jwt=ey"), "{cookie}");
        let sale_jwt = jwt(&v).admission.clone().unwrap();
        assert!(cookie.contains(&sale_jwt));
        // Brought back, it is not signed again.
        let v = run(
            &get("/", &[("cookie", &format!("waiting_room_jwt={sale_jwt}"))]),
            &built,
            now(),
        );
        assert_eq!(jwt(&v).admission.as_deref(), Some(sale_jwt.as_str()));
        assert!(jwt(&v).set_cookie.is_none());

        // `app` holds everyone: a JWT for it gets in, the sale's does not.
        let claims = crate::jwt::Claims {
            iss: "vestibule".into(),
            aud: "app".into(),
            sub: "s".into(),
            iat: now().secs(),
            nbf: now().secs(),
            exp: now().secs() + 60,
            jti: "j".into(),
            room: "app".into(),
            queue_number: None,
            event: None,
        };
        let app_jwt = built.keys.jwt().sign(&claims);
        let bearer = format!("Bearer {app_jwt}");
        let v = run(&get("/app/x", &[("authorization", &bearer)]), &built, now());
        assert!(matches!(v.answer, Answer::Forward), "{:?}", v.answer);
        assert_eq!(jwt(&v).admission.as_deref(), Some(app_jwt.as_str()));
        // With the room's own cookie (a browser's), the room decides: `app` holds it, and the
        // origin is told of no JWT.
        let v = run(
            &get(
                "/app/x",
                &[("authorization", &bearer), ("cookie", "app=whatever")],
            ),
            &built,
            now(),
        );
        assert!(matches!(v.answer, Answer::RoomPage(..)), "{:?}", v.answer);
        assert!(jwt(&v).admission.is_none());
        let bearer = format!("Bearer {sale_jwt}");
        let v = run(&get("/app/x", &[("authorization", &bearer)]), &built, now());
        assert!(matches!(v.answer, Answer::RoomPage(..)), "{:?}", v.answer);
        assert_eq!(jwt(&v).refused, Some(crate::jwt::Refusal::WrongAudience));
        assert!(jwt(&v).admission.is_none());
        // Expired by the decision's clock.
        let later = Timestamp::from_secs(now().secs() + 61);
        let v = run(
            &get("/app/x", &[("authorization", &format!("Bearer {app_jwt}"))]),
            &built,
            later,
        );
        assert_eq!(jwt(&v).refused, Some(crate::jwt::Refusal::Expired));
    }

    /// A sign-in at the OpenID Provider waits in the `[oidc]` room like a request for it, and
    /// is answered by the API once the room lets the visitor in; an unregistered client never
    /// reaches the room.
    #[test]
    fn an_oidc_sign_in_waits_in_its_room() {
        let oidc = "[oidc]\nenabled = true\nissuer = \"https://q.example/.vestibule/oidc\"\nroom = \"sale\"\n\
                    clients = [{ id = \"app\", secret = \"0123456789abcdef\", redirect_uris = [\"https://app.example/cb\"] }]\n";
        let room = "[[room]]\nname = \"sale\"\npaths = [\"/shop/\"]\nadmission = \"fifo\"\nnew_users_per_minute = 100\napi = true\n";
        let authorize = "/.vestibule/oidc/authorize?response_type=code&client_id=app\
                         &redirect_uri=https%3A%2F%2Fapp.example%2Fcb&scope=openid\
                         &code_challenge=GzvTOs9KrAsb2JgyJA1RSaH5OuAKgJJi-K-8XM8CVLo\
                         &code_challenge_method=S256";
        let html = [("accept", "text/html")];
        let held = snapshot("", &format!("{}queue_all = true\n{oidc}", room));
        let v = run(&get(authorize, &html), &held, now());
        assert!(matches!(v.answer, Answer::RoomPage(0, _)), "{:?}", v.answer);
        assert_eq!(v.notes.counted.map(|(room, _)| room), Some(0));

        let open = snapshot("", &format!("{room}{oidc}"));
        let v = run(&get(authorize, &html), &open, now());
        assert!(
            matches!(
                &v.answer,
                Answer::Api {
                    endpoint: api::Endpoint::Oidc(api::OidcEndpoint::Authorize),
                    ..
                }
            ),
            "{:?}",
            v.answer
        );
        let cookie = v.notes.set_cookie.as_deref().unwrap_or_default();
        assert!(
            cookie.starts_with("waiting_room="),
            "the room's place: {cookie}"
        );

        // The room never sees a client it does not know: the API refuses it.
        let stranger = authorize.replace("client_id=app", "client_id=other");
        let v = run(&get(&stranger, &html), &held, now());
        assert!(matches!(v.answer, Answer::Api { .. }), "{:?}", v.answer);
        assert!(v.notes.counted.is_none());
    }
}
