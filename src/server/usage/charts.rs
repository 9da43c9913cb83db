//! ECharts options for the usage page, built on the server from the report, so the browser bundle
//! carries no chart code: the page puts each document in a `data-chart-option` attribute and
//! `public/charts.js` hands it to ECharts.

use crate::model::{CardSeries, UsageCharts, UsageReport, UsageTotal};
use serde_json::{json, Value};

/// One option document per chart of the page.
pub fn build(report: &UsageReport) -> UsageCharts {
    UsageCharts {
        cards: report
            .cards
            .iter()
            .map(|c| card(report, c).to_string())
            .collect(),
        wait: wait(report).to_string(),
        by_user: totals(&report.by_user, "Owner").to_string(),
        by_workload: totals(&report.by_workload, "Workload type").to_string(),
    }
}

fn card(report: &UsageReport, c: &CardSeries) -> Value {
    let ms = |p: &crate::model::CardPoint| p.at.timestamp_millis();
    let reserved: Vec<Value> = c
        .points
        .iter()
        .map(|p| json!([ms(p), p.reserved_mib]))
        .collect();
    let used: Vec<Value> = c
        .points
        .iter()
        .map(|p| json!([ms(p), p.used_mib]))
        .collect();
    let external: Vec<Value> = c
        .points
        .iter()
        .map(|p| json!([ms(p), p.external_mib]))
        .collect();
    // A series with no known value is named so, instead of drawing a flat zero line.
    let name = |base: &str, known: bool| {
        if known {
            base.to_owned()
        } else {
            format!("{base} (not measured)")
        }
    };
    let used_name = name("used", c.points.iter().any(|p| p.used_mib.is_some()));
    let external_name = name(
        "external",
        c.points.iter().any(|p| p.external_mib.is_some()),
    );
    json!({
        "animation": false,
        "color": ["#2563eb", "#16a34a", "#dc2626"],
        "tooltip": { "trigger": "axis" },
        "legend": { "top": 0 },
        "grid": { "left": 64, "right": 24, "top": 36, "bottom": 72 },
        "xAxis": {
            "type": "time",
            "min": report.from.timestamp_millis(),
            "max": report.to.timestamp_millis(),
        },
        "yAxis": {
            "type": "value",
            "name": "MiB",
            "min": 0,
            "max": c.total_mib,
        },
        "dataZoom": [
            { "type": "inside", "filterMode": "none" },
            { "type": "slider", "filterMode": "none", "bottom": 8 },
        ],
        "series": [
            line("reserved", reserved, true),
            line(&used_name, used, false),
            line(&external_name, external, false),
        ],
    })
}

fn line(name: &str, data: Vec<Value>, area: bool) -> Value {
    let mut series = json!({
        "name": name,
        "type": "line",
        "showSymbol": false,
        "connectNulls": false,
        "data": data,
    });
    if area {
        series["areaStyle"] = json!({ "opacity": 0.15 });
    }
    series
}

fn wait(report: &UsageReport) -> Value {
    let labels: Vec<&str> = report
        .wait
        .buckets
        .iter()
        .map(|b| b.label.as_str())
        .collect();
    let counts: Vec<i64> = report.wait.buckets.iter().map(|b| b.jobs).collect();
    json!({
        "animation": false,
        "color": ["#7c3aed"],
        "tooltip": { "trigger": "axis" },
        "grid": { "left": 56, "right": 24, "top": 36, "bottom": 40 },
        "xAxis": { "type": "category", "data": labels },
        "yAxis": { "type": "value", "name": "jobs", "minInterval": 1 },
        "series": [{ "name": "jobs", "type": "bar", "data": counts }],
    })
}

fn totals(rows: &[UsageTotal], axis: &str) -> Value {
    let keys: Vec<&str> = rows.iter().map(|t| t.key.as_str()).collect();
    // Four decimals: a few seconds on one card is still a visible bar.
    let round = |x: f64| (x * 10_000.0).round() / 10_000.0;
    let gpu: Vec<f64> = rows.iter().map(|t| round(t.gpu_hours)).collect();
    let vram: Vec<f64> = rows.iter().map(|t| round(t.vram_gib_hours)).collect();
    json!({
        "animation": false,
        "color": ["#0891b2", "#ea580c"],
        "tooltip": { "trigger": "axis" },
        "legend": { "top": 0 },
        "grid": { "left": 64, "right": 64, "top": 48, "bottom": 56 },
        "xAxis": { "type": "category", "name": axis, "nameLocation": "middle", "nameGap": 32, "data": keys },
        "yAxis": [
            { "type": "value", "name": "GPU-hours" },
            { "type": "value", "name": "VRAM GiB-hours" },
        ],
        "series": [
            { "name": "GPU-hours", "type": "bar", "yAxisIndex": 0, "data": gpu },
            { "name": "VRAM GiB-hours", "type": "bar", "yAxisIndex": 1, "data": vram },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CardPoint, WaitStats};
    use chrono::{TimeZone, Utc};

    #[test]
    fn unknown_use_is_a_gap_not_zero() {
        let at = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
        let report = UsageReport {
            from: at,
            to: at + chrono::Duration::hours(1),
            bucket_s: 8,
            retention_h: 720,
            cards: vec![CardSeries {
                uuid: "GPU-x".into(),
                node: "n".into(),
                index: 0,
                model: "m".into(),
                total_mib: 1000,
                samples: 1,
                avg_reserved_mib: 10,
                peak_reserved_mib: 10,
                avg_used_mib: None,
                peak_used_mib: None,
                avg_external_mib: Some(0),
                avg_utilization_pct: None,
                points: vec![CardPoint {
                    at,
                    reserved_mib: 10,
                    used_mib: None,
                    external_mib: Some(0),
                    utilization_pct: None,
                }],
            }],
            wait: WaitStats {
                jobs: 0,
                p50_s: None,
                p95_s: None,
                max_s: None,
                buckets: vec![],
            },
            by_user: vec![],
            by_workload: vec![],
        };
        let charts = build(&report);
        let option: Value = serde_json::from_str(&charts.cards[0]).unwrap();
        assert_eq!(option["series"][1]["name"], "used (not measured)");
        assert_eq!(option["series"][1]["data"][0][1], Value::Null);
        assert_eq!(option["series"][2]["name"], "external");
        assert_eq!(option["series"][2]["data"][0][1], 0);
        assert_eq!(option["yAxis"]["max"], 1000);
    }
}
