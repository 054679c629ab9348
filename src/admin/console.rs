//! The operator console (`/console`): the login and logout forms, the page and its two assets,
//! and the live feed (`/console/stream`, server-sent events) its room cards are drawn from.
//!
//! The page acts through the admin API's own paths (`/rooms/<room>/…`), with its session cookie
//! and the `X-CSRF-Token` header; [`super::Admin`] checks both. Everything is served from the
//! binary, under a content security policy that allows this origin only.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Response, StatusCode};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use serde_json::{json, Value};

use super::auth::{self, LoginRefused, Via, Who};
use super::Admin;
use crate::snapshot::Snapshot;

/// How often the feed sends the console's figures.
pub(crate) const STREAM_EVERY: Duration = Duration::from_secs(1);
/// How long one feed connection lasts before the browser is asked to reconnect (which
/// `EventSource` does by itself): no connection is held forever.
const STREAM_FOR: Duration = Duration::from_secs(3600);
/// Most feeds open at once on this node; past it, 503 and the browser retries.
pub(crate) const MAX_STREAMS: usize = 64;
/// How long one write of the feed may take before the feed is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Audit records the feed carries.
const FEED_AUDIT: usize = 20;
/// The login form's largest body.
const MAX_FORM: usize = 4096;

/// The one message of every refused login: it tells nobody which part was wrong.
const LOGIN_REFUSED: &str =
    "Sign-in refused. Check the token; after 5 failed tries, wait a minute.";

/// The console's headers: nothing from another origin, never framed, never cached.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Open feeds on this node.
#[derive(Default)]
pub(crate) struct Streams {
    open: AtomicUsize,
}

struct StreamSlot<'a>(&'a Streams);

impl Drop for StreamSlot<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Streams {
    fn take(&self) -> Option<StreamSlot<'_>> {
        let before = self.open.fetch_add(1, Ordering::Relaxed);
        let slot = StreamSlot(self);
        (before < MAX_STREAMS).then_some(slot)
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

fn templates() -> &'static minijinja::Environment<'static> {
    static ENV: std::sync::OnceLock<minijinja::Environment<'static>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = minijinja::Environment::new();
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        for (name, text) in [
            ("login.html", include_str!("console/login.html")),
            ("console.html", include_str!("console/console.html")),
        ] {
            // Tested below: a broken template fails the tests, not a request.
            if let Err(e) = env.add_template(name, text) {
                log::error!("the console template {name}: {e}");
            }
        }
        env
    })
}

fn page(status: StatusCode, name: &str, ctx: Value) -> Response<Vec<u8>> {
    let body = templates()
        .get_template(name)
        .and_then(|t| t.render(ctx))
        .unwrap_or_else(|e| {
            log::error!("the console page {name}: {e}");
            "the console page cannot be shown; see the log".to_owned()
        });
    secured(status, "text/html; charset=utf-8", body.into_bytes())
}

fn secured(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    let mut resp = super::reply(status, content_type, body);
    let h = resp.headers_mut();
    for (k, v) in [
        ("content-security-policy", CSP),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
    ] {
        h.insert(k, header::HeaderValue::from_static(v));
    }
    resp
}

fn login_page(status: StatusCode, snapshot: &Snapshot, error: Option<&str>) -> Response<Vec<u8>> {
    page(
        status,
        "login.html",
        json!({
            "error": error,
            "no_operators": snapshot.config.admin.operators.is_empty(),
        }),
    )
}

fn see_other(location: &'static str, cookie: Option<String>) -> Response<Vec<u8>> {
    let mut resp = secured(
        StatusCode::SEE_OTHER,
        "text/plain; charset=utf-8",
        Vec::new(),
    );
    let h = resp.headers_mut();
    h.insert(header::LOCATION, header::HeaderValue::from_static(location));
    if let Some(c) = cookie.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
        h.insert(header::SET_COOKIE, c);
    }
    resp
}

/// The session cookie: HttpOnly, SameSite=Strict, Secure when asked; `None` ends it.
fn session_cookie(id: Option<&str>, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match id {
        Some(id) => format!(
            "{}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            auth::COOKIE,
            auth::SESSION_TTL
        ),
        None => format!(
            "{}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{secure}",
            auth::COOKIE
        ),
    }
}

impl Admin {
    /// Everything under `/console`, except a signed-in feed (served by [`Admin::stream`]).
    pub(super) async fn console(
        &self,
        session: &mut ServerSession,
        snapshot: &Snapshot,
        who: Option<Who>,
    ) -> Response<Vec<u8>> {
        let req = session.req_header();
        let method = req.method.clone();
        let path = req.uri.path().to_owned();
        let now = crate::time::now();
        let secure = snapshot.config.admin.cookie_secure;
        match (method.as_str(), path.as_str()) {
            ("GET" | "HEAD", "/console/console.js") => secured(
                StatusCode::OK,
                "text/javascript; charset=utf-8",
                include_bytes!("console/console.js").to_vec(),
            ),
            ("GET" | "HEAD", "/console/console.css") => secured(
                StatusCode::OK,
                "text/css; charset=utf-8",
                include_bytes!("console/console.css").to_vec(),
            ),
            ("GET" | "HEAD", "/console" | "/console/") => match who.or_else(|| anonymous(snapshot))
            {
                Some(who) => {
                    let csrf = match &who.via {
                        Via::Session { csrf } => csrf.clone(),
                        // A bearer client (or anyone, with no operator) sees the page but cannot
                        // act from it.
                        Via::Bearer { .. } | Via::Open => String::new(),
                    };
                    page(
                        StatusCode::OK,
                        "console.html",
                        json!({
                            "operator": who.name,
                            "role": who.role.as_str(),
                            "csrf": csrf,
                            "can_act": who.role == crate::config::Role::Operator
                                && !csrf.is_empty(),
                            "version": env!("CARGO_PKG_VERSION"),
                        }),
                    )
                }
                None => login_page(StatusCode::OK, snapshot, None),
            },
            ("POST", "/console/login") => {
                if super::from_another_site(&session.req_header().headers) {
                    self.refused("origin");
                    return super::text(StatusCode::FORBIDDEN, "a login from another site\n");
                }
                let body = match super::read_body(session, MAX_FORM).await {
                    Ok(b) => b,
                    Err(e) => return super::text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
                };
                let token = super::parse::form_field(&body, "token").unwrap_or_default();
                let addr = session
                    .client_addr()
                    .and_then(|a| a.as_inet())
                    .map(|a| a.ip());
                let ops = &snapshot.config.admin.operators;
                match self.sessions.login(ops, addr, token.trim_ascii(), now) {
                    Ok((id, who)) => {
                        log::info!("console: {} signed in", who.name);
                        see_other("/console", Some(session_cookie(Some(&id), secure)))
                    }
                    Err(why) => {
                        let (status, reason) = match why {
                            LoginRefused::Invalid => (StatusCode::UNAUTHORIZED, "login"),
                            LoginRefused::Throttled => {
                                (StatusCode::TOO_MANY_REQUESTS, "login_throttled")
                            }
                        };
                        self.refused(reason);
                        let mut resp = login_page(status, snapshot, Some(LOGIN_REFUSED));
                        if status == StatusCode::TOO_MANY_REQUESTS {
                            resp.headers_mut().insert(
                                header::RETRY_AFTER,
                                header::HeaderValue::from(60 - now.secs() % 60),
                            );
                        }
                        resp
                    }
                }
            }
            ("POST", "/console/logout") => {
                // The caller checked the session's origin; the token may also come as a form
                // field, so a plain form can sign out.
                let Some(Who {
                    via: Via::Session { csrf },
                    name,
                    ..
                }) = who
                else {
                    return see_other("/console", Some(session_cookie(None, secure)));
                };
                let header_token = session
                    .req_header()
                    .headers
                    .get("x-csrf-token")
                    .map(|v| v.as_bytes().to_vec());
                let body = super::read_body(session, MAX_FORM)
                    .await
                    .unwrap_or_default();
                let given = header_token.or_else(|| super::parse::form_field(&body, "csrf"));
                if !auth::csrf_ok(&csrf, given.as_deref()) {
                    self.refused("csrf");
                    return super::text(StatusCode::FORBIDDEN, "the CSRF token is missing\n");
                }
                if let Some(id) = session_id(session) {
                    self.sessions.logout(&id);
                }
                log::info!("console: {name} signed out");
                see_other("/console", Some(session_cookie(None, secure)))
            }
            // A signed-in GET is the feed (served before this); a HEAD asks whether it would be.
            ("HEAD", "/console/stream") if who.is_some() || anonymous(snapshot).is_some() => {
                secured(
                    StatusCode::OK,
                    "text/event-stream; charset=utf-8",
                    Vec::new(),
                )
            }
            ("GET" | "HEAD", "/console/stream") => {
                self.refused("unauthenticated");
                super::text(StatusCode::UNAUTHORIZED, "sign in at /console first\n")
            }
            _ => super::text(
                StatusCode::NOT_FOUND,
                "not found; the console is at /console\n",
            ),
        }
    }

    /// The console's figures now, as one feed message carries them, for `who`.
    pub(super) fn console_state(&self, snapshot: &Snapshot, who: &Who) -> Value {
        let mut state = (*self.shared_state(snapshot)).clone();
        state["operator"] = json!({ "name": who.name, "role": who.role.as_str() });
        state
    }

    /// The figures every feed sends, built at most once a second per config generation
    /// however many consoles are open.
    fn shared_state(&self, snapshot: &Snapshot) -> Arc<Value> {
        let now = crate::time::now();
        let key = (now.secs(), snapshot.generation);
        let mut cache = self.feed_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, state)) = &*cache {
            if *k == key {
                return state.clone();
            }
        }
        let status = self.status(snapshot);
        let history = &self.app.recent;
        let rooms: Vec<Value> = status["rooms"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|mut r| {
                let name = r["name"].as_str().unwrap_or("").to_owned();
                r["history"] = json!({
                    "admitted_per_minute": history.minutes(&crate::recent::room_key(&name), now),
                });
                r
            })
            .collect();
        let rules: Vec<Value> = snapshot
            .rules
            .iter()
            .map(|rule| {
                let name = &rule.config.name;
                json!({
                    "name": name,
                    "policy": rule.policy(),
                    "denied_per_minute": history.minutes(&crate::recent::rule_key(name), now),
                })
            })
            .collect();
        let audit = self
            .audit
            .recent(&snapshot.config.admin.audit_file, FEED_AUDIT);
        let state = Arc::new(json!({
            "time": now.rfc3339(),
            "generation": status["generation"],
            "last_reload_error": status["last_reload_error"],
            "cluster": status["cluster"],
            "upstream": status["upstream"],
            "rooms": rooms,
            "rate_limits": rules,
            "audit": audit,
            "cluster_actions": self.app.state.controls.adopted(),
        }));
        *cache = Some((key, state.clone()));
        state
    }

    /// The live feed of a signed-in console: an `event: status` every [`STREAM_EVERY`] until the
    /// browser goes, the process shuts down, or [`STREAM_FOR`] is up.
    pub(super) async fn stream(
        &self,
        http: &mut ServerSession,
        who: &Who,
        shutdown: &ShutdownWatch,
    ) -> bool {
        let Some(_slot) = self.streams.take() else {
            let mut resp = ResponseHeader::build(StatusCode::SERVICE_UNAVAILABLE, None)
                .expect("a status line");
            let _ = resp.insert_header(header::RETRY_AFTER, "5");
            let _ = resp.insert_header(header::CONTENT_LENGTH, "0");
            return http.write_response_header(Box::new(resp)).await.is_ok();
        };
        let mut resp = ResponseHeader::build(StatusCode::OK, None).expect("a status line");
        for (k, v) in [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-store"),
            ("x-content-type-options", "nosniff"),
            ("transfer-encoding", "chunked"),
        ] {
            let _ = resp.insert_header(k, v);
        }
        http.set_keepalive(None);
        // A browser that stops reading must not hold its slot: a write that cannot finish
        // within this ends the feed.
        http.set_write_timeout(Some(WRITE_TIMEOUT));
        if http.write_response_header(Box::new(resp)).await.is_err() {
            return false;
        }
        let until = tokio::time::Instant::now() + STREAM_FOR;
        let mut tick = tokio::time::interval(STREAM_EVERY);
        let mut shutdown = shutdown.clone();
        // The browser waits this long before reconnecting after the feed ends.
        let mut first = true;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            if tokio::time::Instant::now() >= until {
                break;
            }
            let snapshot = self.app.snapshot();
            // An operator removed (or a token changed, or operators configured where there
            // were none) by a reload loses the feed too; a changed role shows at once.
            let still = self.sessions.still(
                &snapshot.config.admin.operators,
                who,
                session_id(http).as_deref(),
                crate::time::now(),
            );
            let Some(now_who) = still else {
                let _ = http
                    .write_response_body(
                        Bytes::from_static(b"event: signed_out\ndata: {}\n\n"),
                        false,
                    )
                    .await;
                break;
            };
            let data =
                serde_json::to_string(&self.console_state(&snapshot, &now_who)).unwrap_or_default();
            let retry = if first { "retry: 2000\n" } else { "" };
            first = false;
            let msg = format!("{retry}event: status\ndata: {data}\n\n");
            if http
                .write_response_body(Bytes::from(msg), false)
                .await
                .is_err()
            {
                return false;
            }
        }
        let _ = http.write_response_body(Bytes::new(), true).await;
        let _ = http.finish_body().await;
        false
    }
}

/// Who reads the console when no operator is configured: the listener is on loopback and open
/// to read, and nobody can act (as on the rest of the listener).
pub(super) fn anonymous(snapshot: &Snapshot) -> Option<Who> {
    snapshot.config.admin.operators.is_empty().then(|| Who {
        name: "local".to_owned(),
        role: crate::config::Role::Viewer,
        via: Via::Open,
    })
}

/// The console session id a request's cookie carries.
pub(super) fn session_id(session: &ServerSession) -> Option<String> {
    session
        .req_header()
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| super::parse::cookie(c, auth::COOKIE).map(str::to_owned))
        .filter(|id| !id.is_empty() && id.len() <= 128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_render() {
        let login = templates()
            .get_template("login.html")
            .unwrap()
            .render(json!({"error": "<b>", "no_operators": false}))
            .unwrap();
        assert!(login.contains("name=\"token\""), "{login}");
        assert!(login.contains("&lt;b&gt;"), "{login}");
        for can_act in [true, false] {
            let page = templates()
                .get_template("console.html")
                .unwrap()
                .render(json!({
                    "operator": "alice<", "role": "operator", "csrf": "c0ffee",
                    "can_act": can_act, "version": "1"
                }))
                .unwrap();
            assert!(
                page.contains("name=\"csrf-token\" content=\"c0ffee\""),
                "{page}"
            );
            assert!(page.contains("alice&lt;"), "{page}");
            assert_eq!(page.contains("data-action"), can_act, "{page}");
        }
    }
}
