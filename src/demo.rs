//! The built-in demo origin: what `vestibule demo` puts behind the proxy when no origin is
//! reachable, and what the integration tests use as a real origin on loopback.
//!
//! Routes (each also under any prefix, e.g. `/sale/__revoke`):
//! - `/__echo` (any method): JSON of the request the origin received (method, path, headers in
//!   order), so tests can see exactly what reached the origin;
//! - `/__slow?ms=N`: answers after N milliseconds (at most 30 s);
//! - `/__status/N`: answers with status N;
//! - `/__revoke`: answers with `Vestibule-Command: revoke`;
//! - `/__set-cookie`: sets a cookie of the origin's own;
//! - `/__stats`: how many requests the origin has served (not counting these), and with a model
//!   load, the users it counts now;
//! - anything else: a small HTML page saying you got in.
//!
//! With a [`ModelLoad`] (`vestibule origin --model-capacity N`) it behaves like an origin under
//! load, for the autopilot: every answer but `/__stats` waits the model origin's
//! latency for the users it saw in the last `window` (`base / (1 − users / capacity)`, the
//! model of `vestibule simulate --autopilot`), and past its capacity it answers 503. A user is
//! the first `X-Forwarded-For` address (the client vestibule saw), else the connection's peer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http::{header, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::json;

#[derive(Default)]
pub struct DemoOrigin {
    served: AtomicU64,
    model: Option<ModelLoad>,
}

/// An origin whose latency grows with the users it serves, and which fails past a capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelOrigin {
    /// Users it can serve at once; more get 503.
    pub capacity: f64,
    /// Its latency with nobody else on it, seconds.
    pub base: f64,
}

impl ModelOrigin {
    /// The typical latency with `active` users on it, seconds; `None` past its capacity (503).
    pub fn latency(&self, active: f64) -> Option<f64> {
        let load = active / self.capacity;
        if load > 1.0 {
            return None;
        }
        Some((self.base / (1.0 - load).max(1.0 / 30.0)).min(self.base * 30.0))
    }

    /// The users it serves at a typical latency of `target` seconds.
    #[cfg(feature = "tools")]
    pub(crate) fn users_at(&self, target: f64) -> f64 {
        self.capacity * (1.0 - self.base / target).max(0.0)
    }
}

/// An origin slowed by the users it serves (see the module's comment).
pub struct ModelLoad {
    origin: ModelOrigin,
    window: Duration,
    /// Each user's last request.
    seen: Mutex<HashMap<String, Instant>>,
}

/// The most users a model load tracks (older ones are forgotten first).
const MODEL_MAX_USERS: usize = 100_000;

impl ModelLoad {
    pub fn new(origin: ModelOrigin, window: Duration) -> ModelLoad {
        ModelLoad {
            origin,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Counts `user` and returns the users seen in the window.
    fn arrive(&self, user: &str) -> usize {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|_, at| now.duration_since(*at) < self.window);
        if seen.len() < MODEL_MAX_USERS || seen.contains_key(user) {
            seen.insert(user.to_owned(), now);
        }
        seen.len()
    }

    fn users(&self) -> usize {
        let now = Instant::now();
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.values()
            .filter(|at| now.duration_since(**at) < self.window)
            .count()
    }
}

impl DemoOrigin {
    pub fn with_model(model: ModelLoad) -> DemoOrigin {
        DemoOrigin {
            served: AtomicU64::new(0),
            model: Some(model),
        }
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn build(status: StatusCode, content_type: &str) -> http::response::Builder {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-store")
}

fn finish(builder: http::response::Builder, body: Vec<u8>) -> Response<Vec<u8>> {
    builder
        .header(header::CONTENT_LENGTH, body.len())
        .body(body)
        .unwrap_or_else(|_| Response::new(Vec::new()))
}

#[async_trait]
impl ServeHttp for DemoOrigin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        // Drain any request body so the connection can be reused.
        while let Ok(Some(_)) = session.read_request_body().await {}
        let req = session.req_header();
        let path = req.uri.path().to_owned();
        if path == "/__stats" {
            let served = self.served.load(Ordering::Relaxed);
            let body = match &self.model {
                Some(m) => json!({"served": served, "users": m.users()}),
                None => json!({ "served": served }),
            };
            return finish(
                build(StatusCode::OK, "application/json"),
                body.to_string().into_bytes(),
            );
        }
        let served = self.served.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(model) = &self.model {
            let user = req
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .map(|v| v.trim().to_owned())
                .or_else(|| session.client_addr().map(|a| a.to_string()))
                .unwrap_or_default();
            let users = model.arrive(&user);
            match model.origin.latency(users as f64) {
                Some(latency) => tokio::time::sleep(Duration::from_secs_f64(latency)).await,
                None => {
                    let body = format!("overloaded: {users} users\n").into_bytes();
                    return finish(build(StatusCode::SERVICE_UNAVAILABLE, "text/plain"), body);
                }
            }
        }
        let req = session.req_header();
        let query = req.uri.query().unwrap_or("").to_owned();
        // Routes work under any prefix (`/sale/__revoke`), so rooms on sub-paths can use them.
        let route = path.rfind("/__").map_or(path.as_str(), |i| &path[i..]);
        if route == "/__echo" {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let body = serde_json::to_vec(&json!({
                "method": req.method.as_str(),
                "path": path,
                "query": query,
                "headers": headers,
            }))
            .unwrap_or_default();
            return finish(build(StatusCode::OK, "application/json"), body);
        }
        if route == "/__slow" {
            let ms = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("ms="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1000)
                .min(30_000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let body = format!("slept {ms} ms\n").into_bytes();
            return finish(build(StatusCode::OK, "text/plain"), body);
        }
        if let Some(code) = route.strip_prefix("/__status/") {
            let status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::BAD_REQUEST);
            let body = format!("status {}\n", status.as_u16()).into_bytes();
            return finish(build(status, "text/plain"), body);
        }
        if route == "/__revoke" {
            let b = build(StatusCode::OK, "text/plain").header("vestibule-command", "revoke");
            return finish(b, b"signed out\n".to_vec());
        }
        if route == "/__set-cookie" {
            let b = build(StatusCode::OK, "text/plain").header(
                header::SET_COOKIE,
                "origin_session=abc123; Path=/; HttpOnly",
            );
            return finish(b, b"cookie set\n".to_vec());
        }
        let body = format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Demo origin</title>\
             <style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}}</style></head>\
             <body><h1>You are in.</h1><p>This page comes from vestibule's built-in demo origin: the waiting room let you through.</p>\
             <p>You asked for <code>{}</code>. Request number {served} at this origin.</p></body></html>",
            html_escape(&path)
        );
        finish(
            build(StatusCode::OK, "text/html; charset=utf-8"),
            body.into_bytes(),
        )
    }
}
