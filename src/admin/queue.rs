//! The queue API's private half on the admin listener, named after the AWS Virtual Waiting
//! Room's functions: move the serving counter (IncrementServingCounter), a token for a request
//! (AuthGenerateToken), count active and expired tokens (GetNumActiveTokens,
//! GetExpiredTokens), end a session (UpdateSession), and reset (ResetState).

use http::{Method, StatusCode};
use serde_json::{json, Value};
use vestibule_core::api::queue::{self as core, SessionEnd, TokenState};

use crate::app::App;
use crate::room::Room;

/// An action of the private API, for the audit log.
pub(super) struct Done {
    pub action: &'static str,
    /// An operator's action, for the audit log (`serving`, `reset`); the site's per-visitor
    /// calls (`tokens`, `session`) are counted and logged only, or they would drown it.
    pub audited: bool,
    pub args: Value,
    pub before: Value,
    pub after: Value,
    pub detail: String,
}

/// What the private API answers, and the action it took if any: `None` when `what` is none of
/// its paths (an operator action).
pub(super) fn answer(
    app: &App,
    room: &Room,
    (method, what, query, body): (&Method, &str, &str, &[u8]),
    keys: Option<&vestibule_core::keys::KeyRing>,
    issuer: &str,
) -> Option<(StatusCode, Value, Option<Done>)> {
    let private = matches!(what, "serving" | "tokens" | "reset") || what.starts_with("sessions/");
    if !private {
        return None;
    }
    let now = crate::time::now();
    let Some(queue) = room.numbered(now) else {
        let (status, body) = bad(
            StatusCode::NOT_FOUND,
            "this room has no queue API (api = true)",
        );
        return Some((status, body, None));
    };
    let Some(ring) = keys else {
        let (status, body) = bad(
            StatusCode::SERVICE_UNAVAILABLE,
            "the key ring is not loaded",
        );
        return Some((status, body, None));
    };
    let ledger = app.state.ledgers.cell(room.name());
    let json_body = || -> Result<Value, (StatusCode, Value)> {
        if body.len() > crate::api::MAX_BODY {
            return Err(bad(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the body is longer than 8 KiB",
            ));
        }
        serde_json::from_slice::<Value>(body)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| bad(StatusCode::BAD_REQUEST, "the body must be a JSON object"))
    };
    let mut done: Option<Done> = None;
    let result = match (method, what) {
        (&Method::POST, "serving") => (|| {
            let b = json_body()?;
            let by = b
                .get("increment_by")
                .and_then(Value::as_u64)
                .filter(|n| (1..=1_000_000).contains(n))
                .ok_or_else(|| {
                    bad(
                        StatusCode::BAD_REQUEST,
                        "increment_by must be a whole number from 1 to 1000000",
                    )
                })?;
            let before = queue.serving_number();
            let serving = queue.move_serving(by, now);
            app.events
                .serving_moved(room.name(), before, serving, "operator");
            done = Some(Done {
                audited: true,
                action: "serving",
                args: json!({ "increment_by": by }),
                before: json!({ "serving_number": before }),
                after: json!({ "serving_number": serving }),
                detail: format!("serving counter moved by {by} to {serving}"),
            });
            Ok((StatusCode::OK, json!({ "serving_number": serving })))
        })(),
        (&Method::POST, "tokens") => (|| {
            let b = json_body()?;
            let id = b
                .get("request_id")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(StatusCode::BAD_REQUEST, "request_id is missing"))?;
            let validity = match b.get("validity") {
                None | Some(Value::Null) => None,
                Some(Value::String(v)) => Some(
                    humantime::parse_duration(v)
                        .ok()
                        .filter(|d| d.as_secs() >= 1 && d.as_secs() <= 7 * 86_400)
                        .ok_or_else(|| {
                            bad(
                                StatusCode::BAD_REQUEST,
                                "validity must be a duration from 1s to 7d, like \"30m\"",
                            )
                        })?,
                ),
                Some(_) => {
                    return Err(bad(
                        StatusCode::BAD_REQUEST,
                        "validity must be a string like \"30m\"",
                    ))
                }
            };
            let issuer = match b.get("issuer") {
                None | Some(Value::Null) => issuer.to_owned(),
                Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => s.clone(),
                Some(_) => {
                    return Err(bad(
                        StatusCode::BAD_REQUEST,
                        "issuer must be 1 to 256 characters",
                    ))
                }
            };
            let issued = core::generate(room, ring, &ledger, (&issuer, validity), id, now)
                .map_err(|e| refused(&e))?;
            app.metrics
                .jwt_issued
                .with_label_values(&[room.name()])
                .inc();
            app.events.jwt_issued(room.name(), id, "admin");
            // The token itself is a secret: the record names the request, not the token.
            done = Some(Done {
                audited: false,
                action: "tokens",
                args: json!({
                    "queue_number": id.split('.').next().unwrap_or(""),
                    "validity_seconds": validity.map(|d| d.as_secs()),
                    "issuer": issuer,
                }),
                before: json!({}),
                after: json!({ "expires_in": issued.expires_in }),
                detail: format!(
                    "a token for queue number {}",
                    id.split('.').next().unwrap_or("")
                ),
            });
            Ok((
                StatusCode::OK,
                json!({ "access_token": issued.access_token, "expires_in": issued.expires_in }),
            ))
        })(),
        (&Method::GET, "tokens") => (|| {
            let state = query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == "state")
                .map(|(_, v)| v);
            let state = match state {
                Some("active") => TokenState::Active,
                Some("expired") => TokenState::Expired,
                _ => {
                    return Err(bad(
                        StatusCode::BAD_REQUEST,
                        "state must be active or expired",
                    ))
                }
            };
            let (count, ids) = core::tokens(room, &ledger, state, now).map_err(|e| refused(&e))?;
            Ok((
                StatusCode::OK,
                match state {
                    TokenState::Active => json!({ "count": count }),
                    TokenState::Expired => json!({ "count": count, "request_ids": ids }),
                },
            ))
        })(),
        (&Method::PUT, w) if w.starts_with("sessions/") => (|| {
            let id = &w["sessions/".len()..];
            let b = json_body()?;
            let how = match b.get("status").and_then(Value::as_str) {
                Some("completed") => SessionEnd::Completed,
                Some("abandoned") => SessionEnd::Abandoned,
                _ => {
                    return Err(bad(
                        StatusCode::BAD_REQUEST,
                        "status must be completed or abandoned",
                    ))
                }
            };
            core::end_session(room, ring, &ledger, id, how, now).map_err(|e| refused(&e))?;
            let label = match how {
                SessionEnd::Completed => "completed",
                SessionEnd::Abandoned => "abandoned",
            };
            let number = id.split('.').next().and_then(|n| n.parse().ok());
            app.events.session_updated(room.name(), label, number, None);
            done = Some(Done {
                audited: false,
                action: "session",
                args: json!({
                    "queue_number": id.split('.').next().unwrap_or(""),
                    "status": label,
                }),
                before: json!({}),
                after: json!({ "status": label }),
                detail: format!("a session marked {label}"),
            });
            Ok((StatusCode::OK, json!({ "status": label })))
        })(),
        (&Method::POST, "reset") => (|| {
            let b = json_body()?;
            if b.get("confirm").and_then(Value::as_str) != Some(room.name()) {
                return Err(bad(
                    StatusCode::BAD_REQUEST,
                    "a reset needs {\"confirm\": \"<the room's name>\"}",
                ));
            }
            let before = json!({
                "queue_number": queue.last_number(),
                "serving_number": queue.serving_number(),
            });
            core::reset(room, &ledger, now).map_err(|e| refused(&e))?;
            done = Some(Done {
                audited: true,
                action: "reset",
                args: json!({ "confirm": room.name() }),
                before,
                after: json!({ "queue_number": 0, "serving_number": 0 }),
                detail: "the queue was reset".to_owned(),
            });
            Ok((
                StatusCode::OK,
                json!({ "reset": true, "serving_number": 0 }),
            ))
        })(),
        _ => Err(bad(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{method} does not apply to {what}; see the queue API in the docs"),
        )),
    };
    let (status, body) = result.unwrap_or_else(|e| e);
    Some((status, body, done.filter(|_| status.is_success())))
}

fn bad(status: StatusCode, message: &str) -> (StatusCode, Value) {
    let code = match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "bad_request",
    };
    (status, json!({ "error": code, "message": message }))
}

fn refused(e: &core::ApiError) -> (StatusCode, Value) {
    let (status, body) = crate::api::refusal_body(e);
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        body,
    )
}
