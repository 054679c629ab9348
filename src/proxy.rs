//! The Pingora `ProxyHttp` implementation: HTTP in, the core's decisions out.
//!
//! This file only translates. It reads the request into the core's inputs, asks the core, and
//! writes what the core decided: a synthetic page, or a forwarded request with its headers
//! cleaned. Every synthetic response sets `Content-Length` so keep-alive survives.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::ErrorSource;

use crate::app::App;
use crate::pages::{self, Estimates, PageContext, PageKind};
use crate::snapshot::Snapshot;

/// Request headers with this prefix are ours: a client's copies never reach the origin.
const INTERNAL_PREFIX: &str = "vestibule-";
const NO_STORE: &str = "no-store, private";

pub struct Proxy {
    app: Arc<App>,
}

impl Proxy {
    pub fn new(app: Arc<App>) -> Proxy {
        Proxy { app }
    }
}

/// Per-request state. Dropped after `logging` on every path.
pub struct RequestCtx {
    snapshot: Arc<Snapshot>,
    started: Instant,
    peer_ip: Option<IpAddr>,
    /// Origin addresses tried for this request (retries skip them).
    tried: Vec<SocketAddr>,
    upstream_sent: Option<Instant>,
    upstream_status: Option<u16>,
    upstream_seconds: Option<f64>,
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            snapshot: self.app.snapshot(),
            started: Instant::now(),
            peer_ip: None,
            tried: Vec::new(),
            upstream_sent: None,
            upstream_status: None,
            upstream_seconds: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.peer_ip = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_canonical());
        Ok(false)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        match ctx.snapshot.upstream.select(&ctx.tried) {
            Some(peer) => {
                if let Some(addr) = peer.address().as_inet() {
                    ctx.tried.push(*addr);
                }
                Ok(peer)
            }
            None => Err(Error::create(
                ErrorType::ConnectNoRoute,
                ErrorSource::Upstream,
                Some("no healthy origin peer is left to try".into()),
                None,
            )),
        }
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        // Another peer may answer: let upstream_peer pick the next untried one.
        if ctx.tried.len() < ctx.snapshot.upstream.peer_count() {
            e.set_retry(true);
        }
        e
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        strip_internal_headers(upstream);
        if let Some(peer) = ctx.peer_ip {
            let trusted = ctx.snapshot.config.identity.is_trusted(peer);
            set_forwarded_for(upstream, peer, trusted)?;
        }
        ctx.upstream_sent = Some(Instant::now());
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if upstream_response.status.is_informational() {
            return Ok(());
        }
        ctx.upstream_status = Some(upstream_response.status.as_u16());
        ctx.upstream_seconds = ctx.upstream_sent.map(|t| t.elapsed().as_secs_f64());
        Ok(())
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                504
            }
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => 0,
                    _ => 400,
                },
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        // Nothing can be written once the client is gone or a response has started.
        if code == 0 || session.response_written().is_some() {
            return FailToProxy {
                error_code: code,
                can_reuse_downstream: false,
            };
        }
        if code == 502 {
            self.app.metrics.upstream_unavailable.inc();
        }
        let written = write_error_page(session, &ctx.snapshot, code).await;
        if let Err(err) = written {
            log::debug!("could not write the {code} page: {err}");
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        if let Some(status) = ctx.upstream_status {
            self.app
                .metrics
                .observe_upstream(status, ctx.upstream_seconds);
        }
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        log::debug!(
            target: "vestibule::access",
            "{} {} {} {}ms",
            session.req_header().method,
            session.req_header().uri.path(),
            status,
            ctx.started.elapsed().as_millis()
        );
    }
}

/// Writes a complete synthetic response with `Content-Length`, keeping the connection alive.
pub(crate) async fn respond(
    session: &mut Session,
    status: u16,
    content_type: &'static str,
    extra: Vec<(http::HeaderName, HeaderValue)>,
    body: Bytes,
) -> Result<()> {
    let mut resp = ResponseHeader::build(status, Some(4 + extra.len()))?;
    resp.insert_header(header::CONTENT_TYPE, content_type)?;
    resp.insert_header(header::CONTENT_LENGTH, body.len().to_string())?;
    resp.insert_header(header::CACHE_CONTROL, NO_STORE)?;
    for (name, value) in extra {
        resp.append_header(name, value)?;
    }
    let head_only = session.req_header().method == http::Method::HEAD;
    session
        .write_response_header(Box::new(resp), head_only)
        .await?;
    if !head_only {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(())
}

async fn write_error_page(session: &mut Session, snapshot: &Snapshot, code: u16) -> Result<()> {
    let retry_after = 5u64;
    let accept = session
        .req_header()
        .headers
        .get(header::ACCEPT)
        .map(|v| v.as_bytes());
    let extra = vec![(header::RETRY_AFTER, HeaderValue::from(retry_after))];
    if pages::wants_json(accept) {
        let body = pages::json(&serde_json::json!({
            "error": if code == 502 { "origin_unavailable" } else { "proxy_error" },
            "status": code,
            "retry_after": retry_after,
        }));
        return respond(session, code, "application/json", extra, body).await;
    }
    let ctx = PageContext {
        room: "this site",
        decision: "error",
        refresh_seconds: retry_after,
        queueing: "",
        queue_all: false,
        users_ahead: None,
        wait_estimate_minutes: Estimates::default(),
        retry_after,
        rule: "",
        status: code,
    };
    let body = snapshot.pages.render(PageKind::Error, &ctx);
    respond(session, code, "text/html; charset=utf-8", extra, body).await
}

/// Removes every request header in our namespace: the origin must never see one, and a client
/// must never be able to set one.
fn strip_internal_headers(req: &mut RequestHeader) {
    let internal: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| name.as_str().starts_with(INTERNAL_PREFIX))
        .cloned()
        .collect();
    for name in internal {
        req.remove_header(&name);
    }
}

/// Appends the TCP peer to `X-Forwarded-For`. A chain is kept only when the peer is a trusted
/// proxy: an untrusted client's own claims are replaced, so every hop the origin sees was
/// recorded by someone we trust.
fn set_forwarded_for(req: &mut RequestHeader, peer: IpAddr, trusted: bool) -> Result<()> {
    let mut chain = String::new();
    if trusted {
        for value in req.headers.get_all("x-forwarded-for") {
            if let Ok(v) = value.to_str() {
                let v = v.trim();
                if !v.is_empty() {
                    if !chain.is_empty() {
                        chain.push_str(", ");
                    }
                    chain.push_str(v);
                }
            }
        }
    }
    if !chain.is_empty() {
        chain.push_str(", ");
    }
    chain.push_str(&peer.to_string());
    req.insert_header("x-forwarded-for", chain)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_trust() {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.append_header("x-forwarded-for", "6.6.6.6").unwrap();
        req.append_header("x-forwarded-for", "7.7.7.7").unwrap();
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let mut trusted = req.clone();
        set_forwarded_for(&mut trusted, peer, true).unwrap();
        assert_eq!(
            trusted
                .headers
                .get_all("x-forwarded-for")
                .iter()
                .collect::<Vec<_>>(),
            ["6.6.6.6, 7.7.7.7, 10.0.0.1"]
        );
        set_forwarded_for(&mut req, peer, false).unwrap();
        assert_eq!(
            req.headers
                .get_all("x-forwarded-for")
                .iter()
                .collect::<Vec<_>>(),
            ["10.0.0.1"]
        );
    }

    #[test]
    fn internal_headers_are_stripped() {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.append_header("Vestibule-Command", "revoke").unwrap();
        req.append_header("vestibule-decision", "allow").unwrap();
        req.append_header("x-keep", "1").unwrap();
        strip_internal_headers(&mut req);
        assert_eq!(req.headers.len(), 1);
        assert!(req.headers.contains_key("x-keep"));
    }
}
