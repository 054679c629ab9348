//! The admin endpoint: `/metrics`, `/healthz`, `/readyz`, `/status`, the operator actions,
//! the audit log and the console.
//!
//! It binds to loopback by default; config validation refuses any other address without an
//! operator. Once any operator is configured (`[admin] operators`, or the plain `token` as the
//! operator `admin`), every path but the probes (`/healthz`, `/readyz`) and the console's login
//! form needs one: a bearer token, or the console's session cookie. A request that changes
//! something by session also needs the session's CSRF token and must not come from another
//! site; a viewer changes nothing. `/status` shows settings and live figures, never a secret:
//! key ids but not keys, whether a token is set but not its value.

use std::sync::Arc;

use async_trait::async_trait;
use http::{header, Response, StatusCode};
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use serde_json::{json, Value};

use crate::app::App;
use crate::config::event::rfc3339;
use crate::config::{Action as RuleAction, Admission, Algorithm, KeyPart, Role, Scope};
use crate::controls::{Action, Controls};
use crate::ratelimit::Rule;
use crate::room::Room;
use crate::snapshot::Snapshot;

pub(crate) mod audit;
pub(crate) mod auth;
mod console;
pub mod parse;
mod queue;

use auth::{Via, Who};

pub(crate) struct Admin {
    app: Arc<App>,
    sessions: auth::Sessions,
    streams: console::Streams,
    audit: audit::Audit,
    /// The console feeds' shared figures, by (second, config generation).
    feed_cache: std::sync::Mutex<Option<FeedState>>,
}

/// The console feeds' shared figures and the (second, config generation) they are of.
type FeedState = ((u64, u64), Arc<Value>);

/// Who acts, and from where: what the audit log records besides the action.
pub(crate) struct Actor<'a> {
    pub who: &'a Who,
    pub source: String,
}

impl Actor<'_> {
    fn via(&self, session: &ServerSession) -> &'static str {
        match self.who.via {
            Via::Session { .. } => "console",
            Via::Open => "api",
            Via::Bearer { .. } => {
                let ua = session
                    .req_header()
                    .headers
                    .get(header::USER_AGENT)
                    .map(|v| v.as_bytes())
                    .unwrap_or_default();
                if ua.starts_with(b"vestibule-ctl/") {
                    "ctl"
                } else {
                    "api"
                }
            }
        }
    }
}

impl Admin {
    pub fn new(app: Arc<App>) -> Admin {
        Admin {
            app,
            sessions: auth::Sessions::default(),
            streams: console::Streams::default(),
            audit: audit::Audit::default(),
            feed_cache: std::sync::Mutex::new(None),
        }
    }

    /// Counts a refused request by `reason` (`vestibule_admin_refused_total`).
    fn refused(&self, reason: &str) {
        self.app
            .metrics
            .admin_refused
            .with_label_values(&[reason])
            .inc();
    }

    /// Counts an action (`vestibule_admin_actions_total`) and logs it.
    fn count(&self, actor: &Actor<'_>, room: &str, action: &str, detail: &str) {
        self.app
            .metrics
            .admin_actions
            .with_label_values(&[room, action, &actor.who.name])
            .inc();
        log::info!(
            "room {room}: operator action {action} by {} from {}: {detail}",
            actor.who.name,
            actor.source
        );
    }

    /// Records an action: the audit line (fsynced), the metric and the log line. A record that
    /// cannot be written is logged as an error; the action stands (pausing a sale must not wait
    /// for a disk).
    pub(crate) fn record(
        &self,
        session: &ServerSession,
        actor: &Actor<'_>,
        room: &str,
        action: &str,
        (args, before, after): (Value, Value, Value),
        detail: &str,
    ) -> bool {
        let snapshot = self.app.snapshot();
        self.count(actor, room, action, detail);
        let record = audit::Record {
            operator: actor.who.name.clone(),
            source: actor.source.clone(),
            via: actor.via(session),
            room: room.to_owned(),
            action: action.to_owned(),
            args,
            before,
            after,
        };
        let path = &snapshot.config.admin.audit_file;
        let time = crate::time::now().rfc3339();
        self.app.events.operator_action(room, &record.line(&time));
        match self.audit.append(path, &time, &record) {
            Ok(_) => true,
            Err(e) => {
                self.app.metrics.audit_errors.inc();
                log::error!("room {room}: the action {action} is not in the audit log: {e}");
                false
            }
        }
    }

    /// An operator action: `/rooms/<room>/<action>`.
    async fn action(
        &self,
        session: &mut ServerSession,
        snapshot: &Snapshot,
        actor: Option<Actor<'_>>,
    ) -> Response<Vec<u8>> {
        let Some(actor) = actor else {
            return text(
                StatusCode::FORBIDDEN,
                "operator actions need an operator: set [admin] token or [admin] operators in the config\n",
            );
        };
        let req = session.req_header();
        let method = req.method.clone();
        let path = req.uri.path().to_owned();
        let query = req.uri.query().unwrap_or("").to_owned();
        let mut parts = path["/rooms/".len()..].splitn(2, '/');
        let (name, what) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let Some(room) = snapshot.rooms.iter().find(|r| r.name() == name) else {
            return problem(
                StatusCode::NOT_FOUND,
                &format!("no room is named \"{}\"", name.escape_default()),
            );
        };
        let body = match read_body(session, crate::api::MAX_BODY).await {
            Ok(body) => body,
            Err(e) => return problem(StatusCode::BAD_REQUEST, &e.to_string()),
        };
        if let Some((status, mut body, done)) = queue::answer(
            &self.app,
            room,
            (&method, what, &query, &body),
            snapshot.keys.as_ref(),
            &snapshot.config.jwt.issuer,
        ) {
            if let Some(done) = done {
                let record = (done.args, done.before, done.after);
                if done.audited {
                    let audited = self.record(
                        session,
                        &actor,
                        room.name(),
                        done.action,
                        record,
                        &done.detail,
                    );
                    body["operator"] = json!(actor.who.name);
                    body["audited"] = json!(audited);
                } else {
                    self.count(&actor, room.name(), done.action, &done.detail);
                }
            }
            return reply(
                status,
                "application/json",
                serde_json::to_vec(&body).unwrap_or_default(),
            );
        }
        let pace_key = match &room.config.admission {
            Admission::Lottery { .. } => crate::controls::PaceKey::AllowPercentage,
            Admission::Capacity(_) => crate::controls::PaceKey::NewUsersPerMinute,
        };
        let action = match parse::parse_action(&method, what, &query, &body, pace_key) {
            Ok(action) => action,
            Err((status, message)) => return problem(status, &message),
        };
        let now = crate::time::now();
        let store = &*self.app.state.store;
        let controls = &self.app.state.controls;
        let (before, overrides, written) =
            controls.act(room.name(), &action, &actor.who.name, store, now);
        let detail = match &action {
            Action::Admit(n) => format!("{n} more let in"),
            _ => crate::controls::describe(&overrides),
        };
        let audited = self.record(
            session,
            &actor,
            room.name(),
            action.label(),
            (action_args(&action), json!(before), json!(overrides)),
            &detail,
        );
        if let Err(e) = &written {
            log::error!(
                "room {}: operator overrides apply but are not kept across a restart: {e}",
                room.name()
            );
        }
        let body = json!({
            "room": room.name(),
            "action": action.label(),
            "operator": actor.who.name,
            "overrides": overrides,
            "sold_out": room.sold_out(),
            "paused": room.controls().held().paused,
            "admit_grants_left": crate::controls::grants_left(store, room.name(), now),
            "persisted": written.is_ok(),
            "audited": audited,
        });
        reply(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec_pretty(&body).unwrap_or_default(),
        )
    }

    /// `[[events.sink]]`: each sink's kind and backlog (never a URL or a key).
    fn events_status(&self, config: &crate::config::Config) -> Value {
        let m = &self.app.metrics;
        Value::Array(
            config
                .sinks
                .iter()
                .map(|s| {
                    let name = [s.name.as_str()];
                    json!({
                        "sink": s.name,
                        "kind": s.kind(),
                        "spooled": m.events_spooled.get_metric_with_label_values(&name).map_or(0, |g| g.get()),
                        "oldest_spooled_seconds": m
                            .events_oldest_spooled
                            .get_metric_with_label_values(&name)
                            .map_or(0.0, |g| g.get()),
                    })
                })
                .collect(),
        )
    }

    fn status(&self, snapshot: &Snapshot) -> Value {
        let now = crate::time::now();
        let config = &snapshot.config;
        let upstream = &snapshot.upstream;
        json!({
            "generation": snapshot.generation,
            "loaded_at": snapshot.loaded_at.rfc3339(),
            "started_at": self.app.started_at.rfc3339(),
            "config_file": self.app.config_path().display().to_string(),
            "last_reload_error": self.app.last_reload_error().map(|e| json!({
                "message": e.message,
                "at": e.at.rfc3339(),
            })),
            "warnings": snapshot.warnings,
            "upstream": {
                "tls": config.upstream.tls,
                "healthy": upstream.healthy_count(),
                "peers": upstream.peer_health().iter().map(|(addr, healthy)| json!({
                    "addr": addr.to_string(),
                    "healthy": healthy,
                })).collect::<Vec<_>>(),
            },
            "admin": {
                "listen": config.admin.listen.to_string(),
                "token_required": !config.admin.operators.is_empty(),
                "operators": config.admin.operators.iter().map(|o| json!({
                    "name": o.name,
                    "role": o.role.as_str(),
                })).collect::<Vec<_>>(),
                "audit_file": config.admin.audit_file.display().to_string(),
                "console_sessions": self.sessions.open(now),
                "console_streams": self.streams.open(),
            },
            "keys": snapshot.keys.as_ref().map(|ring| json!({
                "active": ring.active().id(),
                "ids": ring.ids().collect::<Vec<_>>(),
            })),
            "cluster": cluster_status(&*self.app.state.store),
            "events": self.events_status(config),
            "listeners": {
                "listen": config.server.listen.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "tls_listen": config.server.tls_listen.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "h2c": config.server.h2c,
                "proxy_protocol": config.server.proxy_protocol,
                "redirect_to_https": config.server.redirect_to_https,
            },
            "tls": snapshot.tls.as_ref().map(|tls| json!({
                "min_version": tls.min_version.as_str(),
                "certificates": tls.certs.iter().map(|c| json!({
                    "names": c.names,
                    "not_after": crate::time::Timestamp::from_secs(c.not_after.max(0) as u64).rfc3339(),
                    "file": c.cert_file.display().to_string(),
                })).collect::<Vec<_>>(),
            })),
            "rooms": snapshot.rooms.iter().map(|r| room_status(r, &*self.app.state.store, &self.app.state.controls, &snapshot.config.server.api_prefix, now)).collect::<Vec<_>>(),
            "rate_limits": snapshot.rules.iter().map(|r| rule_status(r, now)).collect::<Vec<_>>(),
        })
    }
}

/// `cluster: {store, node, nodes, up, last_sync}`; never the store's address.
fn cluster_status(store: &dyn crate::store::CounterStore) -> Value {
    match store.cluster() {
        Some(c) => json!({
            "store": c.store,
            "node": c.node,
            "nodes": c.nodes,
            "up": c.up,
            "last_sync": c.last_sync.map(|t| t.rfc3339()),
        }),
        None => json!({
            "store": "local",
            "node": null,
            "nodes": 1,
            "up": true,
            "last_sync": null,
        }),
    }
}

/// A rule's settings and its penalty box.
fn rule_status(rule: &Rule, now: crate::time::Timestamp) -> Value {
    let c = &rule.config;
    let mut v = json!({
        "name": c.name,
        "key": c.key.iter().map(|k| match k {
            KeyPart::ClientIp => "client_ip".to_owned(),
            KeyPart::Host => "host".to_owned(),
            KeyPart::Path => "path".to_owned(),
            KeyPart::Method => "method".to_owned(),
            KeyPart::Header(h) => format!("header:{h}"),
            KeyPart::Cookie(c) => format!("cookie:{c}"),
        }).collect::<Vec<_>>(),
        "paths": c.paths,
        "methods": c.methods.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        "scope": if c.scope == Scope::All { "all" } else { "origin" },
        "action": if c.action == RuleAction::Block { "block" } else { "log" },
        "max_keys": c.max_keys,
        "policy": rule.policy(),
        "penalty_box_entries": rule.penalty_box_len(now),
    });
    match c.algorithm {
        Algorithm::Window {
            window,
            quota,
            penalty,
        } => {
            v["algorithm"] = json!("window");
            v["window_seconds"] = json!(secs(window));
            // A number (requests/s) as before when it is one; a rate's text when it is not.
            let limit = crate::config::window_limit_text(window, quota);
            v["limit"] = match limit.parse::<u64>() {
                Ok(n) => json!(n),
                Err(_) => json!(limit),
            };
            v["quota"] = json!(quota);
            v["penalty_seconds"] = json!(secs(penalty));
        }
        Algorithm::TokenBucket {
            limit,
            period,
            penalty,
        } => {
            v["algorithm"] = json!("token_bucket");
            v["limit"] = json!(limit);
            v["period_seconds"] = json!(secs(period));
            v["penalty_seconds"] = json!(secs(penalty));
        }
        Algorithm::Concurrency { limit } => {
            v["algorithm"] = json!("concurrency");
            v["limit"] = json!(limit);
        }
    }
    v
}

fn secs(d: std::time::Duration) -> u64 {
    d.as_secs()
}

/// A room's settings and live figures.
fn room_status(
    room: &Room,
    store: &dyn crate::store::CounterStore,
    overrides: &Controls,
    api_prefix: &str,
    now: crate::time::Timestamp,
) -> Value {
    let c = &room.config;
    let in_use = room.invitations_in_use(now);
    let mut v = json!({
        "name": c.name,
        "enabled": c.enabled,
        "admission": c.admission.method(),
        "hosts": c.hosts.iter().map(|h| match h {
            crate::config::HostPattern::Exact(h) => h.clone(),
            crate::config::HostPattern::Suffix(s) => format!("*{s}"),
        }).collect::<Vec<_>>(),
        "paths": c.paths,
        "bypass_paths": c.bypass_paths,
        "bypass_cidrs": c.bypass_cidrs.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        "cookie_name": c.cookie.name,
        "wait_status": c.wait_status,
        "queue_all": c.queue_all,
        "mode": c.mode.as_str(),
        "effective_allow_percentage": room.effective_allow_percentage(now),
        "effective_new_users_per_minute": room.effective_new_users_per_minute(now),
        "autopilot": room.pilot().status(),
        "challenge": c.challenge.map(|ch| serde_json::json!({
            "kind": "pow",
            "difficulty": ch.difficulty,
            "ttl_secs": ch.ttl.as_secs(),
            "on_failure": ch.on_failure.as_str(),
        })),
        "access": c.access.as_str(),
        "invitations": {
            "in_use": in_use.invitations,
            "holders": in_use.holders,
            "max": c.max_invitations,
            "revoked": c.revoked_invitations.len(),
        },
    });
    match &c.admission {
        Admission::Lottery {
            allow_percentage,
            wait_period,
            allow_period,
            closed_refresh,
        } => {
            v["allow_percentage"] = json!(allow_percentage);
            v["wait_period_seconds"] = json!(secs(*wait_period));
            v["allow_period_seconds"] = json!(secs(*allow_period));
            v["closed_refresh_seconds"] = json!(secs(*closed_refresh));
        }
        Admission::Capacity(cap) => {
            v["new_users_per_minute"] = json!(cap.new_users_per_minute);
            v["total_active_users"] = json!(cap.total_active_users);
            v["session_duration_seconds"] = json!(secs(cap.session_duration));
            v["refresh_seconds"] = json!(secs(cap.refresh));
            v["rejoin_grace_seconds"] = json!(secs(cap.rejoin_grace));
            v["slot_share"] = json!(store.allotment(&c.name).fraction());
        }
    }
    if let (Some(api), Some(queue)) = (&c.api, room.numbered(now)) {
        v["api"] = json!({
            "queue_number": queue.last_number(),
            "serving_number": queue.serving_number(),
            "queue_position_expiry_seconds": secs(api.position_expiry),
            "last_reset_at": (queue.reset_at_ms() > 0)
                .then(|| crate::time::Timestamp::from_millis(queue.reset_at_ms()).rfc3339()),
        });
    }
    v["sold_out"] = json!(room.sold_out());
    v["paused"] = json!(room.controls().held().paused);
    v["overrides"] = json!(overrides.overrides(&c.name).in_force(now));
    v["admit_grants_left"] = json!(crate::controls::grants_left(store, &c.name, now));
    // Scheduled events: the one in force (else the next, else the last), and the
    // next one to open.
    let event = |p: Option<crate::room::event::Phase>| {
        p.map(|p| {
            let e = p.event;
            json!({
                "name": e.name,
                "state": p.state.as_str(),
                "prequeue_starts_at": e.prequeue_start.map(rfc3339),
                "starts_at": rfc3339(e.start),
                "ends_at": rfc3339(e.end),
                "shuffle_at_start": e.shuffle_at_start,
                "draw": crate::draws::status(room, e, api_prefix, now),
            })
        })
    };
    v["event"] = json!(event(crate::room::event::current(&c.events, now)));
    v["next_event"] = json!(event(crate::room::event::next(&c.events, now)));
    v["event_state"] = json!(crate::room::event::current(&c.events, now).map(|p| format!(
        "{}: {}",
        p.event.name,
        p.state.as_str()
    )));
    if let Some(f) = room.figures(now) {
        v["active_users"] = json!(f.active);
        v["waiting_users"] = json!(f.waiting);
        v["free_slots"] = json!(f.free_slots);
        v["admitted_last_minute"] = json!(f.admitted_last_minute);
        v["wait_estimate_minutes"] = json!(f.estimates);
        if f.lanes.len() > 1 {
            let lanes: serde_json::Map<String, serde_json::Value> = f
                .lanes
                .iter()
                .map(|l| {
                    let lane = json!({
                        "weight": l.weight,
                        "waiting_users": l.waiting,
                        "admitted_last_minute": l.admitted_last_minute,
                    });
                    (l.name.to_string(), lane)
                })
                .collect();
            v["lanes"] = json!(lanes);
        }
    }
    v
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, body.len())
        .header(header::CACHE_CONTROL, "no-store")
        .body(body)
        .unwrap_or_else(|_| Response::new(Vec::new()))
}

fn text(status: StatusCode, body: &str) -> Response<Vec<u8>> {
    reply(
        status,
        "text/plain; charset=utf-8",
        body.as_bytes().to_vec(),
    )
}

/// A JSON error answer.
fn problem(status: StatusCode, message: &str) -> Response<Vec<u8>> {
    let body = json!({ "error": message });
    reply(
        status,
        "application/json",
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// Reads a request's body, at most `cap` bytes.
pub(crate) async fn read_body(
    session: &mut ServerSession,
    cap: usize,
) -> Result<Vec<u8>, crate::body::BodyError> {
    crate::body::read(session, cap).await
}

/// The arguments of an action, as the audit log records them.
fn action_args(action: &Action) -> Value {
    match action {
        Action::Admit(n) => json!({ "count": n }),
        Action::SetMessage(text) => json!({ "text": text }),
        Action::SetPace(p) => json!({
            p.key.as_str(): p.value,
            "for_seconds": p.lasts.map(|d| d.as_secs()),
        }),
        _ => json!({}),
    }
}

/// What a request asks of the admin listener, once its operator is known.
enum Access {
    /// Serve it, as `who` (`None`: no operator is configured, so reading is open and acting
    /// is off).
    Serve(Option<Who>),
    /// Refused: the answer.
    Refused(Response<Vec<u8>>),
}

impl Admin {
    /// Who is asking, by bearer token or console session, and whether they may do what they ask.
    fn access(&self, session: &ServerSession, snapshot: &Snapshot) -> Access {
        let operators = &snapshot.config.admin.operators;
        let req = session.req_header();
        let authorization = req.headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
        let now = crate::time::now();
        let who = match authorization {
            // A bearer token is checked under the login throttle: guessing tokens on the API
            // is no cheaper than on the login form.
            Some(value) if !operators.is_empty() => {
                let token = parse::bearer_token(value).unwrap_or_default();
                match self
                    .sessions
                    .check(operators, client_ip(session), token, now)
                {
                    Ok(op) => Some(Who {
                        name: op.name.clone(),
                        role: op.role,
                        via: Via::Bearer {
                            token_sha256: op.token_sha256,
                        },
                    }),
                    Err(auth::LoginRefused::Throttled) => {
                        self.refused("login_throttled");
                        return Access::Refused(text(
                            StatusCode::TOO_MANY_REQUESTS,
                            "too many wrong tokens from this address; wait a minute\n",
                        ));
                    }
                    Err(auth::LoginRefused::Invalid) => {
                        self.refused("unauthenticated");
                        return Access::Refused(unauthorized());
                    }
                }
            }
            _ => console::session_id(session).and_then(|id| self.sessions.who(operators, &id, now)),
        };
        let path = req.uri.path();
        // Without operators the loopback listener is open to read: only to a Host that names
        // it by address, so a page on a rebound name cannot read it through a browser.
        if operators.is_empty() {
            let host = req
                .headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .or_else(|| req.uri.authority().map(|a| a.as_str()))
                .unwrap_or("");
            if !parse::local_host(host) {
                self.refused("host");
                return Access::Refused(text(
                    StatusCode::FORBIDDEN,
                    "refused: with no operator configured, the admin listener answers only to \
                     its address or localhost as Host\n",
                ));
            }
        }
        let console_open = path == "/console"
            || path == "/console/"
            || path == "/console/login"
            || path == "/console/logout"
            || path == "/console/console.js"
            || path == "/console/console.css";
        if who.is_none() && !operators.is_empty() && !console_open {
            self.refused("unauthenticated");
            return Access::Refused(unauthorized());
        }
        let changes = req.method != http::Method::GET && req.method != http::Method::HEAD;
        if !changes || path == "/console/login" {
            return Access::Serve(who);
        }
        if let Some(Who {
            via: Via::Session { csrf },
            role,
            ..
        }) = &who
        {
            let h = &req.headers;
            if from_another_site(h) {
                self.refused("origin");
                return Access::Refused(text(
                    StatusCode::FORBIDDEN,
                    "refused: the request comes from another site\n",
                ));
            }
            // Logout takes its token from the form too; it checks it itself.
            if path != "/console/logout"
                && !auth::csrf_ok(csrf, h.get("x-csrf-token").map(|v| v.as_bytes()))
            {
                self.refused("csrf");
                return Access::Refused(text(
                    StatusCode::FORBIDDEN,
                    "refused: the X-CSRF-Token header is missing or wrong; reload the console\n",
                ));
            }
            if *role == Role::Viewer && path != "/console/logout" {
                self.refused("role");
                return Access::Refused(viewer_refused());
            }
        }
        if let Some(Who {
            via: Via::Bearer { .. },
            role: Role::Viewer,
            ..
        }) = &who
        {
            self.refused("role");
            return Access::Refused(viewer_refused());
        }
        Access::Serve(who)
    }

    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let snapshot = self.app.snapshot();
        let path = session.req_header().uri.path().to_owned();
        let method = session.req_header().method.clone();
        let reading = method == http::Method::GET || method == http::Method::HEAD;
        // Probes never need a token: a load balancer cannot send one.
        match path.as_str() {
            "/healthz" | "/readyz" if reading => return probe(&path, &snapshot),
            _ => {}
        }
        let who = match self.access(session, &snapshot) {
            Access::Serve(who) => who,
            Access::Refused(resp) => return resp,
        };
        if path == "/console" || path.starts_with("/console/") {
            return self.console(session, &snapshot, who).await;
        }
        if path.starts_with("/rooms/") {
            let source = source_of(session);
            let actor = who.as_ref().map(|who| Actor { who, source });
            return self.action(session, &snapshot, actor).await;
        }
        if !reading {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served here\n");
        }
        match path.as_str() {
            "/metrics" => {
                self.app.metrics.refresh(&snapshot, &*self.app.state.store);
                reply(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    self.app.metrics.render(),
                )
            }
            "/status" => {
                let body = serde_json::to_vec_pretty(&self.status(&snapshot)).unwrap_or_default();
                reply(StatusCode::OK, "application/json", body)
            }
            "/audit" => self.audit_list(session, &snapshot),
            "/status.html" | "/" => {
                let body = status_html(&self.status(&snapshot));
                reply(
                    StatusCode::OK,
                    "text/html; charset=utf-8",
                    body.into_bytes(),
                )
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "not found; try /console /metrics /healthz /readyz /status /status.html /audit\n",
            ),
        }
    }

    /// `GET /audit?room=&limit=`: the newest records, newest first.
    fn audit_list(&self, session: &ServerSession, snapshot: &Snapshot) -> Response<Vec<u8>> {
        let query = session.req_header().uri.query().unwrap_or("");
        let (room, limit) = match parse::audit_query(query) {
            Ok(q) => q,
            Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
        };
        match audit::newest(&snapshot.config.admin.audit_file, room.as_deref(), limit) {
            Ok(records) => reply(
                StatusCode::OK,
                "application/json",
                serde_json::to_vec_pretty(&records).unwrap_or_default(),
            ),
            Err(e) => {
                log::error!("GET /audit: {e}");
                problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the audit log cannot be read; see the log",
                )
            }
        }
    }
}

/// `/healthz` and `/readyz`.
fn probe(path: &str, snapshot: &Snapshot) -> Response<Vec<u8>> {
    if path == "/healthz" {
        return text(StatusCode::OK, "ok\n");
    }
    let healthy = snapshot.upstream.healthy_count();
    if healthy > 0 {
        text(
            StatusCode::OK,
            &format!("ready: {healthy} healthy origin peer(s)\n"),
        )
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no healthy origin peer\n",
        )
    }
}

/// Whether a request's headers say it comes from another site than the one it was sent to.
pub(crate) fn from_another_site(h: &http::HeaderMap) -> bool {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    parse::cross_site(
        text("origin"),
        text("sec-fetch-site"),
        text("host").unwrap_or(""),
    )
}

/// The address a request came from.
fn client_ip(session: &ServerSession) -> Option<std::net::IpAddr> {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
}

/// The address a request came from, for the audit log.
fn source_of(session: &ServerSession) -> String {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| "unix".to_owned())
}

fn unauthorized() -> Response<Vec<u8>> {
    let mut resp = text(
        StatusCode::UNAUTHORIZED,
        "an operator's bearer token is required (or sign in at /console)\n",
    );
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"vestibule\""),
    );
    resp
}

fn viewer_refused() -> Response<Vec<u8>> {
    text(
        StatusCode::FORBIDDEN,
        "refused: a viewer sees the admin listener but changes nothing\n",
    )
}

#[async_trait]
impl HttpServerApp for Admin {
    async fn process_new_http(
        self: &Arc<Self>,
        mut http: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        match http.read_request().await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                log::debug!("admin: cannot read a request: {e}");
                return None;
            }
        }
        http.set_keepalive(if *shutdown.borrow() { None } else { Some(60) });
        let req = http.req_header();
        let resp = if req.uri.path() == "/console/stream" && req.method == http::Method::GET {
            let snapshot = self.app.snapshot();
            match self.access(&http, &snapshot) {
                Access::Serve(who) => match who.or_else(|| console::anonymous(&snapshot)) {
                    Some(who) => {
                        self.stream(&mut http, &who, shutdown).await;
                        return None;
                    }
                    None => unauthorized(),
                },
                Access::Refused(resp) => resp,
            }
        } else {
            self.response(&mut http).await
        };
        let (parts, body) = resp.into_parts();
        let header: ResponseHeader = parts.into();
        if let Err(e) = http.write_response_header(Box::new(header)).await {
            log::debug!("admin: cannot answer: {e}");
            return None;
        }
        if !body.is_empty() {
            if let Err(e) = http.write_response_body(body.into(), true).await {
                log::debug!("admin: cannot answer: {e}");
                return None;
            }
        }
        let settings = HttpPersistentSettings::for_session(&http);
        match http.finish().await {
            Ok(c) => c.map(|s| ReusedHttpStream::from_reusable_stream(s, settings)),
            Err(_) => None,
        }
    }
}

/// A value of `/status` as the status page shows it, as text (the template escapes it): `–` for
/// none, lists joined, fractions to two decimals.
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "–".to_owned(),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() != 0.0 => format!("{f:.2}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// A room's state in a word or two: off, paused, sold out, queue-all, an event's state, open.
fn room_state(r: &Value) -> String {
    let mut parts = Vec::new();
    if r["enabled"] == false {
        parts.push("off".to_owned());
    }
    if r["paused"] == true {
        parts.push("paused".to_owned());
    }
    if r["sold_out"] == true {
        parts.push("sold out".to_owned());
    }
    if r["queue_all"] == true {
        parts.push("queue-all".to_owned());
    }
    if let Value::String(e) = &r["event_state"] {
        parts.push(e.clone());
    }
    if parts.is_empty() {
        parts.push("open".to_owned());
    }
    parts.join(", ")
}

/// One table of the status page: a row per object and a column per key.
#[derive(serde::Serialize)]
struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn of(items: &[Value], columns: &[&str]) -> Table {
        let rows = items
            .iter()
            .map(|item| {
                columns
                    .iter()
                    .map(|c| match (*c, &item[c]) {
                        ("autopilot", a) if a.is_object() => format!(
                            "{} ({}, since {})",
                            cell(&a["value"]),
                            cell(&a["reason"]),
                            cell(&a["changed_at"])
                        ),
                        ("wait_estimate_minutes", e) if e.is_object() => format!(
                            "{} / {} / {}",
                            cell(&e["p25"]),
                            cell(&e["p50"]),
                            cell(&e["p75"])
                        ),
                        (_, v) => cell(v),
                    })
                    .collect()
            })
            .collect();
        Table {
            headers: columns.iter().map(|c| c.replace('_', " ")).collect(),
            rows,
        }
    }
}

/// The status page's template, compiled once; HTML-escaped by its name.
fn status_template() -> &'static minijinja::Environment<'static> {
    static ENV: std::sync::OnceLock<minijinja::Environment<'static>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        // Tested below: a broken template fails the build's tests, not a request.
        if let Err(e) = env.add_template("status.html", include_str!("admin/status.html")) {
            log::error!("the status page template: {e}");
        }
        env
    })
}

/// `/status` for people: the same figures, refreshed every 5 s.
fn status_html(s: &Value) -> String {
    let empty = Vec::new();
    let rooms = s["rooms"].as_array().unwrap_or(&empty);
    // One row per lane of every room with lanes.
    let lanes: Vec<Value> = rooms
        .iter()
        .flat_map(|r| {
            let room = r["name"].clone();
            r["lanes"]
                .as_object()
                .into_iter()
                .flatten()
                .map(move |(lane, l)| {
                    let mut row = l.clone();
                    row["room"] = room.clone();
                    row["lane"] = Value::from(lane.as_str());
                    row
                })
        })
        .collect();
    let lanes = (!lanes.is_empty()).then(|| {
        Table::of(
            &lanes,
            &[
                "room",
                "lane",
                "weight",
                "waiting_users",
                "admitted_last_minute",
            ],
        )
    });
    // One row per room with the queue API.
    let queues: Vec<Value> = rooms
        .iter()
        .filter(|r| r["api"].is_object())
        .map(|r| {
            let mut row = r["api"].clone();
            row["room"] = r["name"].clone();
            row
        })
        .collect();
    let queues = (!queues.is_empty()).then(|| {
        Table::of(
            &queues,
            &[
                "room",
                "queue_number",
                "serving_number",
                "queue_position_expiry_seconds",
                "last_reset_at",
            ],
        )
    });
    // The live figures of each room in a few columns: the page fits a laptop's screen.
    let live: Vec<Value> = rooms
        .iter()
        .map(|r| {
            let mut row = r.clone();
            row["state"] = json!(room_state(r));
            row["pace"] = match (
                &r["effective_new_users_per_minute"],
                &r["effective_allow_percentage"],
            ) {
                (Value::Number(n), _) => json!(format!("{n} / min")),
                (_, Value::Number(p)) => json!(format!("{} %", cell(&Value::Number(p.clone())))),
                _ => Value::Null,
            };
            row["active"] = match (&r["active_users"], &r["total_active_users"]) {
                (Value::Number(a), Value::Number(cap)) => json!(format!("{a} of {cap}")),
                (a, _) => a.clone(),
            };
            row["notice"] = r["overrides"]["message"]["text"].clone();
            row
        })
        .collect();
    let c = &s["cluster"];
    let cluster = (c["store"] != "local").then(|| {
        minijinja::context! {
            up => c["up"] == true,
            store => cell(&c["store"]),
            node => cell(&c["node"]),
            nodes => cell(&c["nodes"]),
            last_sync => cell(&c["last_sync"]),
        }
    });
    let reload_error = match &s["last_reload_error"] {
        Value::Null => None,
        e => Some(minijinja::context! { at => cell(&e["at"]), message => cell(&e["message"]) }),
    };
    let ctx = minijinja::context! {
        generation => cell(&s["generation"]),
        loaded_at => cell(&s["loaded_at"]),
        started_at => cell(&s["started_at"]),
        keys_active => cell(&s["keys"]["active"]),
        keys_ids => cell(&s["keys"]["ids"]),
        reload_error,
        cluster,
        rooms => Table::of(&live, &["name", "state", "pace", "active", "waiting_users", "admitted_last_minute", "wait_estimate_minutes", "notice"]),
        settings => Table::of(rooms, &["name", "admission", "paths", "autopilot", "admit_grants_left", "free_slots", "slot_share"]),
        lanes,
        queues,
        rules => Table::of(s["rate_limits"].as_array().unwrap_or(&empty), &["name", "algorithm", "limit", "scope", "action", "policy", "penalty_box_entries"]),
        peers => Table::of(s["upstream"]["peers"].as_array().unwrap_or(&empty), &["addr", "healthy"]),
        certificates => s["tls"]["certificates"].as_array().map(|certs| Table::of(certs, &["names", "not_after", "file"])),
    };
    status_template()
        .get_template("status.html")
        .and_then(|t| t.render(ctx))
        .unwrap_or_else(|e| {
            log::error!("rendering the status page: {e}");
            "<!doctype html><title>vestibule status</title><p>The status page failed to render; \
             see <a href=/status>/status</a>."
                .to_owned()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_page_shows_every_section_and_escapes_what_it_shows() {
        let status = json!({
            "generation": 3,
            "loaded_at": "2026-11-27T12:00:00Z",
            "started_at": "2026-11-27T11:00:00Z",
            "keys": { "active": "k1", "ids": ["k1", "k0"] },
            "last_reload_error": { "at": "2026-11-27T12:01:00Z", "message": "bad <key> & \"more\"" },
            "cluster": { "store": "redis", "up": true, "node": "a", "nodes": 3, "last_sync": null },
            "rooms": [{
                "name": "<script>x</script>", "enabled": true, "admission": "fifo",
                "effective_allow_percentage": 12.345,
                "paused": true, "event_state": "launch: prequeue",
                "active_users": 3, "total_active_users": 10, "waiting_users": 906,
                "overrides": { "message": { "text": "Doors open at 10 & <b>soon</b>" } },
                "autopilot": { "value": 40, "reason": "hold", "changed_at": "then" },
                "wait_estimate_minutes": { "p25": 1, "p50": 2.5, "p75": null },
                "lanes": { "members": { "weight": 3, "waiting_users": 12, "admitted_last_minute": 1 } },
                "api": { "queue_number": 1842, "serving_number": 1610, "queue_position_expiry_seconds": 0, "last_reset_at": null },
            }],
            "rate_limits": [{ "name": "burst", "limit": 10 }],
            "upstream": { "peers": [{ "addr": "127.0.0.1:8000", "healthy": true }] },
            "tls": { "certificates": [{ "names": ["a.example", "b.example"], "file": "c.pem" }] },
        });
        let html = status_html(&status);
        for part in [
            "<!doctype html>",
            "<meta http-equiv=refresh content=5>",
            "config generation 3 loaded 2026-11-27T12:00:00Z (started 2026-11-27T11:00:00Z) · keys: active k1 of k1, k0</p>",
            "<p class=bad>last reload failed at 2026-11-27T12:01:00Z: bad &lt;key&gt; &amp; &quot;more&quot;</p>",
            "<p class=ok>cluster: store redis up · node a · 3 live node(s) · last sync –</p>",
            "<th>pace</th>",
            "<th>waiting users</th>",
            "<h2>Queue API</h2>",
            "<td>1842</td><td>1610</td>",
            "<td>&lt;script&gt;x&lt;&#x2f;script&gt;</td><td>paused, launch: prequeue</td><td>12.35 %</td><td>3 of 10</td><td>906</td>",
            "<td>Doors open at 10 &amp; &lt;b&gt;soon&lt;&#x2f;b&gt;</td>",
            "<td>&lt;script&gt;x&lt;&#x2f;script&gt;</td><td>fifo</td>",
            "<td>40 (hold, since then)</td>",
            // The template escapes `/` too: the same text in a browser.
            "<td>1 &#x2f; 2.50 &#x2f; –</td>",
            "<h2>Lanes</h2>",
            "<td>members</td><td>3</td><td>12</td><td>1</td>",
            "<h2>Rate limits</h2><div class=scroll><table><tr><th>name</th>",
            "<td>burst</td><td>–</td><td>10</td>",
            "<td>127.0.0.1:8000</td><td>true</td>",
            "<h2>Certificates</h2>",
            "<td>a.example, b.example</td><td>–</td><td>c.pem</td>",
        ] {
            assert!(html.contains(part), "{part}\n{html}");
        }
        assert!(!html.contains("<script>x"), "{html}");

        // A single process, no lanes, no TLS, a fine reload: those sections are left out.
        let quiet = json!({
            "cluster": { "store": "local" },
            "rooms": [], "rate_limits": [], "upstream": { "peers": [] }, "tls": {},
        });
        let html = status_html(&quiet);
        assert!(html.contains("<p class=ok>last reload: fine</p>"), "{html}");
        for absent in ["cluster:", "Lanes", "Queue API", "Certificates"] {
            assert!(!html.contains(absent), "{absent}\n{html}");
        }
    }
}
