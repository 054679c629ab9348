//! The report's charts as one inline SVG, drawn by hand so that every build has them: the
//! packaged build leaves the plotting library out, and a report is read by people who never see
//! the proxy's dashboard. Five panels share one x axis (minutes from the report's start), each
//! with its legend; operator actions are grey vertical lines across them all, their tooltip
//! saying who did what.
//!
//! A series is one polyline per run of minutes that have a value. A minute without one (no cap,
//! nobody admitted from the line, no record at all) breaks the line, so a gap never reads as a
//! slope; a run of one minute is a dot. Coordinates are rounded to a tenth of a pixel, which
//! keeps a day's 1,440 minutes to a few hundred KB.
//!
//! Everything here writes text the history and the audit log supplied (room, operator and
//! action names): it goes through [`super::esc`] and never into an attribute unquoted.

use std::fmt::Write;

use vestibule_core::history::{parse_start, Minute};

use super::Report;

/// The drawing's width in user units; the page scales it (`width="100%"` and a viewBox).
const WIDTH: f64 = 1000.0;
/// Room for the y tick labels.
const LEFT: f64 = 58.0;
const RIGHT: f64 = 14.0;
/// The figure's title line.
const TITLE: f64 = 30.0;
/// Each panel's legend row, above its plot.
const LEGEND: f64 = 22.0;
/// Each panel's plot height.
const PLOT: f64 = 120.0;
const GAP: f64 = 14.0;
/// The x tick labels and the axis's name, under the last panel only.
const AXIS: f64 = 40.0;
/// Minutes further apart than this have a minute without a record between them.
const MISSING: f64 = 1.5;

/// The same colours as the PNG charts `vestibule simulate` draws, dark enough for a white page.
const PALETTE: [&str; 6] = [
    "#3558d6", "#d65335", "#16803c", "#963cb4", "#c89614", "#5a5a5a",
];

/// One series: (minutes from the start, value) per minute, `None` where it has none.
struct Line {
    name: &'static str,
    color: usize,
    points: Vec<(f64, Option<f64>)>,
}

/// One panel over the shared x axis.
struct Panel {
    label: &'static str,
    /// Counts: the y ticks are whole numbers.
    integer: bool,
    lines: Vec<Line>,
    /// A horizontal reference line and its name.
    target: Option<(f64, &'static str)>,
}

/// The charts of `r`: one `<svg>` element, to be inlined in the page.
pub(super) fn render(r: &Report) -> String {
    let from = parse_start(&r.from).unwrap_or(0);
    let at = |time: &str| parse_start(time).map(|t| t.saturating_sub(from) as f64 / 60.0);
    let minutes: Vec<(f64, &Minute)> = r
        .minutes
        .iter()
        .filter_map(|m| Some((at(&m.start)?, m)))
        .collect();
    let panels = panels(r, &minutes);
    let events: Vec<(f64, String)> = r
        .actions
        .iter()
        .filter_map(|a| {
            let x = at(&a.time)?;
            Some((x, format!("{} {}: {}", a.time, a.operator, a.action)))
        })
        .collect();
    // One minute, or none, still gets an axis one minute wide.
    let x_hi = minutes
        .iter()
        .map(|(x, _)| *x)
        .chain(events.iter().map(|e| e.0))
        .fold(1.0f64, f64::max);
    let x_of = |x: f64| LEFT + x.clamp(0.0, x_hi) / x_hi * (WIDTH - LEFT - RIGHT);
    let height = TITLE + panels.len() as f64 * (LEGEND + PLOT + GAP) - GAP + AXIS;
    let plot_top = |i: usize| TITLE + i as f64 * (LEGEND + PLOT + GAP) + LEGEND;

    let mut s = String::with_capacity(16 * 1024 + minutes.len() * 160);
    let title = format!("{} — {} to {}", r.room, r.from, r.to);
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 {} {}\" \
         width=\"100%\" role=\"img\" aria-labelledby=\"chart-title chart-desc\" \
         font-family=\"system-ui,-apple-system,Segoe UI,sans-serif\" font-size=\"11\">\
         <title id=\"chart-title\">Minute by minute: {}</title><desc id=\"chart-desc\">Five \
         panels over the minutes from {}: arrivals, admissions and the cap per minute; visitors \
         waiting and active; time to admission (p50, p90, p99, in minutes); visitors who left \
         the line per minute; the origin's p95 response time in milliseconds with its errors \
         per minute and the autopilot's target. Grey vertical lines are operator actions. The \
         same figures are in the table below.</desc>\
         <rect width=\"{}\" height=\"{}\" fill=\"#fff\"/>\
         <text x=\"{}\" y=\"19\" font-size=\"13\" font-weight=\"600\" fill=\"#222\">{}</text>",
        n(WIDTH),
        n(height),
        text(&title),
        text(&r.from),
        n(WIDTH),
        n(height),
        n(LEFT),
        text(&title),
    );

    let x_step = x_step(x_hi);
    let x_ticks: Vec<f64> = (0..=(x_hi / x_step).floor() as usize)
        .map(|k| k as f64 * x_step)
        .collect();
    let mut scales = Vec::with_capacity(panels.len());
    for (i, panel) in panels.iter().enumerate() {
        let (top_y, bottom_y) = (plot_top(i), plot_top(i) + PLOT);
        let max = panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().filter_map(|p| p.1))
            .chain(panel.target.map(|t| t.0))
            .fold(0.0f64, f64::max);
        let (top, step) = y_axis(max, panel.integer);
        let y_of = move |v: f64| bottom_y - v.clamp(0.0, top) / top * PLOT;
        scales.push(y_of);
        legend(&mut s, panel, top_y - LEGEND + 15.0);
        // The grid first, under everything.
        let y_ticks: Vec<f64> = (0..=(top / step).round().min(20.0) as usize)
            .map(|k| k as f64 * step)
            .collect();
        s.push_str("<path fill=\"none\" stroke=\"#ececec\" d=\"");
        for v in y_ticks.iter().skip(1) {
            let _ = write!(s, "M{} {}H{}", n(LEFT), n(y_of(*v)), n(WIDTH - RIGHT));
        }
        for x in x_ticks.iter().skip(1) {
            let _ = write!(s, "M{} {}V{}", n(x_of(*x)), n(top_y), n(bottom_y));
        }
        let _ = write!(
            s,
            "\"/><path fill=\"none\" stroke=\"#999\" d=\"M{} {}V{}H{}\"/>",
            n(LEFT),
            n(top_y),
            n(bottom_y),
            n(WIDTH - RIGHT)
        );
        s.push_str("<g fill=\"#555\" text-anchor=\"end\">");
        for v in &y_ticks {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" dy=\"0.32em\">{}</text>",
                n(LEFT - 6.0),
                n(y_of(*v)),
                tick(*v, step)
            );
        }
        s.push_str("</g>");
        if i + 1 == panels.len() {
            s.push_str("<g fill=\"#555\" text-anchor=\"middle\">");
            for x in &x_ticks {
                let _ = write!(
                    s,
                    "<text x=\"{}\" y=\"{}\">{}</text>",
                    n(x_of(*x)),
                    n(bottom_y + 15.0),
                    tick(*x, x_step)
                );
            }
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" fill=\"#222\">minutes from {} (UTC)</text></g>",
                n(LEFT + (WIDTH - LEFT - RIGHT) / 2.0),
                n(bottom_y + 33.0),
                text(&r.from)
            );
        }
    }

    // Operator actions across every panel, under the series; the wide transparent stroke is
    // there to make a one-pixel line easy to point at for its tooltip.
    for (x, label) in &events {
        let mut d = String::new();
        for i in 0..panels.len() {
            let _ = write!(
                d,
                "M{} {}V{}",
                n(x_of(*x)),
                n(plot_top(i)),
                n(plot_top(i) + PLOT)
            );
        }
        let _ = write!(
            s,
            "<g fill=\"none\"><title>{}</title><path stroke=\"#aaa\" d=\"{d}\"/>\
             <path stroke=\"transparent\" stroke-width=\"7\" d=\"{d}\"/></g>",
            text(label)
        );
    }

    for (panel, y_of) in panels.iter().zip(&scales) {
        if let Some((v, name)) = panel.target {
            let _ = write!(
                s,
                "<line x1=\"{}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#333\" \
                 stroke-dasharray=\"5 3\"><title>{}</title></line>",
                n(LEFT),
                n(WIDTH - RIGHT),
                text(&format!("{name}: {v:.0} ms")),
                y = n(y_of(v)),
            );
        }
        for line in &panel.lines {
            series(&mut s, line, &x_of, y_of);
        }
    }
    s.push_str("</svg>");
    s
}

/// The five panels: the line's pace, its size, its wait, who left it, and the origin.
fn panels(r: &Report, minutes: &[(f64, &Minute)]) -> Vec<Panel> {
    let line = |name, color, f: &dyn Fn(&Minute) -> Option<f64>| Line {
        name,
        color,
        points: minutes
            .iter()
            .map(|(x, m)| (*x, f(m).filter(|v| v.is_finite())))
            .collect(),
    };
    let count = |v: u64| Some(v as f64);
    let cap_name = if r.cap_is == "allow_percentage" {
        "allow %"
    } else {
        "cap (new users per minute)"
    };
    let target = minutes
        .iter()
        .find_map(|(_, m)| m.origin_target_ms)
        .filter(|t| t.is_finite());
    vec![
        Panel {
            label: "per minute",
            integer: true,
            lines: vec![
                line("arrivals", 5, &|m| count(m.arrivals)),
                line("admitted", 0, &|m| count(m.admitted)),
                // No cap (0 is no limit) has no line rather than one along the bottom.
                line(cap_name, 1, &|m| m.cap.filter(|c| *c > 0.0)),
            ],
            target: None,
        },
        Panel {
            label: "visitors",
            integer: true,
            lines: vec![
                line("waiting", 3, &|m| count(m.waiting)),
                line("active", 2, &|m| count(m.active)),
            ],
            target: None,
        },
        Panel {
            label: "time to admission (min)",
            integer: false,
            lines: vec![
                line("p50", 0, &|m| m.wait_p50.map(|s| s / 60.0)),
                line("p90", 4, &|m| m.wait_p90.map(|s| s / 60.0)),
                line("p99", 1, &|m| m.wait_p99.map(|s| s / 60.0)),
            ],
            target: None,
        },
        Panel {
            label: "left the line / min",
            integer: true,
            lines: vec![line("abandoned", 1, &|m| count(m.abandoned))],
            target: None,
        },
        Panel {
            label: "origin p95 (ms)",
            integer: false,
            lines: vec![
                line("origin p95", 3, &|m| m.origin_p95_ms),
                line("origin errors / min", 1, &|m| count(m.origin_errors)),
            ],
            target: target.map(|t| (t, "autopilot target")),
        },
    ]
}

/// The panel's name and a sample of each series' line, left to right at baseline `y`.
fn legend(s: &mut String, panel: &Panel, y: f64) {
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" font-weight=\"600\" fill=\"#222\">{}</text>",
        n(LEFT),
        n(y),
        text(panel.label)
    );
    // No text measuring in SVG: a character of 11px text is taken as 6.2 units, roomy enough.
    let mut x = LEFT + panel.label.chars().count() as f64 * 6.2 + 24.0;
    let mut item = |s: &mut String, name: &str, stroke: &str, dash: &str| {
        let _ = write!(
            s,
            "<path stroke=\"{stroke}\" stroke-width=\"2\"{dash} d=\"M{} {}h18\"/>\
             <text x=\"{}\" y=\"{}\" fill=\"#222\">{}</text>",
            n(x),
            n(y - 4.0),
            n(x + 23.0),
            n(y),
            text(name)
        );
        x += 23.0 + name.chars().count() as f64 * 6.2 + 16.0;
    };
    for line in &panel.lines {
        item(s, line.name, PALETTE[line.color % PALETTE.len()], "");
    }
    if let Some((_, name)) = panel.target {
        item(s, name, "#333", " stroke-dasharray=\"5 3\"");
    }
}

/// One series: a polyline per run of minutes with a value, a dot for a run of one.
fn series(s: &mut String, line: &Line, x_of: &dyn Fn(f64) -> f64, y_of: &dyn Fn(f64) -> f64) {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut last_x = f64::NEG_INFINITY;
    let mut open = false;
    for &(x, v) in &line.points {
        match v {
            Some(v) => {
                if !open || x - last_x > MISSING {
                    runs.push(Vec::new());
                }
                if let Some(run) = runs.last_mut() {
                    run.push((x_of(x), y_of(v)));
                }
                open = true;
            }
            None => open = false,
        }
        last_x = x;
    }
    if runs.is_empty() {
        return;
    }
    let _ = write!(
        s,
        "<g fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" stroke-linejoin=\"round\"><title>{}</title>",
        PALETTE[line.color % PALETTE.len()],
        text(line.name)
    );
    for run in runs {
        if let [(x, y)] = run[..] {
            let _ = write!(s, "<circle cx=\"{}\" cy=\"{}\" r=\"1.5\"/>", n(x), n(y));
            continue;
        }
        s.push_str("<polyline points=\"");
        for (k, (x, y)) in run.iter().enumerate() {
            if k > 0 {
                s.push(' ');
            }
            let _ = write!(s, "{},{}", n(*x), n(*y));
        }
        s.push_str("\"/>");
    }
    s.push_str("</g>");
}

/// A y axis for values up to `max`: its top and a round step (1, 2 or 5 × 10ⁿ) giving at most
/// four intervals. Nothing above zero still gets an axis from 0 to 1.
fn y_axis(max: f64, integer: bool) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 4.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|k| k * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude);
    // Half a visitor is no tick.
    let step = if integer { step.max(1.0) } else { step };
    let top = (max / step).ceil() * step;
    if top.is_finite() && top > 0.0 {
        (top, step)
    } else {
        (max, max)
    }
}

/// The x axis's step in minutes: a round one (5 min, 15 min, an hour, a day) giving at most
/// ten intervals.
fn x_step(span: f64) -> f64 {
    const STEPS: [f64; 12] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 180.0, 360.0, 720.0, 1440.0,
    ];
    STEPS
        .into_iter()
        .find(|step| span / step <= 10.0)
        .unwrap_or_else(|| (span / 10.0 / 1440.0).ceil() * 1440.0)
}

/// A tick's label, as short as its step allows: `0`, `0.5`, `250`, `15k`, `2.5M`.
fn tick(v: f64, step: f64) -> String {
    const UNITS: [(f64, &str); 6] = [
        (1e18, "E"),
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
    ];
    if v == 0.0 {
        return "0".into();
    }
    if step >= 1e21 {
        return format!("{v:.1e}");
    }
    let (unit, suffix) = UNITS
        .into_iter()
        // A unit once the axis reaches ten of them: `2000`, but `20k`.
        .find(|(unit, _)| step * 4.0 >= unit * 10.0)
        .unwrap_or((1.0, ""));
    let scaled = step / unit;
    let decimals = if scaled >= 1.0 {
        0
    } else {
        (-scaled.log10().floor()).clamp(0.0, 6.0) as usize
    };
    format!("{:.*}{suffix}", decimals, v / unit)
}

/// A coordinate to a tenth, without a trailing `.0`.
fn n(v: f64) -> String {
    let tenths = (v * 10.0).round();
    if tenths % 10.0 == 0.0 {
        format!("{}", tenths / 10.0)
    } else {
        format!("{:.1}", tenths / 10.0)
    }
}

/// Text for the SVG: escaped, and without the control characters XML does not allow.
fn text(s: &str) -> String {
    let clean: String = s
        .chars()
        .filter(|c| !c.is_control() || matches!(c, '\t' | '\n'))
        .collect();
    super::esc(&clean)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Action, Totals};

    const FROM: &str = "2026-11-27T20:00:00Z";

    fn minute(i: u64) -> Minute {
        Minute {
            start: vestibule_core::history::rfc3339(parse_start(FROM).unwrap() + i * 60),
            room: "sale".into(),
            ..Minute::default()
        }
    }

    fn report(minutes: Vec<Minute>) -> Report {
        Report {
            room: "sale".into(),
            event: None,
            from: FROM.into(),
            to: "2026-11-27T21:00:00Z".into(),
            cap_is: "new_users_per_minute",
            totals: Totals::default(),
            minutes,
            actions: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Fails unless `s` is well-formed XML as far as this drawing goes: one root element, every
    /// tag closed in order, attributes quoted, no raw `<` and only known entities.
    fn assert_well_formed(s: &str) {
        fn entities(text: &str) {
            for (i, _) in text.match_indices('&') {
                let rest = &text[i + 1..];
                let ok = ["amp;", "lt;", "gt;", "quot;", "#39;"]
                    .iter()
                    .any(|e| rest.starts_with(e));
                assert!(ok, "a bare & at {:?}", &text[i..(i + 12).min(text.len())]);
            }
        }
        let mut stack: Vec<&str> = Vec::new();
        let mut roots = 0;
        let mut rest = s;
        while let Some(open) = rest.find('<') {
            let between = &rest[..open];
            assert!(!between.contains('>'), "a raw > in {between:?}");
            entities(between);
            assert!(
                !stack.is_empty() || between.trim().is_empty(),
                "text outside the root"
            );
            rest = &rest[open + 1..];
            // A tag ends at the first `>` outside quotes.
            let mut quote = None;
            let end = rest
                .char_indices()
                .find(|&(_, c)| match (quote, c) {
                    (None, '"') => {
                        quote = Some(c);
                        false
                    }
                    (Some(q), c) if c == q => {
                        quote = None;
                        false
                    }
                    (None, '>') => true,
                    _ => false,
                })
                .map(|(i, _)| i)
                .expect("an unclosed tag");
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name.trim()), "a misnested </{name}>");
                continue;
            }
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
            let name = &tag[..name_end];
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
                "a bad tag name {name:?}"
            );
            // Attributes: name="value", values with no < and only known entities.
            let mut attrs = tag[name_end..].trim();
            while !attrs.is_empty() {
                let eq = attrs.find("=\"").expect("an unquoted attribute");
                let attr = &attrs[..eq];
                assert!(
                    attr.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                    "a bad attribute name {attr:?}"
                );
                let value_end = attrs[eq + 2..].find('"').unwrap() + eq + 2;
                let value = &attrs[eq + 2..value_end];
                assert!(!value.contains('<'), "a < in {value:?}");
                entities(value);
                attrs = attrs[value_end + 1..].trim_start();
            }
            if stack.is_empty() {
                roots += 1;
            }
            if !self_closing {
                stack.push(name);
            }
        }
        assert!(rest.trim().is_empty(), "text after the root");
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert_eq!(roots, 1);
    }

    /// The polylines and dots of the series named `name`, in order.
    fn drawn<'a>(svg: &'a str, name: &str) -> Vec<&'a str> {
        let title = format!("<title>{name}</title>");
        let Some(at) = svg.find(&title) else {
            return Vec::new();
        };
        let group = &svg[at + title.len()..];
        let group = &group[..group.find("</g>").unwrap()];
        group
            .split_terminator("/>")
            .map(|e| e.trim_start_matches('<'))
            .collect()
    }

    #[test]
    fn a_known_series_lands_where_it_should() {
        let minutes = (0..3)
            .map(|i| Minute {
                arrivals: 10,
                admitted: 5 * i,
                ..minute(i)
            })
            .collect();
        let svg = render(&report(minutes));
        assert_well_formed(&svg);
        // x: 0..2 minutes over 58..986. y: the panel's top is 10 (step 5), its plot from 52
        // (title 30 + legend 22) to 172.
        assert_eq!(
            drawn(&svg, "admitted"),
            ["polyline points=\"58,172 522,112 986,52\""]
        );
        assert_eq!(
            drawn(&svg, "arrivals"),
            ["polyline points=\"58,52 522,52 986,52\""]
        );
        for label in [
            "<text x=\"52\" y=\"172\" dy=\"0.32em\">0</text>",
            ">5<",
            ">10<",
        ] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(svg.contains("role=\"img\"") && svg.contains("viewBox=\"0 0 1000 "));
        assert!(svg.contains("<title id=\"chart-title\">"));
    }

    #[test]
    fn a_minute_without_a_value_breaks_the_line() {
        // p50: a value, none, two values, then a minute with no record, then two more.
        let p50 = [Some(60.0), None, Some(120.0), Some(120.0)];
        let mut minutes: Vec<Minute> = p50
            .iter()
            .enumerate()
            .map(|(i, p)| Minute {
                wait_p50: *p,
                ..minute(i as u64)
            })
            .collect();
        minutes.extend((5..7).map(|i| Minute {
            wait_p50: Some(60.0),
            ..minute(i)
        }));
        let svg = render(&report(minutes));
        assert_well_formed(&svg);
        let p50 = drawn(&svg, "p50");
        assert_eq!(p50.len(), 3, "{p50:?}");
        assert!(p50[0].starts_with("circle "), "{p50:?}");
        assert_eq!(p50[1].matches(',').count(), 2, "{p50:?}");
        assert_eq!(p50[2].matches(',').count(), 2, "{p50:?}");
        // No cap and no p90 at all: no line, and no legend-less group either.
        assert!(drawn(&svg, "p90").is_empty());
        assert!(drawn(&svg, "cap (new users per minute)").is_empty());
    }

    #[test]
    fn hostile_names_are_escaped() {
        let mut r = report(vec![minute(0), minute(1)]);
        r.room = "<script>alert(1)</script>".into();
        r.actions.push(Action {
            time: "2026-11-27T20:00:30Z".into(),
            operator: "<script>\"evil\"&'".into(),
            action: "pause</title><script>x</script>\u{0}".into(),
            args: serde_json::Value::Null,
            via: "console".into(),
        });
        let svg = render(&r);
        assert_well_formed(&svg);
        assert!(!svg.contains("<script"), "{svg}");
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(svg.contains("&lt;script&gt;&quot;evil&quot;&amp;&#39;: pause&lt;/title&gt;"));
        // The action is a grey line at 0.5 minute of 1, in every panel.
        assert_eq!(svg.matches("<path stroke=\"#aaa\" d=\"M522 ").count(), 1);
        assert_eq!(svg.matches("M522 ").count(), 2 * 5);
    }

    #[test]
    fn no_minutes_one_minute_all_zero_and_huge_values_still_draw() {
        let none = render(&report(Vec::new()));
        assert_well_formed(&none);
        assert!(!none.contains("<polyline") && !none.contains("<circle"));

        let one = render(&report(vec![Minute {
            admitted: 3,
            ..minute(0)
        }]));
        assert_well_formed(&one);
        assert!(!one.contains("<polyline"));
        assert_eq!(
            drawn(&one, "admitted"),
            ["circle cx=\"58\" cy=\"52\" r=\"1.5\""]
        );

        let zeros = render(&report((0..5).map(minute).collect()));
        assert_well_formed(&zeros);
        // Every y axis runs 0 to 1: whole numbers for counts, tenths for the others.
        assert_eq!(
            zeros.matches(">1</text>").count(),
            3 + 1,
            "and the x axis's 1"
        );
        assert_eq!(zeros.matches(">1.0</text>").count(), 2);

        let huge = render(&report(vec![
            Minute {
                admitted: u64::MAX,
                cap: Some(1e300),
                origin_p95_ms: Some(f64::MAX),
                origin_target_ms: Some(f64::INFINITY),
                ..minute(0)
            },
            Minute {
                arrivals: 1_500_000,
                ..minute(1)
            },
        ]));
        assert_well_formed(&huge);
        for bad in ["NaN", "inf", "-"] {
            let numbers = huge
                .split('"')
                .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()));
            assert!(numbers.clone().all(|v| !v.contains(bad)), "{bad}");
        }
        assert!(
            !huge.contains("autopilot target"),
            "an infinite target is none"
        );
    }

    #[test]
    fn the_axes_have_round_numbers() {
        assert_eq!(y_axis(0.0, true), (1.0, 1.0));
        assert_eq!(y_axis(0.0, false), (1.0, 0.5));
        assert_eq!(y_axis(7.0, true), (8.0, 2.0));
        assert_eq!(y_axis(1234.0, true), (1500.0, 500.0));
        assert_eq!(tick(2500.0, 500.0), "2500");
        assert_eq!(tick(250_000.0, 50_000.0), "250k");
        assert_eq!(tick(15_000_000.0, 5_000_000.0), "15M");
        assert_eq!(tick(1.8e19, 5e18), "18E");
        assert_eq!(tick(0.5, 0.5), "0.5");
        assert_eq!(x_step(1.0), 1.0);
        assert_eq!(x_step(42.0), 5.0);
        assert_eq!(x_step(1439.0), 180.0);
        assert_eq!(x_step(100_000.0), 10_080.0);
        assert_eq!(n(12.34), "12.3");
        assert_eq!(n(12.04), "12");
    }

    #[test]
    fn a_day_of_minutes_stays_small() {
        let minutes = (0..1440u64)
            .map(|i| Minute {
                arrivals: 1000 + i * 37 % 500,
                admitted: 250,
                cap: Some(250.0),
                waiting: 20_000u64.saturating_sub(i * 13),
                active: 3000 + i % 97,
                abandoned: i % 11,
                wait_p50: Some(300.0 + (i % 60) as f64 * 7.3),
                wait_p90: Some(900.0 + (i % 60) as f64 * 9.1),
                wait_p99: Some(1500.0 + (i % 60) as f64 * 11.7),
                origin_p95_ms: Some(180.0 + (i % 40) as f64 * 3.3),
                origin_target_ms: Some(400.0),
                origin_errors: i % 3,
                ..minute(i)
            })
            .collect();
        let mut r = report(minutes);
        r.actions = (0..20)
            .map(|i| Action {
                time: vestibule_core::history::rfc3339(parse_start(FROM).unwrap() + i * 4000),
                operator: "alice".into(),
                action: "set_rate".into(),
                args: serde_json::Value::Null,
                via: "console".into(),
            })
            .collect();
        let svg = render(&r);
        assert_well_formed(&svg);
        eprintln!("1,440 minutes: {} bytes", svg.len());
        assert!(svg.len() < 400_000, "{} bytes", svg.len());
    }
}
