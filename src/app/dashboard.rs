//! The dashboard: every card and what holds it, the queue, my jobs; a live server check.
//! Updates in place on live events.

use super::gate::SignedIn;
use super::live::use_live;
use super::widgets::table_or_note;
use crate::api::{dashboard, ServerStatus};
use crate::model::{
    human_duration, AppError, AssignedGpu, DashboardView, GpuHolder, GpuView, JobView,
    SkippedGpuView, StatusView, UserView,
};
use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;

/// `/`: signed-in users only; others are sent to the sign-in page.
///
/// The overview is fetched here, once per page, not inside [`SignedIn`]'s page: server-side
/// rendering may run that closure more than once, and markup from one read of changing cards and
/// jobs with hydration data from another would break hydration.
#[component]
pub fn DashboardPage() -> impl IntoView {
    let live = use_live();
    let data = Resource::new(move || live.get(), |_| dashboard());
    view! {
        <Title text="Dashboard · gpuq" />
        <SignedIn page=move |user| view! { <Dashboard user data /> } />
    }
}

#[component]
fn Dashboard(user: UserView, data: Resource<Result<DashboardView, AppError>>) -> impl IntoView {
    view! {
        <section class="card">
            <h1>{format!("Welcome, {}", user.username)}</h1>
            <p>
                "You are signed in as " <strong>{user.role.as_str()}</strong> ". "
                <A href="/submit">"Submit a job"</A>
            </p>
        </section>
        <Overview data />
        <StatusCard />
    }
}

/// A button that asks the server how it is: it only works once the page has hydrated.
#[component]
fn StatusCard() -> impl IntoView {
    let check = ServerAction::<ServerStatus>::new();
    let text = move || match check.value().get() {
        Some(Ok(s)) => describe(&s),
        Some(Err(e)) => format!("Check failed: {e}"),
        None if check.pending().get() => "Checking…".to_owned(),
        None => "Not checked yet.".to_owned(),
    };
    view! {
        <section class="card">
            <h2>"Server"</h2>
            <button id="check-status" type="button" on:click=move |_| {
                check.dispatch(ServerStatus {});
            }>"Check now"</button>
            <p id="status-result" aria-live="polite">{text}</p>
        </section>
    }
}

/// The server check's answer, in one line.
fn describe(s: &StatusView) -> String {
    format!(
        "Database: ok ({:.1} ms); {} active users; checked {} UTC",
        s.database_ms,
        s.active_users,
        s.checked_at.format("%H:%M:%S")
    )
}

/// Cards, the queue summary and my jobs, refetched on every live event.
#[component]
fn Overview(data: Resource<Result<DashboardView, AppError>>) -> impl IntoView {
    view! {
        <Transition fallback=|| view! { <p class="card">"Loading cards…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <OverviewView d /> }.into_any(),
                    Err(e) => view! { <p class="card error">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn OverviewView(d: DashboardView) -> impl IntoView {
    let waiting = waiting_summary(d.waiting, d.oldest_wait_since);
    view! {
        <section class="card">
            <h2>"GPUs"</h2>
            <p id="queue-summary">{waiting}</p>
            <div class="gpus">{d.gpus.into_iter().map(|g| view! { <GpuCard g /> }).collect_view()}</div>
            {(!d.skipped.is_empty()).then(|| view! {
                <div id="skipped-gpus">
                    <p class="muted">"Seen but not scheduled:"</p>
                    <ul>{d.skipped.iter().map(|s| view! { <li>{skipped_line(s)}</li> }).collect_view()}</ul>
                </div>
            })}
        </section>
        <section class="card">
            <h2>"My jobs"</h2>
            <MyJobs jobs=d.mine />
        </section>
    }
}

/// The queue line above the cards.
fn waiting_summary(waiting: i64, oldest_since: Option<DateTime<Utc>>) -> String {
    match (waiting, oldest_since) {
        (0, _) => "Nobody is waiting.".to_owned(),
        (n, Some(since)) => format!(
            "{n} job(s) waiting; the oldest since {} UTC.",
            since.format("%Y-%m-%d %H:%M:%S")
        ),
        (n, None) => format!("{n} job(s) waiting."),
    }
}

/// `part` as a percentage of `total`, clamped to 0–100 (0 for a card of unknown size).
fn pct(part: i64, total: i64) -> f64 {
    if total <= 0 {
        0.0
    } else {
        (part.max(0) as f64 * 100.0 / total as f64).min(100.0)
    }
}

/// The words for a card's bar (its legend, and its label for screen readers).
fn capacity_label(reserved_mib: i64, external_mib: i64, free_mib: i64, total_mib: i64) -> String {
    format!("reserved {reserved_mib} MiB, foreign {external_mib} MiB, free {free_mib} MiB of {total_mib} MiB")
}

/// The style of one part of a card's bar.
fn bar_width(part_mib: i64, total_mib: i64) -> String {
    format!("width: {:.1}%", pct(part_mib, total_mib))
}

/// What follows a holder's name: owner, VRAM, and how long it has run (or its status).
fn holder_line(h: &GpuHolder) -> String {
    let state = match h.running_s {
        Some(s) => format!("running {}", human_duration(s)),
        None => h.status.to_string(),
    };
    let uses = h
        .used_mib
        .map(|u| format!(" (uses {u} MiB)"))
        .unwrap_or_default();
    format!(" · {} · {} MiB{uses} · {state}", h.owner, h.vram_mib)
}

/// One device a node sees but does not schedule: where, what, and why.
fn skipped_line(s: &SkippedGpuView) -> String {
    format!(
        "{} GPU {} · {} · {} — {}",
        s.node,
        s.index,
        s.model.as_deref().unwrap_or("unknown model"),
        s.id,
        s.reason
    )
}

/// The words for a card's observed-use bar: what is in use on it against what gpuq committed.
fn used_label(used_mib: i64, reserved_mib: i64, total_mib: i64) -> String {
    format!("in use {used_mib} MiB (observed), committed {reserved_mib} MiB, of {total_mib} MiB")
}

/// A job's cards: "GPU 0, GPU 3".
fn gpu_list(gpus: &[AssignedGpu]) -> String {
    gpus.iter()
        .map(|g| format!("GPU {}", g.index))
        .collect::<Vec<_>>()
        .join(", ")
}

#[component]
fn GpuCard(g: GpuView) -> impl IntoView {
    let label = capacity_label(g.reserved_mib, g.external_mib, g.free_mib, g.total_mib);
    let reserved = bar_width(g.reserved_mib, g.total_mib);
    let external = bar_width(g.external_mib, g.total_mib);
    view! {
        <article class="gpu" data-gpu=g.index>
            <h3>{format!("GPU {} · {}", g.index, g.model)}</h3>
            <p class="muted">{format!("{} · {}", g.node, g.state)}</p>
            <div class="bar" role="img" aria-label=label.clone()>
                <span class="reserved" style=reserved></span>
                <span class="external" style=external></span>
            </div>
            <p class="legend">{label}</p>
            {g.used_mib.map(|used| {
                let words = used_label(used, g.reserved_mib, g.total_mib);
                view! {
                    <div class="bar used-bar" role="img" aria-label=words.clone()>
                        <span class="used" style=bar_width(used, g.total_mib)></span>
                    </div>
                    <p class="legend used-legend">{words}</p>
                }
            })}
            <ul class="holders">
                {g.jobs.into_iter().map(|h| {
                    let line = holder_line(&h);
                    let over = h.over_commitment;
                    view! {
                        <li>
                            <A href=format!("/jobs/{}", h.id)>{h.name}</A>
                            {line}
                            {over.then(|| view! { " " <span class="badge badge-over">"over its VRAM"</span> })}
                        </li>
                    }
                }).collect_view()}
            </ul>
        </article>
    }
}

#[component]
fn MyJobs(jobs: Vec<JobView>) -> impl IntoView {
    table_or_note(
        "my-jobs",
        ["Job", "Status", "GPUs", "Waiting because"],
        jobs,
        |j| {
            view! {
                <tr>
                    <td><A href=format!("/jobs/{}", j.id)>{j.name}</A></td>
                    <td class=format!("status status-{}", j.status)>{j.status.as_str()}</td>
                    <td>{gpu_list(&j.assigned_gpus)}{j.assigned_gpus.iter().any(|g| g.over_commitment).then(|| view! { " " <span class="badge badge-over">"over its VRAM"</span> })}</td>
                    <td>{j.wait_reason.unwrap_or_default()}</td>
                </tr>
            }
        },
        "No unfinished jobs.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobStatus;
    use chrono::TimeZone;
    use uuid::Uuid;

    fn holder(running_s: Option<i64>, status: JobStatus) -> GpuHolder {
        GpuHolder {
            id: Uuid::nil(),
            name: "train".into(),
            owner: "alice".into(),
            vram_mib: 20480,
            status,
            running_s,
            used_mib: None,
            over_commitment: false,
        }
    }

    #[test]
    fn observed_use_is_shown_beside_the_commitment() {
        let h = GpuHolder {
            used_mib: Some(9000),
            ..holder(Some(65), JobStatus::Running)
        };
        assert_eq!(
            holder_line(&h),
            " · alice · 20480 MiB (uses 9000 MiB) · running 1 min 5 s"
        );
        assert_eq!(
            used_label(30000, 20480, 81920),
            "in use 30000 MiB (observed), committed 20480 MiB, of 81920 MiB"
        );
    }

    #[test]
    fn the_status_check_reads_in_one_line() {
        let s = StatusView {
            database_ms: 0.4321,
            active_users: 3,
            checked_at: Utc.with_ymd_and_hms(2025, 6, 1, 14, 2, 9).unwrap(),
        };
        assert_eq!(
            describe(&s),
            "Database: ok (0.4 ms); 3 active users; checked 14:02:09 UTC"
        );
        let slow = StatusView {
            database_ms: 1234.96,
            active_users: 0,
            ..s
        };
        assert_eq!(
            describe(&slow),
            "Database: ok (1235.0 ms); 0 active users; checked 14:02:09 UTC"
        );
    }

    #[test]
    fn the_queue_line_says_who_waits_and_since_when() {
        let since = Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(waiting_summary(0, None), "Nobody is waiting.");
        // Nobody waits: a stale timestamp is not shown.
        assert_eq!(waiting_summary(0, Some(since)), "Nobody is waiting.");
        assert_eq!(
            waiting_summary(1, Some(since)),
            "1 job(s) waiting; the oldest since 2025-01-02 03:04:05 UTC."
        );
        assert_eq!(waiting_summary(12, None), "12 job(s) waiting.");
    }

    #[test]
    fn bar_parts_are_percentages_of_the_card() {
        assert_eq!(pct(0, 1024), 0.0);
        assert_eq!(pct(512, 1024), 50.0);
        assert_eq!(pct(1024, 1024), 100.0);
        assert!((pct(1, 3) - 33.333).abs() < 0.001);
        assert_eq!(bar_width(512, 1024), "width: 50.0%");
        assert_eq!(bar_width(1, 3), "width: 33.3%");
        assert_eq!(bar_width(81559, 81559), "width: 100.0%");
    }

    #[test]
    fn bar_parts_stay_within_the_bar() {
        // A card of unknown or nonsense size draws empty bars, never NaN or infinity.
        assert_eq!(pct(100, 0), 0.0);
        assert_eq!(pct(100, -5), 0.0);
        assert_eq!(bar_width(0, 0), "width: 0.0%");
        // Over-committed or negative figures are clamped.
        assert_eq!(pct(5000, 1000), 100.0);
        assert_eq!(pct(-10, 1000), 0.0);
        assert_eq!(pct(i64::MAX, i64::MAX), 100.0);
        assert_eq!(pct(i64::MAX, 1), 100.0);
        assert_eq!(bar_width(i64::MIN, 1000), "width: 0.0%");
    }

    #[test]
    fn the_capacity_label_names_every_figure() {
        assert_eq!(
            capacity_label(20480, 512, 59000, 81920),
            "reserved 20480 MiB, foreign 512 MiB, free 59000 MiB of 81920 MiB"
        );
        assert_eq!(
            capacity_label(0, 0, 0, 0),
            "reserved 0 MiB, foreign 0 MiB, free 0 MiB of 0 MiB"
        );
        // A negative free figure (over-committed card) is shown as it is, not hidden.
        assert!(capacity_label(100, 0, -50, 50).contains("free -50 MiB"));
    }

    #[test]
    fn a_holder_shows_how_long_it_has_run_or_its_status() {
        assert_eq!(
            holder_line(&holder(Some(95), JobStatus::Running)),
            " · alice · 20480 MiB · running 1 min 35 s"
        );
        assert_eq!(
            holder_line(&holder(Some(0), JobStatus::Running)),
            " · alice · 20480 MiB · running 0 s"
        );
        assert_eq!(
            holder_line(&holder(None, JobStatus::Admitted)),
            " · alice · 20480 MiB · admitted"
        );
        assert_eq!(
            holder_line(&holder(None, JobStatus::Starting)),
            " · alice · 20480 MiB · starting"
        );
    }

    #[test]
    fn my_jobs_list_their_cards_by_index() {
        let gpu = |index| AssignedGpu {
            uuid: format!("GPU-{index}"),
            index,
            model: "A100".into(),
            vram_mib: 1,
            ..Default::default()
        };
        assert_eq!(gpu_list(&[]), "");
        assert_eq!(gpu_list(&[gpu(3)]), "GPU 3");
        assert_eq!(gpu_list(&[gpu(0), gpu(7)]), "GPU 0, GPU 7");
    }
}
