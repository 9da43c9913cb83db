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
        let report = report(vec![series(0, 1000, vec![point(0, 10, None, Some(0))])]);
        let charts = build(&report);
        let option: Value = serde_json::from_str(&charts.cards[0]).unwrap();
        assert_eq!(option["series"][1]["name"], "used (not measured)");
        assert_eq!(option["series"][1]["data"][0][1], Value::Null);
        assert_eq!(option["series"][2]["name"], "external");
        assert_eq!(option["series"][2]["data"][0][1], 0);
        assert_eq!(option["yAxis"]["max"], 1000);
    }

    fn at(minute: u32) -> chrono::DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 1, 1, 0, minute, 0).unwrap()
    }

    fn point(minute: u32, reserved: i64, used: Option<i64>, external: Option<i64>) -> CardPoint {
        CardPoint {
            at: at(minute),
            reserved_mib: reserved,
            used_mib: used,
            external_mib: external,
            utilization_pct: None,
        }
    }

    fn series(index: u32, total_mib: i64, points: Vec<CardPoint>) -> CardSeries {
        CardSeries {
            uuid: format!("GPU-{index}"),
            node: "n".into(),
            index,
            model: "m".into(),
            total_mib,
            samples: points.len() as i64,
            avg_reserved_mib: 0,
            peak_reserved_mib: 0,
            avg_used_mib: None,
            peak_used_mib: None,
            avg_external_mib: None,
            avg_utilization_pct: None,
            points,
        }
    }

    fn total(key: &str, gpu_hours: f64, vram_gib_hours: f64) -> UsageTotal {
        UsageTotal {
            key: key.into(),
            jobs: 1,
            gpu_hours,
            vram_gib_hours,
        }
    }

    fn report(cards: Vec<CardSeries>) -> UsageReport {
        UsageReport {
            from: at(0),
            to: at(30),
            bucket_s: 60,
            retention_h: 720,
            cards,
            wait: WaitStats {
                jobs: 0,
                p50_s: None,
                p95_s: None,
                max_s: None,
                buckets: vec![],
            },
            by_user: vec![],
            by_workload: vec![],
            reclaimed_by_user: vec![],
        }
    }

    fn parse(option: &str) -> Value {
        serde_json::from_str(option).unwrap()
    }

    #[test]
    fn one_chart_per_card_in_report_order() {
        let charts = build(&report(vec![
            series(3, 100, vec![]),
            series(0, 200, vec![]),
        ]));
        assert_eq!(charts.cards.len(), 2);
        assert_eq!(parse(&charts.cards[0])["yAxis"]["max"], 100);
        assert_eq!(parse(&charts.cards[1])["yAxis"]["max"], 200);
        assert!(build(&report(vec![])).cards.is_empty());
    }

    #[test]
    fn a_card_chart_spans_the_range_and_the_cards_memory() {
        let r = report(vec![series(
            0,
            81920,
            vec![
                point(1, 1024, Some(900), Some(0)),
                point(2, 2048, None, Some(10)),
            ],
        )]);
        let option = card(&r, &r.cards[0]);
        // The axis is the range asked for, not just the span of the points.
        assert_eq!(option["xAxis"]["min"], at(0).timestamp_millis());
        assert_eq!(option["xAxis"]["max"], at(30).timestamp_millis());
        assert_eq!(option["yAxis"]["min"], 0);
        assert_eq!(option["yAxis"]["max"], 81920);
        let names: Vec<&str> = option["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["reserved", "used", "external"]);
        let t1 = at(1).timestamp_millis();
        let t2 = at(2).timestamp_millis();
        assert_eq!(option["series"][0]["data"], json!([[t1, 1024], [t2, 2048]]));
        // One unknown point is a gap in a measured series.
        assert_eq!(option["series"][1]["data"], json!([[t1, 900], [t2, null]]));
        assert_eq!(option["series"][2]["data"], json!([[t1, 0], [t2, 10]]));
        for s in option["series"].as_array().unwrap() {
            assert_eq!(s["connectNulls"], false);
        }
    }

    #[test]
    fn only_the_reserved_series_is_filled() {
        let r = report(vec![series(0, 10, vec![point(0, 1, Some(1), Some(1))])]);
        let option = card(&r, &r.cards[0]);
        assert_eq!(option["series"][0]["areaStyle"]["opacity"], 0.15);
        assert!(option["series"][1].get("areaStyle").is_none());
        assert!(option["series"][2].get("areaStyle").is_none());
        assert!(line("x", vec![], false).get("areaStyle").is_none());
        assert!(line("x", vec![], true).get("areaStyle").is_some());
    }

    #[test]
    fn a_card_without_points_says_nothing_was_measured() {
        let r = report(vec![series(0, 0, vec![])]);
        let option = card(&r, &r.cards[0]);
        assert_eq!(option["series"][0]["name"], "reserved");
        assert_eq!(option["series"][1]["name"], "used (not measured)");
        assert_eq!(option["series"][2]["name"], "external (not measured)");
        assert_eq!(option["series"][0]["data"], json!([]));
        // A card of unknown size still gets a valid axis.
        assert_eq!(option["yAxis"]["max"], 0);
    }

    #[test]
    fn the_wait_histogram_has_a_bar_per_bucket() {
        let mut r = report(vec![]);
        r.wait.jobs = 5;
        r.wait.buckets = vec![
            crate::model::WaitBucket {
                label: "< 10 s".into(),
                below_s: Some(10),
                jobs: 4,
            },
            crate::model::WaitBucket {
                label: "≥ 1 h".into(),
                below_s: None,
                jobs: 1,
            },
        ];
        let option = parse(&build(&r).wait);
        assert_eq!(option["xAxis"]["data"], json!(["< 10 s", "≥ 1 h"]));
        assert_eq!(option["series"][0]["data"], json!([4, 1]));
        // Whole jobs only on the axis.
        assert_eq!(option["yAxis"]["minInterval"], 1);
        let empty = parse(&build(&report(vec![])).wait);
        assert_eq!(empty["xAxis"]["data"], json!([]));
        assert_eq!(empty["series"][0]["data"], json!([]));
    }

    #[test]
    fn totals_keep_their_order_and_four_decimals() {
        let rows = [
            total("alice", 12.345_678, 987.654_321),
            total("zoë", 0.000_04, 0.000_06),
            total("模型", 0.0, 1e6),
        ];
        let option = totals(&rows, "Owner");
        assert_eq!(option["xAxis"]["name"], "Owner");
        assert_eq!(option["xAxis"]["data"], json!(["alice", "zoë", "模型"]));
        assert_eq!(option["series"][0]["data"], json!([12.3457, 0.0, 0.0]));
        assert_eq!(
            option["series"][1]["data"],
            json!([987.6543, 0.0001, 1_000_000.0])
        );
        // Two axes: GPU-hours left, VRAM GiB-hours right.
        assert_eq!(option["series"][0]["yAxisIndex"], 0);
        assert_eq!(option["series"][1]["yAxisIndex"], 1);
    }

    #[test]
    fn each_totals_chart_names_its_axis() {
        let mut r = report(vec![]);
        r.by_user = vec![total("alice", 1.0, 2.0)];
        r.by_workload = vec![total(crate::model::CUSTOM_VRAM, 3.0, 4.0)];
        let charts = build(&r);
        let users = parse(&charts.by_user);
        let workloads = parse(&charts.by_workload);
        assert_eq!(users["xAxis"]["name"], "Owner");
        assert_eq!(users["xAxis"]["data"], json!(["alice"]));
        assert_eq!(workloads["xAxis"]["name"], "Workload type");
        assert_eq!(workloads["xAxis"]["data"], json!(["(custom VRAM)"]));
        let none = totals(&[], "Owner");
        assert_eq!(none["xAxis"]["data"], json!([]));
        assert_eq!(none["series"][0]["data"], json!([]));
    }
}
