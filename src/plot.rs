//! PNG line charts for reports (`simulate`, the soak benchmark): a column of panels sharing one
//! x axis, each with a few named series and optional horizontal reference lines and vertical
//! event markers.
//!
//! Labels need a TrueType font; [`font_available`] loads a system one once. Without one the
//! charts are drawn without text (the data is all there).

use std::path::Path;

use plotters::prelude::*;

/// Loads a system font for labels, once.
pub(crate) fn font_available() -> bool {
    static LOADED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LOADED.get_or_init(|| {
        let candidates = [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
            "/System/Library/Fonts/Supplemental/Arial.ttf",
        ];
        for path in candidates {
            if let Ok(bytes) = std::fs::read(path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font(
                    "sans-serif",
                    plotters::style::FontStyle::Normal,
                    bytes,
                )
                .is_ok()
                {
                    return true;
                }
            }
        }
        false
    })
}

/// One line.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette.
    pub color: usize,
}

/// One panel: series over the shared x axis.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    pub y_label: String,
    pub series: Vec<Series>,
    /// Horizontal reference lines (a cap, a target), with a label.
    pub hlines: Vec<(f64, String)>,
}

/// A chart: panels stacked top to bottom.
#[derive(Clone, Debug, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub panels: Vec<Panel>,
    /// Vertical event markers across every panel, with a label.
    pub events: Vec<(f64, String)>,
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(53, 88, 214),
    RGBColor(214, 83, 53),
    RGBColor(22, 128, 60),
    RGBColor(150, 60, 180),
    RGBColor(200, 150, 20),
    RGBColor(90, 90, 90),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Writes `chart` as a PNG of `width` × (`panel_height` per panel).
pub fn draw(chart: &Chart, path: &Path, width: u32, panel_height: u32) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let labels = font_available();
    let height = panel_height * chart.panels.len().max(1) as u32 + if labels { 40 } else { 0 };
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let body = if labels {
        root.titled(&chart.title, ("sans-serif", 22))
            .map_err(|e| err(&e))?
    } else {
        root.clone()
    };
    let x_range = chart
        .panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))
        .chain(chart.events.iter().map(|e| e.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    let (x_lo, x_hi) = if x_range.0.is_finite() && x_range.1 > x_range.0 {
        x_range
    } else {
        (0.0, 1.0)
    };
    let areas = body.split_evenly((chart.panels.len().max(1), 1));
    for (i, (panel, area)) in chart.panels.iter().zip(areas.iter()).enumerate() {
        let y_hi = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(panel.hlines.iter().map(|h| h.0))
            .fold(0.0f64, f64::max);
        let y_hi = if y_hi > 0.0 { y_hi * 1.1 } else { 1.0 };
        let last = i + 1 == chart.panels.len();
        let mut builder = ChartBuilder::on(area);
        builder.margin(10);
        if labels {
            builder
                .x_label_area_size(if last { 35 } else { 20 })
                .y_label_area_size(70);
        }
        let mut c = builder
            .build_cartesian_2d(x_lo..x_hi, 0.0..y_hi)
            .map_err(|e| err(&e))?;
        if labels {
            let mut mesh = c.configure_mesh();
            mesh.y_desc(panel.y_label.as_str())
                .light_line_style(WHITE.mix(0.0));
            if last {
                mesh.x_desc(chart.x_label.as_str());
            }
            mesh.draw().map_err(|e| err(&e))?;
        }
        for (x, _) in &chart.events {
            c.draw_series(LineSeries::new(
                [(*x, 0.0), (*x, y_hi)],
                RGBColor(180, 180, 180).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
        }
        for (y, label) in &panel.hlines {
            let s = c
                .draw_series(LineSeries::new(
                    [(x_lo, *y), (x_hi, *y)],
                    BLACK.mix(0.6).stroke_width(1),
                ))
                .map_err(|e| err(&e))?;
            if labels {
                s.label(label.as_str())
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.mix(0.6)));
            }
        }
        for s in &panel.series {
            let col = color(s.color);
            let drawn = c
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    col.stroke_width(2),
                ))
                .map_err(|e| err(&e))?;
            if labels {
                drawn.label(s.name.as_str()).legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], col.stroke_width(2))
                });
            }
        }
        if labels && (panel.series.len() + panel.hlines.len()) > 0 {
            c.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.png");
        let chart = Chart {
            title: "test".into(),
            x_label: "seconds".into(),
            panels: vec![
                Panel {
                    y_label: "a".into(),
                    series: vec![Series {
                        name: "a".into(),
                        points: vec![(0.0, 1.0), (1.0, 2.0), (2.0, 1.5)],
                        color: 0,
                    }],
                    hlines: vec![(1.8, "cap".into())],
                },
                Panel {
                    y_label: "b".into(),
                    series: vec![],
                    hlines: vec![],
                },
            ],
            events: vec![(1.0, "event".into())],
        };
        draw(&chart, &path, 400, 150).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
    }
}
