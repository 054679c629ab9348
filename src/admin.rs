//! The admin endpoint: `/metrics`, `/healthz`, `/readyz`, `/status`.
//!
//! It binds to loopback by default; config validation refuses any other address without a
//! bearer token, and when a token is set every path requires it (compared in constant time).
//! `/status` shows settings and live figures, never a secret: key ids but not keys, whether the
//! admin token is set but not its value.

use std::sync::Arc;

use async_trait::async_trait;
use http::{header, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use crate::app::App;
use crate::config::event::rfc3339;
use crate::config::{Action as RuleAction, Admission, Algorithm, KeyPart, Scope};
use crate::controls::{Action, Controls};
use crate::ratelimit::Rule;
use crate::room::Room;
use crate::snapshot::Snapshot;

pub struct Admin {
    app: Arc<App>,
}

impl Admin {
    pub fn new(app: Arc<App>) -> Admin {
        Admin { app }
    }

    /// An operator action: `/rooms/<room>/<action>`.
    async fn action(&self, session: &mut ServerSession, snapshot: &Snapshot) -> Response<Vec<u8>> {
        if snapshot.config.admin.token.is_none() {
            return text(
                StatusCode::FORBIDDEN,
                "operator actions need a bearer token: set [admin] token in the config\n",
            );
        }
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
        let body = match read_body(session).await {
            Ok(body) => body,
            Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
        };
        let action = match parse_action(&method, what, &query, &body) {
            Ok(action) => action,
            Err((status, message)) => return problem(status, &message),
        };
        let now = crate::time::Timestamp::now();
        let store = &*self.app.state.store;
        let (overrides, written) =
            self.app
                .state
                .controls
                .apply(room.name(), &action, "admin", store, now);
        self.app
            .metrics
            .admin_actions
            .with_label_values(&[room.name(), action.label()])
            .inc();
        let detail = match &action {
            Action::Admit(n) => format!("{n} more let in"),
            _ => crate::controls::describe(&overrides),
        };
        log::info!(
            "room {}: operator action {} by admin: {detail}",
            room.name(),
            action.label()
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
            "overrides": overrides,
            "sold_out": room.sold_out(),
            "paused": room.controls().held().paused,
            "admit_grants_left": crate::controls::grants_left(store, room.name(), now),
            "persisted": written.is_ok(),
        });
        reply(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec_pretty(&body).unwrap_or_default(),
        )
    }

    fn status(&self, snapshot: &Snapshot) -> Value {
        let now = crate::time::Timestamp::now();
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
                "token_required": config.admin.token.is_some(),
            },
            "keys": snapshot.keys.as_ref().map(|ring| json!({
                "active": ring.active().id(),
                "ids": ring.ids().collect::<Vec<_>>(),
            })),
            "cluster": cluster_status(&*self.app.state.store),
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
            "rooms": snapshot.rooms.iter().map(|r| room_status(r, &*self.app.state.store, &self.app.state.controls, now)).collect::<Vec<_>>(),
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
    v["sold_out"] = json!(room.sold_out());
    v["paused"] = json!(room.controls().held().paused);
    v["overrides"] = json!(overrides.overrides(&c.name));
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

/// Most bytes an action body may have: 500 characters of 4 bytes each.
const MAX_BODY: usize = crate::controls::MAX_MESSAGE_CHARS * 4;

/// Reads an action's body, refusing one longer than [`MAX_BODY`] without reading it all.
async fn read_body(session: &mut ServerSession) -> Result<Vec<u8>, String> {
    let too_long = || {
        format!(
            "the body is longer than {} characters",
            crate::controls::MAX_MESSAGE_CHARS
        )
    };
    let declared = session
        .req_header()
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_long());
    }
    let mut body = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(too_long());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(format!("cannot read the body: {e}")),
        }
    }
}

/// The action a method, path tail, query and body ask for.
fn parse_action(
    method: &http::Method,
    what: &str,
    query: &str,
    body: &[u8],
) -> Result<Action, (StatusCode, String)> {
    use http::Method;
    let bad = |m: &str| Err((StatusCode::BAD_REQUEST, m.to_owned()));
    let action =
        match (method, what) {
            (&Method::POST, "pause") => Action::Pause,
            (&Method::POST, "resume") => Action::Resume,
            (&Method::POST, "admit") => {
                let count = query
                    .split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| *k == "count")
                    .map(|(_, v)| v);
                let Some(count) = count else {
                    return bad("admit needs ?count=N");
                };
                match count.parse::<u64>() {
                    Ok(n) if (1..=crate::controls::MAX_ADMIT).contains(&n) => Action::Admit(n),
                    _ => {
                        return bad(&format!(
                            "count must be a whole number from 1 to {}",
                            crate::controls::MAX_ADMIT
                        ))
                    }
                }
            }
            (&Method::PUT, "message") => {
                let Ok(text) = std::str::from_utf8(body) else {
                    return bad("the message is not UTF-8");
                };
                match crate::controls::check_message(text) {
                    Ok(text) => Action::SetMessage(text),
                    Err(e) => return bad(&e),
                }
            }
            (&Method::DELETE, "message") => Action::ClearMessage,
            (&Method::PUT, "sold-out") => Action::SetSoldOut,
            (&Method::DELETE, "sold-out") => Action::ClearSoldOut,
            (&Method::DELETE, "overrides") => Action::ClearOverrides,
            (_, "pause" | "resume" | "admit" | "message" | "sold-out" | "overrides") => {
                return Err((
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{method} does not apply to {what}; see the admin API in the docs"),
                ))
            }
            _ => return Err((
                StatusCode::NOT_FOUND,
                "no such action; try pause, resume, admit?count=N, message, sold-out or overrides"
                    .to_owned(),
            )),
        };
    if !matches!(action, Action::SetMessage(_)) && !body.is_empty() {
        return bad("this action takes no body");
    }
    Ok(action)
}

/// Whether the request carries `Authorization: Bearer <token>`.
fn authorized(session: &ServerSession, token: &str) -> bool {
    let Some(value) = session.req_header().headers.get(header::AUTHORIZATION) else {
        return false;
    };
    // The scheme is case-insensitive (RFC 9110 §11.1); the token is compared in constant time.
    let value = value.as_bytes();
    let Some((scheme, given)) = value
        .iter()
        .position(|b| *b == b' ')
        .map(|i| (&value[..i], value[i + 1..].trim_ascii()))
    else {
        return false;
    };
    scheme.eq_ignore_ascii_case(b"bearer") && bool::from(given.ct_eq(token.as_bytes()))
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let snapshot = self.app.snapshot();
        if let Some(token) = &snapshot.config.admin.token {
            if !authorized(session, token) {
                let mut resp = text(StatusCode::UNAUTHORIZED, "a bearer token is required\n");
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer realm=\"vestibule\""),
                );
                return resp;
            }
        }
        if session.req_header().uri.path().starts_with("/rooms/") {
            return self.action(session, &snapshot).await;
        }
        let req = session.req_header();
        if req.method != http::Method::GET && req.method != http::Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served here\n");
        }
        match req.uri.path() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => {
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
                "not found; try /metrics /healthz /readyz /status /status.html\n",
            ),
        }
    }
}

fn esc(v: &Value) -> String {
    let s = match v {
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
    };
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One table with a row per object and a column per key (in the order of the first object).
fn table(items: &[Value], columns: &[&str]) -> String {
    let mut t = String::from("<table><tr>");
    for c in columns {
        t.push_str(&format!("<th>{}</th>", c.replace('_', " ")));
    }
    t.push_str("</tr>");
    for item in items {
        t.push_str("<tr>");
        for c in columns {
            let cell = match (c, &item[c]) {
                (&"autopilot", a) if a.is_object() => format!(
                    "{} ({}, since {})",
                    esc(&a["value"]),
                    esc(&a["reason"]),
                    esc(&a["changed_at"])
                ),
                (&"wait_estimate_minutes", e) if e.is_object() => format!(
                    "{} / {} / {}",
                    esc(&e["p25"]),
                    esc(&e["p50"]),
                    esc(&e["p75"])
                ),
                (_, v) => esc(v),
            };
            t.push_str(&format!("<td>{cell}</td>"));
        }
        t.push_str("</tr>");
    }
    t.push_str("</table>");
    t
}

/// `/status` for people: the same figures, refreshed every 5 s.
fn status_html(s: &Value) -> String {
    let empty = Vec::new();
    let rooms = s["rooms"].as_array().unwrap_or(&empty);
    let rules = s["rate_limits"].as_array().unwrap_or(&empty);
    let peers = s["upstream"]["peers"].as_array().unwrap_or(&empty);
    let error = match &s["last_reload_error"] {
        Value::Null => "<p class=ok>last reload: fine</p>".to_owned(),
        e => format!(
            "<p class=bad>last reload failed at {}: {}</p>",
            esc(&e["at"]),
            esc(&e["message"])
        ),
    };
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
    let lanes = if lanes.is_empty() {
        String::new()
    } else {
        format!(
            "<h2>Lanes</h2>{}",
            table(
                &lanes,
                &[
                    "room",
                    "lane",
                    "weight",
                    "waiting_users",
                    "admitted_last_minute"
                ]
            )
        )
    };
    let c = &s["cluster"];
    let cluster = if c["store"] == "local" {
        String::new()
    } else {
        format!(
            "<p class={}>cluster: store {} {} · node {} · {} live node(s) · last sync {}</p>",
            if c["up"] == true { "ok" } else { "bad" },
            esc(&c["store"]),
            if c["up"] == true { "up" } else { "DOWN" },
            esc(&c["node"]),
            esc(&c["nodes"]),
            esc(&c["last_sync"]),
        )
    };
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta http-equiv=refresh content=5>\
         <title>vestibule status</title><style>\
         body{{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d2330}}h1{{font-size:1.3rem}}h2{{font-size:1.05rem;margin-top:1.5rem}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #d5d9e0;padding:.3rem .6rem;text-align:left}}th{{background:#f1f3f6}}\
         .ok{{color:#16803c}}.bad{{color:#b42318;font-weight:600}}</style></head><body>\
         <h1>vestibule</h1><p>config generation {} loaded {} (started {}) · keys: active {} of {}</p>{error}{cluster}\
         <h2>Rooms</h2>{}{lanes}<h2>Rate limits</h2>{}<h2>Origin peers</h2>{}{}\
         <p><a href=/status>JSON</a> · <a href=/metrics>metrics</a></p></body></html>",
        esc(&s["generation"]),
        esc(&s["loaded_at"]),
        esc(&s["started_at"]),
        esc(&s["keys"]["active"]),
        esc(&s["keys"]["ids"]),
        table(rooms, &["name", "enabled", "admission", "paths", "effective_allow_percentage", "effective_new_users_per_minute", "autopilot", "queue_all", "paused", "sold_out", "admit_grants_left", "event_state", "active_users", "waiting_users", "free_slots", "admitted_last_minute", "wait_estimate_minutes", "slot_share"]),
        table(rules, &["name", "algorithm", "limit", "scope", "action", "policy", "penalty_box_entries"]),
        table(peers, &["addr", "healthy"]),
        match s["tls"]["certificates"].as_array() {
            Some(certs) => format!(
                "<h2>Certificates</h2>{}",
                table(certs, &["names", "not_after", "file"])
            ),
            None => String::new(),
        },
    )
}
