//! `/usage` (managers and admins): VRAM reserved vs used per card over time, queue waits, GPU-hours
//! and VRAM-hours per owner and per workload type, CSV downloads. Every chart has a table of the
//! same figures under it, so nothing depends on seeing the chart. Below them, each user's and
//! team's fair share (`app::fair_share`), and the teams with their weights and budgets, read-only
//! (`app::teams`).
//!
//! The charts are ECharts, served by gpuq itself: the server builds each chart's option, the page
//! puts it in a `data-chart-option` attribute, and `/charts.js` draws whatever carries one. The
//! browser bundle has no chart code.

use super::alert::loaded;
use super::gate::SignedInAs;
use super::widgets::{column_heads, heads_and_rows};
use crate::api::usage_report;
use crate::model::{
    AppError, CardSeries, ReclaimedTotal, Role, UsageReport, UsageTotal, UsageView, WaitStats,
};
use leptos::prelude::*;
use leptos_meta::Title;

/// `/usage`
///
/// The range and the report live here, once per page, not inside [`SignedInAs`]'s page: server-side
/// rendering may run that closure more than once (see the job page). Below a manager, the fetch is
/// refused and never shown.
#[component]
pub fn UsagePage() -> impl IntoView {
    // The range shown (relative like `-24h`, or UTC date-times; an empty `to` is now), and the
    // report for it, fetched again on a change of range or a press of Refresh.
    let from = RwSignal::new("-24h".to_owned());
    let to = RwSignal::new(String::new());
    let refresh = RwSignal::new(0u32);
    let data = Resource::new(
        move || (from.get(), to.get(), refresh.get()),
        |(f, t, _)| usage_report(f, t),
    );
    let teams = Resource::new(move || refresh.get(), |_| crate::api::list_teams());
    let fair = Resource::new(move || refresh.get(), |_| crate::api::fair_share_report());
    view! {
        <Title text="Usage · gpuq" />
        <SignedInAs
            min=Role::Manager
            page=move |_| view! {
                <Usage from to refresh data />
                <super::fair_share::FairShareTables report=fair />
                <super::teams::TeamsReadOnly teams />
            }
            refused=|| view! {
                <section class="card">
                    <h1>"Usage"</h1>
                    <p id="usage-refused" class="error" role="alert">
                        "Usage is for managers and admins only. Ask an admin if you need these figures."
                    </p>
                </section>
            }
        />
    }
}

const PRESETS: [(&str, &str); 4] = [
    ("-1h", "Last hour"),
    ("-6h", "Last 6 hours"),
    ("-24h", "Last 24 hours"),
    ("-7d", "Last 7 days"),
];

#[component]
fn Usage(
    from: RwSignal<String>,
    to: RwSignal<String>,
    refresh: RwSignal<u32>,
    data: Resource<Result<UsageView, AppError>>,
) -> impl IntoView {
    let draft_from = RwSignal::new(String::new());
    let draft_to = RwSignal::new(String::new());
    let csv = move |file: &str| csv_href(file, &from.get(), &to.get());
    let apply = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        from.set(draft_from.get_untracked());
        to.set(draft_to.get_untracked());
    };
    view! {
        <script src="/charts.js"></script>
        <section class="card usage">
            <h1>"Usage"</h1>
            <div class="row usage-range" role="group" aria-label="Range">
                {PRESETS
                    .into_iter()
                    .map(|(value, label)| {
                        let pressed = move || (from.get() == value && to.get().is_empty()).to_string();
                        view! {
                            <button type="button" class="small" aria-pressed=pressed
                                on:click=move |_| { from.set(value.to_owned()); to.set(String::new()); }>
                                {label}
                            </button>
                        }
                    })
                    .collect_view()}
                <button type="button" class="small" on:click=move |_| refresh.update(|n| *n += 1)>"Refresh"</button>
            </div>
            <form class="row filters" on:submit=apply>
                <div class="field">
                    <label for="usage-from">"From (UTC)"</label>
                    <input id="usage-from" type="datetime-local" prop:value=move || draft_from.get()
                        on:input=move |ev| draft_from.set(event_target_value(&ev)) />
                </div>
                <div class="field">
                    <label for="usage-to">"To (UTC, empty: now)"</label>
                    <input id="usage-to" type="datetime-local" prop:value=move || draft_to.get()
                        on:input=move |ev| draft_to.set(event_target_value(&ev)) />
                </div>
                <button type="submit">"Show range"</button>
            </form>
            <p class="downloads">
                "Download CSV: "
                <a id="csv-samples" href=move || csv("samples.csv") download="">"every card sample"</a>
                " · "
                <a id="csv-jobs" href=move || csv("jobs.csv") download="">"per-job accounting"</a>
            </p>
            {loaded(data, move |v| view! { <Report v /> })}
        </section>
    }
}

/// The download link of one CSV file for the range shown.
fn csv_href(file: &str, from: &str, to: &str) -> String {
    format!(
        "/api/v1/usage/{file}?from={}&to={}",
        query_value(from),
        query_value(to)
    )
}

/// Escapes what would end or change a query value (the forms the page sends have no other
/// special characters).
fn query_value(text: &str) -> String {
    text.replace('%', "%25")
        .replace('+', "%2B")
        .replace(' ', "%20")
        .replace('&', "%26")
        .replace('#', "%23")
}

#[component]
fn Report(v: UsageView) -> impl IntoView {
    let UsageView { report, charts } = v;
    let span = format!(
        "{} to {} UTC · points average {} · samples are kept {} h",
        report.from.format("%Y-%m-%d %H:%M:%S"),
        report.to.format("%Y-%m-%d %H:%M:%S"),
        duration(report.bucket_s as f64),
        report.retention_h
    );
    let UsageReport {
        cards,
        wait,
        by_user,
        by_workload,
        reclaimed_by_user,
        ..
    } = report;
    let no_cards = cards.is_empty();
    view! {
        <p id="usage-span" class="muted">{span}</p>
        <h2>"VRAM per card"</h2>
        {no_cards.then(|| view! { <p class="muted">"No card was sampled in this range."</p> })}
        {cards
            .into_iter()
            .zip(charts.cards)
            .map(|(card, option)| view! { <Card card option /> })
            .collect_view()}
        <h2>"Queue wait"</h2>
        <Waits wait option=charts.wait />
        <h2>"GPU-hours and VRAM-hours per owner"</h2>
        <Totals rows=by_user option=charts.by_user id="usage-users" first="Owner" />
        <h2>"GPU-hours and VRAM-hours per workload type"</h2>
        <Totals rows=by_workload option=charts.by_workload id="usage-workloads" first="Workload type" />
        <h2>"GPU-hours reclaimed from idle jobs"</h2>
        <Reclaimed rows=reclaimed_by_user />
    }
}

/// Per owner: the jobs gpuq stopped idle in the range and the GPU-hours that freed (each job's
/// card share × the time from its stop to its deadline).
#[component]
fn Reclaimed(rows: Vec<ReclaimedTotal>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p id="usage-reclaimed" class="muted">"No job was stopped idle in this range."</p> }
            .into_any();
    }
    let total: f64 = rows.iter().map(|r| r.gpu_hours).sum();
    view! {
        <table id="usage-reclaimed" class="usage-table">
            {column_heads(["Owner", "Jobs stopped idle", "GPU-hours reclaimed"])}
            <tbody>
                {rows.into_iter().map(|r| view! {
                    <tr><td>{r.key}</td><td>{r.jobs}</td><td>{format!("{:.2}", r.gpu_hours)}</td></tr>
                }).collect_view()}
                <tr><td>"Total"</td><td></td><td>{format!("{total:.2}")}</td></tr>
            </tbody>
        </table>
    }
    .into_any()
}

#[component]
fn Card(card: CardSeries, option: String) -> impl IntoView {
    let title = format!(
        "GPU {} · {} · {} ({})",
        card.index,
        card.model,
        card.node,
        mib(Some(card.total_mib))
    );
    let label = format!(
        "VRAM reserved, used and external over time on GPU {}",
        card.index
    );
    let points = card.points.clone();
    view! {
        <article class="usage-card" data-gpu=card.uuid.clone()>
            <h3>{title}</h3>
            <div class="chart" role="img" aria-label=label data-chart-option=option></div>
            <table class="usage-table usage-summary">
                {column_heads(["Samples", "Reserved (mean)", "Reserved (peak)", "Used (mean)", "Used (peak)", "External (mean)", "Busy (mean)"])}
                <tbody>
                    <tr>
                        <td>{card.samples}</td>
                        <td>{mib(Some(card.avg_reserved_mib))}</td>
                        <td>{mib(Some(card.peak_reserved_mib))}</td>
                        <td>{mib(card.avg_used_mib)}</td>
                        <td>{mib(card.peak_used_mib)}</td>
                        <td>{mib(card.avg_external_mib)}</td>
                        <td>{busy(card.avg_utilization_pct)}</td>
                    </tr>
                </tbody>
            </table>
            <details>
                <summary>{format!("All {} points", points.len())}</summary>
                <table class="usage-table">
                    {heads_and_rows(["Time (UTC)", "Reserved", "Used", "External"], points, |p| view! {
                        <tr>
                            <td>{p.at.format("%Y-%m-%d %H:%M:%S").to_string()}</td>
                            <td>{mib(Some(p.reserved_mib))}</td>
                            <td>{mib(p.used_mib)}</td>
                            <td>{mib(p.external_mib)}</td>
                        </tr>
                    })}
                </table>
            </details>
        </article>
    }
}

/// The line above the wait histogram.
fn wait_summary(wait: &WaitStats) -> String {
    if wait.jobs == 0 {
        "No job was admitted in this range.".to_owned()
    } else {
        format!(
            "{} {} admitted · median wait {} · 95th percentile {} · longest {}",
            wait.jobs,
            if wait.jobs == 1 { "job" } else { "jobs" },
            wait.p50_s.map_or_else(unknown, duration),
            wait.p95_s.map_or_else(unknown, duration),
            wait.max_s.map_or_else(unknown, duration)
        )
    }
}

#[component]
fn Waits(wait: WaitStats, option: String) -> impl IntoView {
    let summary = wait_summary(&wait);
    view! {
        <p id="usage-wait-summary">{summary}</p>
        <div class="chart small" role="img" aria-label="Histogram of queue waits" data-chart-option=option></div>
        <table id="usage-waits" class="usage-table">
            {column_heads(["Wait", "Jobs"])}
            <tbody>
                {wait.buckets
                    .into_iter()
                    .map(|b| view! { <tr><td>{b.label}</td><td>{b.jobs}</td></tr> })
                    .collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn Totals(
    rows: Vec<UsageTotal>,
    option: String,
    id: &'static str,
    first: &'static str,
) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p id=id class="muted">"No job ran in this range."</p> }.into_any();
    }
    let label = format!("GPU-hours and VRAM GiB-hours per {}", first.to_lowercase());
    view! {
        <div class="chart small" role="img" aria-label=label data-chart-option=option></div>
        <table id=id class="usage-table">
            {heads_and_rows([first, "Jobs", "GPU-hours", "VRAM GiB-hours"], rows, |t| view! {
                <tr>
                    <td>{t.key}</td>
                    <td>{t.jobs}</td>
                    <td>{hours(t.gpu_hours)}</td>
                    <td>{hours(t.vram_gib_hours)}</td>
                </tr>
            })}
        </table>
    }
    .into_any()
}

/// What a figure that was never measured reads as (never 0: that would claim an idle card).
fn unknown() -> String {
    "unknown".to_owned()
}

/// A busy percentage, or "unknown" when the driver did not report it.
fn busy(pct: Option<i64>) -> String {
    pct.map_or_else(unknown, |p| format!("{p} %"))
}

/// A memory figure in MiB, or "unknown".
fn mib(v: Option<i64>) -> String {
    v.map_or_else(unknown, |m| format!("{m} MiB"))
}

/// Two decimals, or four for the small figures of short jobs (which would otherwise read 0.00).
fn hours(h: f64) -> String {
    if h > 0.0 && h < 0.01 {
        format!("{h:.4}")
    } else {
        format!("{h:.2}")
    }
}

/// A wait or a point width: seconds below a minute, minutes below an hour, then hours.
fn duration(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(jobs: i64, p50: Option<f64>, p95: Option<f64>, max: Option<f64>) -> WaitStats {
        WaitStats {
            jobs,
            p50_s: p50,
            p95_s: p95,
            max_s: max,
            buckets: vec![],
        }
    }

    #[test]
    fn query_values_escape_what_would_break_the_link() {
        assert_eq!(query_value(""), "");
        assert_eq!(query_value("-24h"), "-24h");
        assert_eq!(query_value("2025-01-02T03:04"), "2025-01-02T03:04");
        // A `+` would read as a space; an offset must survive.
        assert_eq!(
            query_value("2025-01-02T03:04:05+02:00"),
            "2025-01-02T03:04:05%2B02:00"
        );
        assert_eq!(query_value("a b&c=d#e"), "a%20b%26c=d%23e");
        // `%` is escaped first, so nothing is escaped twice.
        assert_eq!(query_value("100%+"), "100%25%2B");
        assert_eq!(query_value("%2B"), "%252B");
        // Other text passes as it is (the browser encodes it).
        assert_eq!(query_value("é·中"), "é·中");
    }

    #[test]
    fn csv_links_carry_the_range_shown() {
        assert_eq!(
            csv_href("samples.csv", "-24h", ""),
            "/api/v1/usage/samples.csv?from=-24h&to="
        );
        assert_eq!(
            csv_href("jobs.csv", "2025-01-01T00:00", "2025-01-02T00:00+01:00"),
            "/api/v1/usage/jobs.csv?from=2025-01-01T00:00&to=2025-01-02T00:00%2B01:00"
        );
        // A value cannot smuggle in another parameter.
        assert_eq!(
            csv_href("jobs.csv", "-1h&to=x", ""),
            "/api/v1/usage/jobs.csv?from=-1h%26to=x&to="
        );
    }

    #[test]
    fn unmeasured_figures_read_unknown_never_zero() {
        assert_eq!(unknown(), "unknown");
        assert_eq!(mib(None), "unknown");
        assert_eq!(mib(Some(0)), "0 MiB");
        assert_eq!(mib(Some(81920)), "81920 MiB");
        assert_eq!(mib(Some(-5)), "-5 MiB");
        assert_eq!(mib(Some(i64::MAX)), "9223372036854775807 MiB");
        assert_eq!(busy(None), "unknown");
        assert_eq!(busy(Some(0)), "0 %");
        assert_eq!(busy(Some(100)), "100 %");
    }

    #[test]
    fn hours_keep_short_jobs_visible() {
        for (h, text) in [
            (0.0, "0.00"),
            (1.0, "1.00"),
            (12.346, "12.35"),
            (0.01, "0.01"),
            // A few seconds on one card is not 0.00.
            (0.0025, "0.0025"),
            (10.0 / 3600.0, "0.0028"),
            (0.00001, "0.0000"),
            (1e9, "1000000000.00"),
            // Negative figures (never expected) keep two decimals.
            (-0.5, "-0.50"),
        ] {
            assert_eq!(hours(h), text, "{h} h");
        }
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        for (s, text) in [
            (0.0, "0.0 s"),
            (8.0, "8.0 s"),
            (59.0, "59.0 s"),
            (60.0, "1.0 min"),
            (90.0, "1.5 min"),
            (3540.0, "59.0 min"),
            (3600.0, "1.0 h"),
            (5400.0, "1.5 h"),
            (7.0 * 86400.0, "168.0 h"),
        ] {
            assert_eq!(duration(s), text, "{s} s");
        }
    }

    #[test]
    fn the_wait_line_summarises_the_range() {
        assert_eq!(
            wait_summary(&waits(0, None, None, None)),
            "No job was admitted in this range."
        );
        // Nobody admitted: figures that came along anyway are not shown.
        assert_eq!(
            wait_summary(&waits(0, Some(1.0), Some(1.0), Some(1.0))),
            "No job was admitted in this range."
        );
        assert_eq!(
            wait_summary(&waits(1, Some(4.0), Some(4.0), Some(4.0))),
            "1 job admitted · median wait 4.0 s · 95th percentile 4.0 s · longest 4.0 s"
        );
        assert_eq!(
            wait_summary(&waits(42, Some(30.0), Some(900.0), Some(7200.0))),
            "42 jobs admitted · median wait 30.0 s · 95th percentile 15.0 min · longest 2.0 h"
        );
        assert_eq!(
            wait_summary(&waits(3, None, None, Some(61.0))),
            "3 jobs admitted · median wait unknown · 95th percentile unknown · longest 1.0 min"
        );
    }
}
