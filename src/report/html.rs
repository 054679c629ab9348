//! `report.html`: one page with nothing from elsewhere: the figures, the charts as inline SVG
//! (`svg.rs`, in every build), the operator actions and every minute in a table.

use std::fmt::Write;

use super::{esc, Report};

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "–".to_owned(), |x| format!("{x:.1}{unit}"))
}

/// A duration in seconds as people read it: `42 s`, `7.5 min`, `1.2 h`.
fn span(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(s) if s < 120.0 => format!("{s:.0} s"),
        Some(s) if s < 7200.0 => format!("{:.1} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
    }
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}\
h1{font-size:1.6rem;margin-bottom:.2rem}.sub{color:#666;margin-top:0}\
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:.8rem;margin:1.2rem 0}\
.card{border:1px solid #ddd;border-radius:6px;padding:.6rem .8rem}.card b{display:block;font-size:1.4rem}\
.card span{color:#666;font-size:.85rem}table{border-collapse:collapse;font-size:.85rem;width:100%}\
th,td{border-bottom:1px solid #eee;padding:.25rem .4rem;text-align:right}th{background:#f6f6f6}\
td:first-child,th:first-child{text-align:left}.charts{overflow-x:auto}svg.chart{display:block;height:auto;min-width:640px;border:1px solid #eee}\
.note{color:#666;font-size:.85rem}details{margin:1rem 0}";

/// The whole page.
pub(super) fn render(r: &Report) -> String {
    let t = &r.totals;
    let mut h = String::with_capacity(64 * 1024);
    let title = match &r.event {
        Some(e) => format!("{} — event {}", r.room, e),
        None => r.room.clone(),
    };
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>vestibule report: {}</title>\
         <style>{STYLE}</style></head><body><h1>Waiting room report: {}</h1>\
         <p class=\"sub\">{} to {} (UTC, {} minutes with records; nodes: {})</p>",
        esc(&title),
        esc(&title),
        esc(&r.from),
        esc(&r.to),
        t.minutes,
        esc(&t.nodes.join(", "))
    );
    let cards: [(String, &str); 10] = [
        (t.arrivals.to_string(), "arrivals"),
        (t.admitted.to_string(), "admitted"),
        (t.admitted_from_line.to_string(), "admitted from the line"),
        (t.abandoned.to_string(), "left the line"),
        (t.peak_waiting.to_string(), "most waiting at once"),
        (span(t.wait_p50), "median time to admission"),
        (span(t.wait_p90), "p90 time to admission"),
        (span(t.wait_p99), "p99 time to admission"),
        (opt(t.origin_p95_ms_max, " ms"), "worst minute's origin p95"),
        (r.actions.len().to_string(), "operator actions"),
    ];
    h.push_str("<div class=\"cards\">");
    for (value, label) in cards {
        let _ = write!(
            h,
            "<div class=\"card\"><b>{}</b><span>{}</span></div>",
            esc(&value),
            label
        );
    }
    h.push_str("</div>");
    let _ = write!(
        h,
        "<p class=\"note\">Answers to held visitors: {} pages, {} JSON; {} API requests. \
         Challenges: {} issued, {} solved. Invitations: {} accepted, {} refused. \
         Rate-limited requests: {}. Origin errors (5xx or unreachable): {}.</p>",
        t.pages,
        t.json,
        t.api,
        t.challenges,
        t.challenges_solved,
        t.invitations,
        t.invitations_refused,
        t.ratelimited,
        t.origin_errors
    );
    h.push_str("<h2>Minute by minute</h2>");
    h.push_str(&charts(r));
    h.push_str("<h2>Operator actions</h2>");
    if r.actions.is_empty() {
        h.push_str("<p class=\"note\">None in this span (from the audit log).</p>");
    } else {
        h.push_str(
            "<table><tr><th>time (UTC)</th><th>minute</th><th>operator</th><th>action</th><th>arguments</th><th>via</th></tr>",
        );
        let from = vestibule_core::history::parse_start(&r.from).unwrap_or(0);
        for a in &r.actions {
            let minute = vestibule_core::history::parse_start(&a.time).map_or(String::new(), |t| {
                format!("{:.1}", (t.saturating_sub(from)) as f64 / 60.0)
            });
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&a.time),
                minute,
                esc(&a.operator),
                esc(&a.action),
                esc(&a.args.to_string()),
                esc(&a.via)
            );
        }
        h.push_str("</table>");
    }
    h.push_str("<details><summary>Every minute</summary><table><tr><th>start</th><th>arrivals</th><th>admitted</th><th>cap</th><th>waiting</th><th>active</th><th>left</th><th>p50</th><th>p90</th><th>p99</th><th>origin p95</th></tr>");
    for m in &r.minutes {
        let _ = write!(
            h,
            "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&m.start),
            if m.partial { " (part)" } else { "" },
            m.arrivals,
            m.admitted,
            opt(m.cap, ""),
            m.waiting,
            m.active,
            m.abandoned,
            span(m.wait_p50),
            span(m.wait_p90),
            span(m.wait_p99),
            opt(m.origin_p95_ms, " ms"),
        );
    }
    h.push_str("</table></details>");
    if !r.skipped.is_empty() {
        h.push_str("<h2>Skipped while reading</h2><ul>");
        for s in &r.skipped {
            let _ = write!(h, "<li>{}</li>", esc(s));
        }
        h.push_str("</ul>");
    }
    let _ = write!(
        h,
        "<p class=\"note\">Cap: {}. Time to admission counts visitors admitted from the line \
         (not those let straight in), from their first arrival. A visitor has left the line once \
         they stopped checking in for the room's liveness window. Origin figures are this node's \
         answers for every room. Written by vestibule report; the same figures are in \
         report.json and minutes.csv.</p></body></html>",
        r.cap_is
    );
    h.push('\n');
    h
}

/// The charts, one inline `<svg>` (`svg.rs`), and what its grey lines are. On a phone the
/// figure keeps a readable size and scrolls sideways rather than shrinking its text to nothing.
fn charts(r: &Report) -> String {
    format!(
        "<div class=\"charts\">{}</div><p class=\"note\">Grey vertical lines: operator actions (listed below; point at one \
         for who did what).</p>",
        super::svg::render(r)
    )
}
