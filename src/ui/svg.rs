//! Small SVG charts, drawn on the server (no chart library, no script).

use maud::{html, Markup};

use super::count;

/// One data date of a volume chart.
pub(super) struct VolumePoint {
    pub label: String,
    pub partition: String,
    pub rows: i64,
    /// The band the volume check allows, when there was a baseline.
    pub band: Option<(f64, f64)>,
}

const W: f64 = 560.0;
const H: f64 = 160.0;
const PAD_L: f64 = 56.0;
const PAD_R: f64 = 8.0;
const PAD_T: f64 = 10.0;
const PAD_B: f64 = 24.0;

/// Row counts as a line, the baseline band behind them; a point outside the
/// band is drawn as a warning.
pub(super) fn volume_chart(points: &[VolumePoint]) -> Markup {
    let max = points.iter().map(|p| (p.rows as f64).max(p.band.map_or(0.0, |b| b.1))).fold(1.0_f64, f64::max) * 1.1;
    let n = points.len().max(1);
    let x = |i: usize| {
        if n == 1 {
            PAD_L + (W - PAD_L - PAD_R) / 2.0
        } else {
            PAD_L + (W - PAD_L - PAD_R) * i as f64 / (n - 1) as f64
        }
    };
    let y = |v: f64| PAD_T + (H - PAD_T - PAD_B) * (1.0 - v / max);
    // The band as one polygon over the points that have a baseline.
    let banded: Vec<(usize, (f64, f64))> =
        points.iter().enumerate().filter_map(|(i, p)| p.band.map(|b| (i, b))).collect();
    let band_poly = if banded.is_empty() {
        String::new()
    } else {
        let upper = banded.iter().map(|(i, b)| format!("{:.1},{:.1}", x(*i), y(b.1)));
        let lower = banded.iter().rev().map(|(i, b)| format!("{:.1},{:.1}", x(*i), y(b.0)));
        upper.chain(lower).collect::<Vec<_>>().join(" ")
    };
    let line = points
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(p.rows as f64)))
        .collect::<Vec<_>>()
        .join(" ");
    let summary = format!(
        "Row counts of {} data dates, from {} to {}",
        points.len(),
        points.first().map_or("", |p| p.label.as_str()),
        points.last().map_or("", |p| p.label.as_str())
    );
    html! {
        svg.volume viewBox={ "0 0 " (W) " " (H) } role="img" aria-label=(summary) {
            title { (summary) }
            line.axis x1=(PAD_L) y1=(H - PAD_B) x2=(W - PAD_R) y2=(H - PAD_B) {}
            text.tick x=(PAD_L - 6.0) y=(y(max / 1.1) + 4.0) text-anchor="end" { (count((max / 1.1).round() as i64)) }
            text.tick x=(PAD_L - 6.0) y=(H - PAD_B) text-anchor="end" { "0" }
            @if !band_poly.is_empty() { polygon.band points=(band_poly) {} }
            @if points.len() > 1 { polyline.rows points=(line) {} }
            @for (i, p) in points.iter().enumerate() {
                @let outside = p.band.is_some_and(|(lo, hi)| (p.rows as f64) < lo || (p.rows as f64) > hi);
                circle class=@if outside { "pt out" } @else { "pt" } cx=(format!("{:.1}", x(i))) cy=(format!("{:.1}", y(p.rows as f64))) r="3.5" {
                    title {
                        (p.partition) ": " (count(p.rows)) " rows"
                        @if let Some((lo, hi)) = p.band { " (band " (count(lo.round() as i64)) "–" (count(hi.round() as i64)) ")" }
                    }
                }
            }
            @if let Some(first) = points.first() { text.tick x=(x(0)) y=(H - 6.0) text-anchor="start" { (first.label) } }
            @if points.len() > 1 { @if let Some(last) = points.last() { text.tick x=(x(n - 1)) y=(H - 6.0) text-anchor="end" { (last.label) } } }
        }
    }
}
