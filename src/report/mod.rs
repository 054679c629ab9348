//! `vestibule report`: one room's minutes over a time span, from the per-minute history every
//! node keeps (`src/history/`) and the operator actions in the audit log, written as
//! `report.json`, `minutes.csv` and a self-contained `report.html` (`html.rs`, its charts drawn
//! as SVG by `svg.rs`).
//!
//! It reads files only, so it works with the proxy stopped. The records of several nodes (a
//! cluster's files copied into one folder, or a folder they share) are merged as
//! [`vestibule_core::history::merge`] says. A file that cannot be read, or a line that is not a
//! whole record (the last one of a file a crash cut short), is skipped and said, never fatal.

mod html;
mod svg;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use vestibule_core::history::{self, Minute, WAIT_BUCKETS};

/// What to report on.
#[derive(Clone, Debug)]
pub struct Request {
    pub room: String,
    /// Unix seconds, `[from, to)`.
    pub from: u64,
    pub to: u64,
    /// The event reported on, when it was chosen by name.
    pub event: Option<String>,
    pub history_dir: PathBuf,
    pub audit_file: Option<PathBuf>,
    /// What the room's cap is: `new_users_per_minute` or an allow percentage.
    pub lottery: bool,
}

/// One operator action, as the audit log has it.
#[derive(Clone, Debug, Serialize)]
pub struct Action {
    pub time: String,
    pub operator: String,
    pub action: String,
    pub args: Value,
    pub via: String,
}

/// The whole span's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    pub minutes: usize,
    pub arrivals: u64,
    pub admitted: u64,
    /// Of `admitted`, those from the line.
    pub admitted_from_line: u64,
    pub abandoned: u64,
    pub peak_waiting: u64,
    pub peak_active: u64,
    /// Time to admission over the span (seconds), of those admitted from the line.
    pub wait_p50: Option<f64>,
    pub wait_p90: Option<f64>,
    pub wait_p99: Option<f64>,
    pub pages: u64,
    pub json: u64,
    pub api: u64,
    pub challenges: u64,
    pub challenges_solved: u64,
    pub invitations: u64,
    pub invitations_refused: u64,
    pub ratelimited: u64,
    pub origin_errors: u64,
    /// The worst minute's origin p95, milliseconds.
    pub origin_p95_ms_max: Option<f64>,
    pub nodes: Vec<String>,
}

/// The report: what `report.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub room: String,
    pub event: Option<String>,
    pub from: String,
    pub to: String,
    /// `new_users_per_minute` (capacity rooms) or `allow_percentage` (lottery rooms).
    pub cap_is: &'static str,
    pub totals: Totals,
    pub minutes: Vec<Minute>,
    pub actions: Vec<Action>,
    /// What was skipped while reading, in words.
    pub skipped: Vec<String>,
}

/// Why no report was written.
#[derive(Debug)]
pub enum Failure {
    /// Nothing in the span (exit 1).
    Nothing(String),
    /// A file or folder that could not be read or written (exit 1).
    Io(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Nothing(s) | Failure::Io(s) => f.write_str(s),
        }
    }
}

/// Reads the history and the audit log, and builds the report. What was skipped is in
/// [`Report::skipped`].
pub fn build(req: &Request) -> Result<Report, Failure> {
    let (records, mut skipped) = crate::history::read_dir(&req.history_dir).map_err(|e| {
        Failure::Io(format!(
            "{}: cannot read the history ({e})",
            req.history_dir.display()
        ))
    })?;
    // Merged with the minute just before the span too, so the span's first minute works out its
    // abandonment from the cluster's figures like every other; then cut to the span.
    let records = records.into_iter().filter(|m| {
        m.room == req.room
            && history::parse_start(&m.start)
                .is_some_and(|t| (req.from.saturating_sub(60)..req.to).contains(&t))
    });
    let minutes: Vec<_> = history::merge(records)
        .into_iter()
        .filter(|m| history::parse_start(&m.start).is_some_and(|t| t >= req.from))
        .collect();
    if minutes.is_empty() {
        return Err(Failure::Nothing(format!(
            "no history of room {} from {} to {} in {}",
            req.room,
            history::rfc3339(req.from),
            history::rfc3339(req.to),
            req.history_dir.display()
        )));
    }
    let actions = match &req.audit_file {
        Some(path) => read_actions(path, req, &mut skipped),
        None => Vec::new(),
    };
    Ok(Report {
        room: req.room.clone(),
        event: req.event.clone(),
        from: history::rfc3339(req.from),
        to: history::rfc3339(req.to),
        cap_is: if req.lottery {
            "allow_percentage"
        } else {
            "new_users_per_minute"
        },
        totals: totals(&minutes),
        minutes,
        actions,
        skipped,
    })
}

/// The operator actions on `req.room` in the span, oldest first. A missing audit log has none.
fn read_actions(path: &Path, req: &Request, skipped: &mut Vec<String>) -> Vec<Action> {
    let text = match std::fs::read(path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            skipped.push(format!("{}: not read ({e})", path.display()));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            skipped.push(format!(
                "{}:{}: skipped a line that is not a whole record",
                path.display(),
                i + 1
            ));
            continue;
        };
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let time = s("time");
        let in_span = history::parse_start(&time).is_some_and(|t| (req.from..req.to).contains(&t));
        if s("room") != req.room || !in_span {
            continue;
        }
        out.push(Action {
            time,
            operator: s("operator"),
            action: s("action"),
            args: v.get("args").cloned().unwrap_or(Value::Null),
            via: s("via"),
        });
    }
    out.sort_by(|a, b| a.time.cmp(&b.time));
    out
}

fn totals(minutes: &[Minute]) -> Totals {
    let mut t = Totals {
        minutes: minutes.len(),
        ..Totals::default()
    };
    let mut waits = Vec::new();
    let mut nodes = std::collections::BTreeSet::new();
    for m in minutes {
        t.arrivals += m.arrivals;
        t.admitted += m.admitted;
        t.admitted_from_line += m.waited;
        t.abandoned += m.abandoned;
        t.peak_waiting = t.peak_waiting.max(m.waiting);
        t.peak_active = t.peak_active.max(m.active);
        t.pages += m.pages;
        t.json += m.json;
        t.api += m.api;
        t.challenges += m.challenges;
        t.challenges_solved += m.challenges_solved;
        t.invitations += m.invitations;
        t.invitations_refused += m.invitations_refused;
        t.ratelimited += m.ratelimited;
        t.origin_errors += m.origin_errors;
        if let Some(p) = m.origin_p95_ms {
            t.origin_p95_ms_max = Some(t.origin_p95_ms_max.map_or(p, |x: f64| x.max(p)));
        }
        history::add_buckets(&mut waits, &m.waits);
        nodes.extend(m.node.split(',').map(str::to_owned));
    }
    let q =
        |p: f64| history::quantile(&WAIT_BUCKETS, &waits, p).map(|x| (x * 100.0).round() / 100.0);
    (t.wait_p50, t.wait_p90, t.wait_p99) = (q(0.5), q(0.9), q(0.99));
    t.nodes = nodes.into_iter().collect();
    t
}

/// HTML-escapes `s`; the same escaping serves the SVG inside the page.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The CSV columns, in order.
const CSV_COLUMNS: &[&str] = &[
    "start",
    "arrivals",
    "admitted",
    "admitted_from_line",
    "cap",
    "waiting",
    "active",
    "abandoned",
    "wait_p50",
    "wait_p90",
    "wait_p99",
    "pages",
    "json",
    "api",
    "challenges",
    "challenges_solved",
    "invitations",
    "invitations_refused",
    "ratelimited",
    "origin_p95_ms",
    "origin_target_ms",
    "origin_errors",
    "nodes",
    "partial",
];

/// `minutes.csv`: one row per minute.
pub fn csv(report: &Report) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
    for m in &report.minutes {
        let row = [
            m.start.clone(),
            m.arrivals.to_string(),
            m.admitted.to_string(),
            m.waited.to_string(),
            opt(m.cap),
            m.waiting.to_string(),
            m.active.to_string(),
            m.abandoned.to_string(),
            opt(m.wait_p50),
            opt(m.wait_p90),
            opt(m.wait_p99),
            m.pages.to_string(),
            m.json.to_string(),
            m.api.to_string(),
            m.challenges.to_string(),
            m.challenges_solved.to_string(),
            m.invitations.to_string(),
            m.invitations_refused.to_string(),
            m.ratelimited.to_string(),
            opt(m.origin_p95_ms),
            opt(m.origin_target_ms),
            m.origin_errors.to_string(),
            // Node names are the operator's: quoted, in case one has a comma.
            format!("\"{}\"", m.node.replace('"', "\"\"")),
            m.partial.to_string(),
        ];
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// Writes `report.json`, `minutes.csv` and `report.html` into `dir` (made if missing).
pub fn write(report: &Report, dir: &Path) -> Result<(), Failure> {
    let io = |path: &Path, e: std::io::Error| Failure::Io(format!("{}: {e}", path.display()));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    let path = dir.join("report.json");
    std::fs::write(&path, json + "\n").map_err(|e| io(&path, e))?;
    let path = dir.join("minutes.csv");
    std::fs::write(&path, csv(report)).map_err(|e| io(&path, e))?;
    let page = html::render(report);
    let path = dir.join("report.html");
    std::fs::write(&path, page).map_err(|e| io(&path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(start: &str, node: &str, arrivals: u64, admitted: u64) -> Minute {
        Minute {
            start: start.into(),
            room: "sale".into(),
            node: node.into(),
            arrivals,
            admitted,
            waited: admitted,
            waits: vec![0, 0, 0, 0, 0, 0, 0, 0, admitted],
            waiting: 10,
            cap: Some(60.0),
            ..Minute::default()
        }
    }

    fn write_lines(path: &Path, records: &[Minute]) {
        let text: String = records.iter().map(Minute::to_line).collect();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_cluster_s_files_merge_and_the_span_is_half_open() {
        let dir = tempfile::tempdir().unwrap();
        let history_dir = dir.path().join("history");
        std::fs::create_dir(&history_dir).unwrap();
        write_lines(
            &history_dir.join("2026-11-27.jsonl"),
            &[
                record("2026-11-27T20:00:00Z", "a", 10, 4),
                record("2026-11-27T20:01:00Z", "a", 5, 5),
                record("2026-11-27T20:02:00Z", "a", 99, 99),
            ],
        );
        // Node b's file, copied in beside a's under another name.
        write_lines(
            &history_dir.join("b-2026-11-27.jsonl"),
            &[record("2026-11-27T20:00:00Z", "b", 7, 3)],
        );
        // A torn last line.
        let mut torn = std::fs::read(history_dir.join("b-2026-11-27.jsonl")).unwrap();
        torn.extend_from_slice(br#"{"start":"2026-11-27T20:01:00Z","room":"sa"#);
        std::fs::write(history_dir.join("b-2026-11-27.jsonl"), torn).unwrap();
        let audit = dir.path().join("audit.jsonl");
        std::fs::write(
            &audit,
            concat!(
                r#"{"time":"2026-11-27T20:00:30Z","operator":"alice","source":"127.0.0.1","via":"console","room":"sale","action":"pause","args":{},"before":{},"after":{}}"#,
                "\n",
                r#"{"time":"2026-11-27T20:00:40Z","operator":"alice","source":"127.0.0.1","via":"api","room":"other","action":"pause","args":{},"before":{},"after":{}}"#,
                "\n",
            ),
        )
        .unwrap();
        let from = history::parse_start("2026-11-27T20:00:00Z").unwrap();
        let req = Request {
            room: "sale".into(),
            from,
            to: from + 120,
            event: None,
            history_dir,
            audit_file: Some(audit),
            lottery: false,
        };
        let report = build(&req).unwrap();
        assert_eq!(report.minutes.len(), 2, "20:02 is past the end");
        assert_eq!(report.totals.arrivals, 22);
        assert_eq!(report.totals.admitted, 12);
        assert_eq!(report.minutes[0].node, "a,b");
        assert_eq!(report.totals.nodes, ["a", "b"]);
        assert_eq!(report.actions.len(), 1);
        assert_eq!(report.actions[0].operator, "alice");
        assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
        assert!(report.skipped[0].contains("b-2026-11-27.jsonl:2"));

        let out = dir.path().join("out");
        write(&report, &out).unwrap();
        let csv = std::fs::read_to_string(out.join("minutes.csv")).unwrap();
        assert_eq!(csv.lines().count(), 3);
        assert!(csv.starts_with("start,arrivals,admitted,"));
        let json: Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(json["minutes"][0]["arrivals"], 17);
        assert_eq!(json["totals"]["admitted"], 12);
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(html.contains("<html") && html.contains("alice"));
        assert!(!html.contains("src=\"http"), "self-contained");

        // Nothing in another span.
        let empty = Request {
            from: from + 3600,
            to: from + 7200,
            ..req
        };
        assert!(matches!(build(&empty), Err(Failure::Nothing(_))));
    }
}
