//! `vestibule ctl`: the admin API (the operator actions, the pace override, the queue API's serving
//! counter, the audit log) from a shell, for scripts and for operators without the console.
//!
//! It owns turning a command into one request ([`Call`]), sending it ([`http`]), and turning
//! the answer into a line for people or the server's JSON (`--json`), with the exit code a
//! script can trust: 0 done, 1 refused or failed, 2 a usage error ([`Failure`]). It never reads
//! the config: it is pointed at a listener, and the token comes from a file or the environment,
//! never the command line (where `ps` and shell history would show it).

pub mod http;

use serde_json::Value;

pub use http::Endpoint;

/// The environment variable the admin token may come from.
pub const TOKEN_ENV: &str = "VESTIBULE_ADMIN_TOKEN";

/// Why a command did not do what it was asked.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// Refused by the server, or it could not be reached: exit 1.
    Failed(String),
    /// The command itself is wrong: exit 2.
    Usage(String),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Failed(_) => 1,
            Failure::Usage(_) => 2,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Failed(m) | Failure::Usage(m) => m,
        }
    }
}

/// What to ask the admin listener.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Status,
    Pause(String),
    Resume(String),
    Admit(String, u64),
    /// `None`: clear the notice.
    Message(String, Option<String>),
    SoldOut(String, bool),
    Serving(String, u64),
    /// The room, the pace, and `for` as written (already checked to be a duration).
    Pace(String, f64, Option<String>),
    Audit {
        room: Option<String>,
        limit: Option<u32>,
    },
}

/// One request: method, path and query, body.
#[derive(Debug, PartialEq)]
struct Call {
    method: &'static str,
    path: String,
    body: Option<(&'static str, Vec<u8>)>,
}

/// How to reach the admin listener.
pub struct Client {
    pub endpoint: Endpoint,
    pub token: Option<String>,
}

impl Client {
    /// The token from `token_file` (trimmed), else from [`TOKEN_ENV`], else none.
    pub fn new(admin: &str, token_file: Option<&std::path::Path>) -> Result<Client, Failure> {
        let endpoint = Endpoint::parse(admin).map_err(Failure::Usage)?;
        let token = match token_file {
            Some(file) => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| Failure::Usage(format!("--token-file {}: {e}", file.display())))?;
                let token = text.trim();
                if token.is_empty() {
                    return Err(Failure::Usage(format!(
                        "--token-file {}: the file is empty",
                        file.display()
                    )));
                }
                Some(token.to_owned())
            }
            None => std::env::var(TOKEN_ENV)
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
        };
        // A line break in a token would end the header it is sent in.
        if token
            .as_deref()
            .is_some_and(|t| t.chars().any(|c| c.is_control()))
        {
            return Err(Failure::Usage(
                "the admin token has control characters (a line break inside it?)".into(),
            ));
        }
        Ok(Client { endpoint, token })
    }

    /// Runs `command`; returns what to print on success.
    pub fn run(&self, command: &Command, json: bool) -> Result<String, Failure> {
        let call = match command {
            Command::Pace(room, value, lasts) => self.pace_call(room, *value, lasts.as_deref())?,
            other => call(other),
        };
        let answer = self.send(&call)?;
        if json {
            return Ok(match serde_json::from_slice::<Value>(&answer) {
                Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
                Err(_) => String::from_utf8_lossy(&answer).trim_end().to_owned(),
            });
        }
        let v: Value = serde_json::from_slice(&answer).map_err(|_| {
            Failure::Failed(format!(
                "the answer is not JSON: {}",
                String::from_utf8_lossy(&answer).trim()
            ))
        })?;
        Ok(match command {
            Command::Status => status_summary(&v),
            Command::Audit { .. } => audit_summary(&v),
            Command::Serving(room, _) => {
                format!("room {room}: serving number now {}", v["serving_number"])
            }
            _ => action_summary(&v),
        })
    }

    /// `pace`: the key after the room's admission, which `/status` says.
    fn pace_call(&self, room: &str, value: f64, lasts: Option<&str>) -> Result<Call, Failure> {
        let status = self.send(&call(&Command::Status))?;
        let status: Value = serde_json::from_slice(&status)
            .map_err(|_| Failure::Failed("/status did not answer JSON".into()))?;
        let found = status["rooms"]
            .as_array()
            .and_then(|rooms| rooms.iter().find(|r| r["name"] == room));
        let Some(found) = found else {
            return Err(Failure::Failed(format!(
                "no room is named \"{}\"",
                room.escape_default()
            )));
        };
        let key = if found["admission"] == "lottery" {
            "allow_percentage"
        } else {
            "new_users_per_minute"
        };
        let mut body = serde_json::Map::new();
        let number = if value.fract() == 0.0 && value >= 0.0 && value < u64::MAX as f64 {
            Value::from(value as u64)
        } else {
            Value::from(value)
        };
        body.insert(key.into(), number);
        if let Some(lasts) = lasts {
            body.insert("for".into(), Value::from(lasts));
        }
        Ok(Call {
            method: "PUT",
            path: format!("/rooms/{}/overrides", encode(room)),
            body: Some((
                "application/json",
                serde_json::to_vec(&body).unwrap_or_default(),
            )),
        })
    }

    /// Sends `call`; the body of a 2xx answer, or why there was none.
    fn send(&self, call: &Call) -> Result<Vec<u8>, Failure> {
        let body = call.body.as_ref().map(|(t, b)| (*t, &b[..]));
        let answer = http::request(
            &self.endpoint,
            call.method,
            &call.path,
            self.token.as_deref(),
            body,
        )
        .map_err(Failure::Failed)?;
        if answer.status < 400 {
            return Ok(answer.body);
        }
        let said = server_message(&answer.body);
        let what = format!("{} {}", call.method, call.path);
        Err(Failure::Failed(match answer.status {
            401 if self.token.is_none() => format!(
                "{what}: 401, the admin listener needs a token: put it in a file for \
                 --token-file, or in {TOKEN_ENV}"
            ),
            401 => format!(
                "{what}: 401, the admin token was refused (check --token-file or {TOKEN_ENV})"
            ),
            403 => format!("{what}: 403, the token was refused for this: {said}"),
            status => format!("{what}: {status}, {said}"),
        }))
    }
}

/// The request for every command but `pace`.
fn call(command: &Command) -> Call {
    let room = |r: &str, what: &str| format!("/rooms/{}/{what}", encode(r));
    let (method, path, body) = match command {
        Command::Status => ("GET", "/status".to_owned(), None),
        Command::Pause(r) => ("POST", room(r, "pause"), None),
        Command::Resume(r) => ("POST", room(r, "resume"), None),
        Command::Admit(r, n) => ("POST", format!("{}?count={n}", room(r, "admit")), None),
        Command::Message(r, Some(text)) => (
            "PUT",
            room(r, "message"),
            Some(("text/plain; charset=utf-8", text.as_bytes().to_vec())),
        ),
        Command::Message(r, None) => ("DELETE", room(r, "message"), None),
        Command::SoldOut(r, true) => ("PUT", room(r, "sold-out"), None),
        Command::SoldOut(r, false) => ("DELETE", room(r, "sold-out"), None),
        Command::Serving(r, n) => (
            "POST",
            room(r, "serving"),
            Some((
                "application/json",
                serde_json::to_vec(&serde_json::json!({ "increment_by": n })).unwrap_or_default(),
            )),
        ),
        Command::Pace(r, _, _) => ("PUT", room(r, "overrides"), None),
        Command::Audit { room, limit } => {
            let mut query = Vec::new();
            if let Some(r) = room {
                query.push(format!("room={}", encode(r)));
            }
            if let Some(n) = limit {
                query.push(format!("limit={n}"));
            }
            let path = if query.is_empty() {
                "/audit".to_owned()
            } else {
                format!("/audit?{}", query.join("&"))
            };
            ("GET", path, None)
        }
    };
    Call { method, path, body }
}

/// Percent-encodes all but unreserved characters (RFC 3986), for a path segment or a query
/// value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What the server said in a refusal: a JSON answer's `error` (or `message`), else its text.
fn server_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let said = v
            .get("message")
            .or_else(|| v.get("error"))
            .and_then(Value::as_str);
        if let Some(said) = said {
            return said.to_owned();
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        "no message".into()
    } else {
        text.to_owned()
    }
}

/// A value as a short word: strings bare, `–` for none.
fn word(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A room's state in a word or two, from its `/status` entry.
fn room_state(r: &Value) -> String {
    let mut state = if r["enabled"] == false {
        "disabled".to_owned()
    } else if r["paused"] == true {
        "paused".to_owned()
    } else if r["sold_out"] == true {
        "sold-out".to_owned()
    } else if r["queue_all"] == true {
        "queue-all".to_owned()
    } else if r["admission"] == "lottery" && r["allow_percentage"] == 0 {
        "closed".to_owned()
    } else {
        "open".to_owned()
    };
    if let Some(event) = r["event_state"].as_str() {
        state.push_str(&format!(" (event {event})"));
    }
    state
}

/// A room's overrides in words: `paused by alice, pace 40/min until …`.
fn overrides_summary(o: &Value) -> String {
    let Some(o) = o.as_object() else {
        return "none".into();
    };
    let by = |v: &Value| format!("by {} at {}", word(&v["by"]), word(&v["at"]));
    let mut parts = Vec::new();
    for (key, v) in o {
        match key.as_str() {
            "version" => {}
            "paused" => parts.push(format!("paused {}", by(v))),
            "sold_out" => parts.push(format!("sold_out={} {}", word(&v["value"]), by(v))),
            "message" => parts.push(format!(
                "message \"{}\" {}",
                word(&v["text"]).escape_debug(),
                by(v)
            )),
            "last_admit" => parts.push(format!("admitted {} {}", word(&v["count"]), by(v))),
            "pace" => {
                let value = match (&v["new_users_per_minute"], &v["allow_percentage"]) {
                    (Value::Null, p) => format!("{}%", word(p)),
                    (n, _) => format!("{}/min", word(n)),
                };
                let until = match &v["until"] {
                    Value::Null => "until cleared".to_owned(),
                    u => format!("until {}", word(u)),
                };
                parts.push(format!("pace {value} {until} {}", by(v)));
            }
            other => parts.push(other.to_owned()),
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// `status`: one line per room.
fn status_summary(s: &Value) -> String {
    let rooms = s["rooms"].as_array().cloned().unwrap_or_default();
    if rooms.is_empty() {
        return "no rooms".into();
    }
    rooms
        .iter()
        .map(|r| {
            let active = match (&r["active_users"], &r["total_active_users"]) {
                (Value::Null, _) => "–".to_owned(),
                (a, Value::Number(cap)) if cap.as_u64() != Some(0) => format!("{a}/{cap}"),
                (a, _) => format!("{a}/∞"),
            };
            let pace = match &r["effective_new_users_per_minute"] {
                Value::Null => format!("allow {}%", word(&r["effective_allow_percentage"])),
                n => format!("pace {}/min", word(n)),
            };
            format!(
                "{}  {}  active {active}  waiting {}  {pace}  overrides: {}",
                word(&r["name"]),
                room_state(r),
                word(&r["waiting_users"]),
                overrides_summary(&r["overrides"])
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An action's answer: the room's overrides after it.
fn action_summary(v: &Value) -> String {
    let mut line = format!(
        "room {}: {} done; overrides: {}",
        word(&v["room"]),
        word(&v["action"]),
        overrides_summary(&v["overrides"])
    );
    if v["persisted"] == false {
        line.push_str(
            "\nwarning: the server could not write its state file; this override is lost on restart",
        );
    }
    line
}

/// `audit`: one line per record, newest first as the server lists them.
fn audit_summary(v: &Value) -> String {
    let Some(records) = v.as_array() else {
        return word(v);
    };
    if records.is_empty() {
        return "no operator actions recorded".into();
    }
    let brief = |v: &Value| match v {
        Value::Null => "–".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    records
        .iter()
        .map(|r| {
            let args = match &r["args"] {
                Value::Null => String::new(),
                Value::Object(m) if m.is_empty() => String::new(),
                a => format!(" {}", brief(a)),
            };
            format!(
                "{}  {} ({})  {}  {}{args}  {} -> {}",
                word(&r["time"]),
                word(&r["operator"]),
                word(&r["source"]),
                word(&r["room"]),
                word(&r["action"]),
                brief(&r["before"]),
                brief(&r["after"]),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `serving R +N`: the increment, `+N` or `N`, at least 1.
pub fn parse_increment(text: &str) -> Result<u64, Failure> {
    text.strip_prefix('+')
        .unwrap_or(text)
        .parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| {
            Failure::Usage(format!(
                "serving: \"{}\" is not +N (a whole number, at least 1)",
                text.escape_default()
            ))
        })
}

/// `admit R N`: a whole number, at least 1.
pub fn parse_count(text: &str) -> Result<u64, Failure> {
    text.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
        Failure::Usage(format!(
            "admit: \"{}\" is not a count (a whole number, at least 1)",
            text.escape_default()
        ))
    })
}

/// `pace R N`: a number, at least 0 (the server checks it against the room).
pub fn parse_pace(text: &str) -> Result<f64, Failure> {
    text.parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| {
            Failure::Usage(format!(
                "pace: \"{}\" is not a number (users per minute, or a percentage for a lottery room)",
                text.escape_default()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn commands_become_requests() {
        let c = call(&Command::Admit("sale one".into(), 5));
        assert_eq!(
            (c.method, c.path.as_str()),
            ("POST", "/rooms/sale%20one/admit?count=5")
        );
        let c = call(&Command::Message("sale".into(), Some("Back at 3".into())));
        assert_eq!(
            (c.method, c.body.unwrap().1),
            ("PUT", b"Back at 3".to_vec())
        );
        assert_eq!(
            call(&Command::Message("sale".into(), None)).method,
            "DELETE"
        );
        assert_eq!(
            call(&Command::SoldOut("sale".into(), false)).method,
            "DELETE"
        );
        let c = call(&Command::Serving("q".into(), 3));
        assert_eq!(c.body.unwrap().1, br#"{"increment_by":3}"#.to_vec());
        let c = call(&Command::Audit {
            room: Some("a&b".into()),
            limit: Some(5),
        });
        assert_eq!(c.path, "/audit?room=a%26b&limit=5");
    }

    #[test]
    fn arguments_are_checked_as_usage() {
        assert_eq!(parse_increment("+5").unwrap(), 5);
        assert_eq!(parse_increment("5").unwrap(), 5);
        assert_eq!(parse_increment("+0").unwrap_err().exit_code(), 2);
        assert_eq!(parse_increment("-1").unwrap_err().exit_code(), 2);
        assert_eq!(parse_count("x").unwrap_err().exit_code(), 2);
        assert_eq!(parse_pace("12.5").unwrap(), 12.5);
        assert_eq!(parse_pace("NaN").unwrap_err().exit_code(), 2);
    }

    #[test]
    fn summaries_are_one_line_each() {
        let status = json!({ "rooms": [
            { "name": "sale", "enabled": true, "admission": "fifo", "paused": true,
              "active_users": 3, "total_active_users": 100, "waiting_users": 7,
              "effective_new_users_per_minute": 40,
              "overrides": { "version": 5, "paused": { "by": "admin", "at": "T" },
                             "pace": { "new_users_per_minute": 40, "until": "U", "by": "admin", "at": "T" } } },
            { "name": "draw", "enabled": true, "admission": "lottery", "allow_percentage": 10,
              "effective_allow_percentage": 12.5, "overrides": {} },
        ]});
        let s = status_summary(&status);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 2, "{s}");
        assert_eq!(lines[0], "sale  paused  active 3/100  waiting 7  pace 40/min  overrides: pace 40/min until U by admin at T, paused by admin at T");
        assert_eq!(
            lines[1],
            "draw  open  active –  waiting –  allow 12.5%  overrides: none"
        );
        let audit = json!([{ "time": "T", "operator": "alice", "source": "api", "room": "sale",
                             "action": "pause", "args": {}, "before": { "paused": false }, "after": { "paused": true } }]);
        assert_eq!(
            audit_summary(&audit),
            r#"T  alice (api)  sale  pause  {"paused":false} -> {"paused":true}"#
        );
        assert_eq!(server_message(br#"{"error":"no room"}"#), "no room");
        assert_eq!(
            server_message(br#"{"error":"bad_request","message":"why"}"#),
            "why"
        );
        assert_eq!(
            server_message(b"a bearer token is required\n"),
            "a bearer token is required"
        );
    }
}
