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
use crate::config::Admission;
use crate::room::Room;
use crate::snapshot::Snapshot;

pub struct Admin {
    app: Arc<App>,
}

impl Admin {
    pub fn new(app: Arc<App>) -> Admin {
        Admin { app }
    }

    fn status(&self, snapshot: &Snapshot) -> Value {
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
            "rooms": snapshot.rooms.iter().map(|r| room_status(r, crate::time::Timestamp::now())).collect::<Vec<_>>(),
        })
    }
}

fn secs(d: std::time::Duration) -> u64 {
    d.as_secs()
}

/// A room's settings and live figures.
fn room_status(room: &Room, now: crate::time::Timestamp) -> Value {
    let c = &room.config;
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
        "effective_allow_percentage": room.effective_allow_percentage(now),
    });
    match &c.admission {
        Admission::Lottery {
            allow_percentage,
            wait_period,
            allow_period,
        } => {
            v["allow_percentage"] = json!(allow_percentage);
            v["wait_period_seconds"] = json!(secs(*wait_period));
            v["allow_period_seconds"] = json!(secs(*allow_period));
        }
        Admission::Capacity(cap) => {
            v["new_users_per_minute"] = json!(cap.new_users_per_minute);
            v["total_active_users"] = json!(cap.total_active_users);
            v["session_duration_seconds"] = json!(secs(cap.session_duration));
            v["refresh_seconds"] = json!(secs(cap.refresh));
        }
    }
    if let Some(f) = room.figures(now) {
        v["active_users"] = json!(f.active);
        v["waiting_users"] = json!(f.waiting);
        v["free_slots"] = json!(f.free_slots);
        v["admitted_last_minute"] = json!(f.admitted_last_minute);
        v["wait_estimate_minutes"] = json!(f.estimates);
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

/// Whether the request carries `Authorization: Bearer <token>`.
fn authorized(session: &ServerSession, token: &str) -> bool {
    let Some(value) = session.req_header().headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return false;
    };
    given.ct_eq(token.as_bytes()).into()
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
                self.app.metrics.refresh(&snapshot);
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
            _ => text(
                StatusCode::NOT_FOUND,
                "not found; try /metrics /healthz /readyz /status\n",
            ),
        }
    }
}
