//! A job's page: status, timeline from the audit trail, cards, spec, live log tail, cancel.

use super::alert::{action_error, Fetched};
use super::gate::SignedIn;
use super::live::use_live;
use crate::api::{get_job_detail, job_log, CancelJob, ResubmitJob};
use crate::model::{AppError, AssignedGpu, JobDetail, JobStatus};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use uuid::Uuid;

/// `/jobs/:id`
///
/// The page's data is fetched here, once per page, not inside [`SignedIn`]'s page: server-side
/// rendering may run that closure more than once, and each run would read the job anew. A job
/// that moved on between two reads (queued → admitted in a few milliseconds) then gave the browser
/// markup from one read and hydration data from another, and hydration failed, leaving a dead
/// page that never updated.
#[component]
pub fn JobPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || {
        params
            .read()
            .get("id")
            .and_then(|s| Uuid::parse_str(&s).ok())
    };
    let live = use_live();
    let cancel = ServerAction::<CancelJob>::new();
    let detail = Resource::new(
        move || (id(), live.get(), cancel.version().get()),
        |(id, ..)| for_job(id, get_job_detail),
    );
    // The log follows while the job runs: every second, and on every live event. An ended job's
    // log is whole (the runner records the end only after its log), so the polling stops there.
    let log_tick = RwSignal::new(0u64);
    // A plain signal, set by an effect: the timer reads it, and a timer that fires while the page
    // still hydrates must not read the resource outside a <Suspense/>.
    let ended = RwSignal::new(false);
    Effect::new(move |_| {
        if let Some(Ok(d)) = detail.get() {
            ended.set(d.job.status.is_terminal());
        }
    });
    follow(log_tick, ended.into());
    let log = Resource::new(
        move || (id(), live.get(), log_tick.get()),
        |(id, ..)| for_job(id, |id| job_log(id, 200)),
    );
    view! {
        <Title text="Job · gpuq" />
        <SignedIn page=move |_| match id() {
            Some(_) => view! { <JobView detail log cancel /> }.into_any(),
            None => view! { <p class="card error">"Not a job id."</p> }.into_any(),
        } />
    }
}

/// What `fetch` reads about the job at `id`. An address that holds no job id is refused here
/// without asking the server; the page says "Not a job id." instead of drawing the refusal.
async fn for_job<T, F: std::future::Future<Output = Result<T, AppError>>>(
    id: Option<Uuid>,
    fetch: impl FnOnce(Uuid) -> F,
) -> Result<T, AppError> {
    match id {
        Some(id) => fetch(id).await,
        None => Err(AppError::invalid("id", "not a job id")),
    }
}

#[component]
fn JobView(
    detail: Fetched<JobDetail>,
    log: Fetched<String>,
    cancel: ServerAction<CancelJob>,
) -> impl IntoView {
    view! {
        <Transition fallback=|| view! { <p class="card">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(d) => view! { <Detail d cancel /> }.into_any(),
                    Err(e) => view! { <p class="card error">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
        <section class="card">
            <h2>"Log"</h2>
            <Transition fallback=|| view! { <pre id="log"></pre> }>
                {move || Suspend::new(async move {
                    let text = log.await.unwrap_or_else(|e| format!("({e})"));
                    view! { <pre id="log" tabindex="0">{text}</pre> }
                })}
            </Transition>
        </section>
    }
}

#[cfg(feature = "hydrate")]
fn follow(tick: RwSignal<u64>, ended: Signal<bool>) {
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(
            move || {
                if !ended.get_untracked() {
                    tick.update(|n| *n += 1);
                }
            },
            std::time::Duration::from_secs(1),
        ) {
            on_cleanup(move || handle.clear());
        }
    });
}

#[cfg(not(feature = "hydrate"))]
fn follow(_tick: RwSignal<u64>, _ended: Signal<bool>) {}

#[component]
fn Detail(d: JobDetail, cancel: ServerAction<CancelJob>) -> impl IntoView {
    let resubmit = ServerAction::<ResubmitJob>::new();
    let navigate = leptos_router::hooks::use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(ack)) = resubmit.value().get() {
            navigate(&format!("/jobs/{}", ack.job_id), Default::default());
        }
    });
    let j = d.job;
    let id = j.id;
    let status = j.status;
    let held = cards(&j.assigned_gpus);
    let vram = vram_lines(&j.assigned_gpus);
    let over = over_line(&j.assigned_gpus);
    let idle = d.idle.as_ref().map(|f| f.describe());
    let waiting = wait_line(status, j.queue_position, j.wait_reason.as_deref());
    let start = start_line(&j);
    view! {
        <Title text=format!("{} · gpuq", j.name) />
        <section class="card">
            <h1>{j.name.clone()}</h1>
            <p>
                "Status: " <strong id="job-status" class=format!("status status-{status}")>{status.as_str()}</strong>
                {j.exit_code.map(|c| format!(" (exit code {c})"))}
                {j.status_reason.clone().map(|r| format!(" — {r}"))}
            </p>
            {j.stop_cause.map(|c| view! { <p id="stop-cause">"Stopped by " {c.describe()}</p> })}
            {waiting.map(|w| view! { <p id="wait-reason">{w}</p> })}
            {super::budget::budget_lines(d.budgets)}
            {start.map(|w| view! { <p id="start-estimate">{w}</p> })}
            {j.node_lost.then(|| view! {
                <p id="node-lost"><span class="badge badge-over">"node lost"</span>
                    " its node stopped heartbeating: the job is not started elsewhere and keeps its cards until the node returns or an admin forgets it"</p>
            })}
            {over.map(|o| view! { <p id="vram-over"><span class="badge badge-over">"over its VRAM"</span> " " {o}</p> })}
            {idle.map(|w| view! { <p id="idle-flag"><span class="badge badge-over">"idle"</span> " " {w}</p> })}
            {j.session_url.is_some().then(|| view! {
                // Through gpuq: a one-time code carries the owner to the session origin.
                <a id="open-session" class="button" href=format!("/api/v1/jobs/{id}/session")
                    target="_blank" rel="noopener noreferrer">"Open"</a>
            })}
            {d.can_cancel.then(|| view! {
                <button type="button" class="danger" on:click=move |_| { cancel.dispatch(CancelJob { id }); }>
                    "Cancel job"
                </button>
            })}
            {d.can_resubmit.then(|| view! {
                <button id="resubmit" type="button" on:click=move |_| { resubmit.dispatch(ResubmitJob { id }); }>
                    "Resubmit as new job"
                </button>
            })}
            {move || action_error(resubmit.value().get())}
            <dl class="spec">
                <dt>"Owner"</dt><dd>{j.owner.clone()}</dd>
                <dt>"Image"</dt><dd>{j.image.clone()}</dd>
                <dt>"Image digest"</dt><dd class="mono">{j.image_digest.clone().unwrap_or_else(|| "not yet known".into())}</dd>
                <dt>"Command"</dt><dd>{if j.details_hidden {
                    view! { <span id="details-hidden" class="muted">"hidden: the command, volumes, timeline and log are the owner's (and their managers')"</span> }.into_any()
                } else {
                    view! { <code>{crate::model::spec::quote_argv(&j.command)}</code> }.into_any()
                }}</dd>
                <dt>"Needs"</dt><dd>{need(j.gpu_count, j.workload.as_deref(), j.min_vram_mb, j.exclusive)}</dd>
                <dt>"Cards"</dt><dd>{held}</dd>
                {(!vram.is_empty()).then(|| view! {
                    <dt>"VRAM used"</dt>
                    <dd id="job-vram">{vram.into_iter().map(|l| view! { <div>{l}</div> }).collect_view()}</dd>
                })}
                <dt>"Timeout"</dt><dd>{format!("{} s", j.timeout_s)}</dd>
            </dl>
        </section>
        <section class="card">
            <h2>"Timeline"</h2>
            <ol class="timeline">
                {d.events.into_iter().map(|e| view! {
                    <li data-kind=e.kind.as_str()>
                        <time>{e.at.format("%H:%M:%S%.3f").to_string()}</time>
                        " " <strong>{e.kind.as_str().replace('_', " ")}</strong>
                        {(!e.detail.is_empty()).then(|| format!(" — {}", e.detail))}
                        <span class="muted">{format!(" ({})", e.actor)}</span>
                    </li>
                }).collect_view()}
            </ol>
        </section>
    }
}

/// What the job asked for: cards, VRAM per card (by workload type or in MiB), whole cards.
fn need(
    gpu_count: u32,
    workload: Option<&str>,
    min_vram_mb: Option<i64>,
    exclusive: bool,
) -> String {
    let per_card = match (workload, min_vram_mb) {
        (Some(w), _) => format!("workload {w}"),
        (None, Some(m)) => format!("{m} MiB per card"),
        _ => "no GPU".into(),
    };
    let excl = if exclusive { ", whole cards" } else { "" };
    format!("{gpu_count} card(s), {per_card}{excl}")
}

/// The cards a job holds or held, one after another; "none yet" before admission.
fn cards(gpus: &[AssignedGpu]) -> String {
    if gpus.is_empty() {
        return "none yet".to_owned();
    }
    gpus.iter()
        .map(|g| {
            format!(
                "GPU {} · {} · {} · {} MiB",
                g.index, g.model, g.uuid, g.vram_mib
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the job was seen to use on each card against its commitment, one line per observed card.
fn vram_lines(gpus: &[AssignedGpu]) -> Vec<String> {
    gpus.iter()
        .filter_map(|g| {
            let used = g.used_mib?;
            let peak = g.peak_mib.unwrap_or(used);
            let acct = g
                .accounting_peak_mib
                .map(|a| format!("; driver's accounting peak {a} MiB"))
                .unwrap_or_default();
            Some(format!(
                "GPU {}: {used} MiB now, peak {peak} MiB, of {} MiB committed{acct}",
                g.index, g.vram_mib
            ))
        })
        .collect()
}

/// The owner's line when the job stayed above its commitment on some card.
fn over_line(gpus: &[AssignedGpu]) -> Option<String> {
    let over: Vec<String> = gpus
        .iter()
        .filter(|g| g.over_commitment)
        .map(|g| {
            format!(
                "GPU {} (committed {} MiB, peak {} MiB)",
                g.index,
                g.vram_mib,
                g.peak_mib.unwrap_or_default()
            )
        })
        .collect();
    (!over.is_empty()).then(|| {
        format!(
            "This job used more VRAM than it declared on {}. Jobs sharing the card can run out of \
             memory because of it; declare what it needs (a larger workload type or min_vram_mb).",
            over.join(", ")
        )
    })
}

/// Where a queued job stands and why it waits; nothing for a job that is not queued.
fn wait_line(status: JobStatus, position: Option<i64>, reason: Option<&str>) -> Option<String> {
    (status == JobStatus::Queued).then(|| {
        format!(
            "Queue position {}: {}",
            position.unwrap_or(0),
            reason.unwrap_or_default()
        )
    })
}

/// A queued job's start estimate in words: when it is expected to start and at the latest, or why
/// it cannot start; `None` for other jobs and before the first figure.
fn start_line(j: &crate::model::JobView) -> Option<String> {
    if j.status != JobStatus::Queued {
        return None;
    }
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    if let Some(why) = &j.cannot_start {
        return Some(format!("Cannot start as things stand: {why}"));
    }
    match (j.estimated_start_at, j.latest_start_at) {
        (Some(e), Some(l)) => Some(format!(
            "Expected to start around {}, at the latest {}",
            when(e),
            when(l)
        )),
        (Some(e), None) => Some(format!("Expected to start around {}", when(e))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_estimate_in_words() {
        let mut j: crate::model::JobView = serde_json::from_value(serde_json::json!({
            "id": "0badc0de-0000-4000-8000-000000000003", "seq": 1, "name": "s", "owner": "dave",
            "status": "queued", "image": "x", "command": [], "gpu_count": 1,
            "created_at": "2025-01-01T11:59:55Z", "exclusive": false, "priority": 0,
            "timeout_s": 3600, "volumes": [], "assigned_gpus": [],
            "estimated_start_at": "2025-01-01T12:10:00Z", "latest_start_at": "2025-01-01T13:05:00Z"
        }))
        .unwrap();
        assert_eq!(
            start_line(&j).as_deref(),
            Some(
                "Expected to start around 2025-01-01 12:10 UTC, at the latest 2025-01-01 13:05 UTC"
            )
        );
        j.cannot_start = Some("no card is big enough".into());
        assert_eq!(
            start_line(&j).as_deref(),
            Some("Cannot start as things stand: no card is big enough")
        );
        j.status = JobStatus::Running;
        assert_eq!(start_line(&j), None);
    }

    fn gpu(index: u32, model: &str, vram_mib: i64) -> AssignedGpu {
        AssignedGpu {
            uuid: format!("GPU-0000000{index}"),
            index,
            model: model.into(),
            vram_mib,
            ..Default::default()
        }
    }

    #[test]
    fn observed_vram_is_read_against_the_commitment() {
        let unseen = gpu(0, "A100", 4000);
        assert!(vram_lines(std::slice::from_ref(&unseen)).is_empty());
        assert_eq!(over_line(std::slice::from_ref(&unseen)), None);
        let seen = AssignedGpu {
            used_mib: Some(3000),
            peak_mib: Some(9000),
            accounting_peak_mib: Some(9500),
            over_commitment: true,
            ..gpu(1, "A100", 4000)
        };
        assert_eq!(
            vram_lines(&[unseen, seen.clone()]),
            vec!["GPU 1: 3000 MiB now, peak 9000 MiB, of 4000 MiB committed; driver's accounting peak 9500 MiB"]
        );
        let line = over_line(&[seen]).unwrap();
        assert!(
            line.contains("on GPU 1 (committed 4000 MiB, peak 9000 MiB)"),
            "{line}"
        );
    }

    #[test]
    fn the_need_names_the_workload_type_or_the_vram() {
        assert_eq!(
            need(2, Some("llm-7b"), None, false),
            "2 card(s), workload llm-7b"
        );
        assert_eq!(
            need(1, None, Some(16384), false),
            "1 card(s), 16384 MiB per card"
        );
        // A workload type decides the VRAM; an explicit figure beside it is not shown.
        assert_eq!(
            need(1, Some("résumé-ü"), Some(99), false),
            "1 card(s), workload résumé-ü"
        );
        assert_eq!(
            need(4, None, Some(1), true),
            "4 card(s), 1 MiB per card, whole cards"
        );
    }

    #[test]
    fn a_job_without_cards_says_so() {
        assert_eq!(need(0, None, None, false), "0 card(s), no GPU");
        assert_eq!(need(0, None, None, true), "0 card(s), no GPU, whole cards");
    }

    #[test]
    fn cards_list_every_card_or_none_yet() {
        assert_eq!(cards(&[]), "none yet");
        assert_eq!(
            cards(&[gpu(0, "A100", 20480)]),
            "GPU 0 · A100 · GPU-00000000 · 20480 MiB"
        );
        assert_eq!(
            cards(&[gpu(1, "H100", 40000), gpu(3, "H100", 40000)]),
            "GPU 1 · H100 · GPU-00000001 · 40000 MiB; GPU 3 · H100 · GPU-00000003 · 40000 MiB"
        );
    }

    #[test]
    fn only_a_queued_job_shows_its_place_and_reason() {
        assert_eq!(
            wait_line(
                JobStatus::Queued,
                Some(3),
                Some("no card has 40000 MiB free")
            )
            .as_deref(),
            Some("Queue position 3: no card has 40000 MiB free")
        );
        // Not placed yet (the next pass decides): position 0, empty reason.
        assert_eq!(
            wait_line(JobStatus::Queued, None, None).as_deref(),
            Some("Queue position 0: ")
        );
        for status in [
            JobStatus::Admitted,
            JobStatus::Running,
            JobStatus::Succeeded,
            JobStatus::Cancelled,
            JobStatus::Rejected,
        ] {
            assert_eq!(
                wait_line(status, Some(1), Some("stale")),
                None,
                "{status:?}"
            );
        }
    }
}
