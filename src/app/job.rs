//! A job's page: status, timeline from the audit trail, cards, spec, live log tail, cancel.

use super::alert::action_error;
use super::gate::SignedIn;
use super::live::use_live;
use crate::api::{get_job_detail, job_log, CancelJob, ResubmitJob};
use crate::model::{JobDetail, JobStatus};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use uuid::Uuid;

/// `/jobs/:id`
#[component]
pub fn JobPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || {
        params
            .read()
            .get("id")
            .and_then(|s| Uuid::parse_str(&s).ok())
    };
    view! {
        <Title text="Job · gpuq" />
        <SignedIn page=move |_| match id() {
            Some(id) => view! { <JobView id /> }.into_any(),
            None => view! { <p class="card error">"Not a job id."</p> }.into_any(),
        } />
    }
}

#[component]
fn JobView(id: Uuid) -> impl IntoView {
    let live = use_live();
    let cancel = ServerAction::<CancelJob>::new();
    let detail = Resource::new(
        move || (live.get(), cancel.version().get()),
        move |_| get_job_detail(id),
    );
    // The log follows while the job runs: every second, and on every live event.
    let log_tick = RwSignal::new(0u64);
    follow(log_tick);
    let log = Resource::new(
        move || (live.get(), log_tick.get()),
        move |_| job_log(id, 200),
    );
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
fn follow(tick: RwSignal<u64>) {
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(
            move || tick.update(|n| *n += 1),
            std::time::Duration::from_secs(1),
        ) {
            on_cleanup(move || handle.clear());
        }
    });
}

#[cfg(not(feature = "hydrate"))]
fn follow(_tick: RwSignal<u64>) {}

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
    let gpus = j
        .assigned_gpus
        .iter()
        .map(|g| {
            format!(
                "GPU {} · {} · {} · {} MiB",
                g.index, g.model, g.uuid, g.vram_mib
            )
        })
        .collect::<Vec<_>>();
    let waiting = (status == JobStatus::Queued).then(|| {
        format!(
            "Queue position {}: {}",
            j.queue_position.unwrap_or(0),
            j.wait_reason.clone().unwrap_or_default()
        )
    });
    view! {
        <Title text=format!("{} · gpuq", j.name) />
        <section class="card">
            <h1>{j.name.clone()}</h1>
            <p>
                "Status: " <strong id="job-status" class=format!("status status-{status}")>{status.as_str()}</strong>
                {j.exit_code.map(|c| format!(" (exit code {c})"))}
                {j.status_reason.clone().map(|r| format!(" — {r}"))}
            </p>
            {waiting.map(|w| view! { <p id="wait-reason">{w}</p> })}
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
                <dt>"Command"</dt><dd><code>{crate::model::spec::quote_argv(&j.command)}</code></dd>
                <dt>"Needs"</dt><dd>{need(&j)}</dd>
                <dt>"Cards"</dt><dd>{if gpus.is_empty() { "none yet".to_owned() } else { gpus.join("; ") }}</dd>
                <dt>"Timeout"</dt><dd>{format!("{} s", j.timeout_s)}</dd>
            </dl>
        </section>
        <section class="card">
            <h2>"Timeline"</h2>
            <ol class="timeline">
                {d.events.into_iter().map(|e| view! {
                    <li data-kind=e.kind.clone()>
                        <time>{e.at.format("%H:%M:%S%.3f").to_string()}</time>
                        " " <strong>{e.kind.replace('_', " ")}</strong>
                        {(!e.detail.is_empty()).then(|| format!(" — {}", e.detail))}
                        <span class="muted">{format!(" ({})", e.actor)}</span>
                    </li>
                }).collect_view()}
            </ol>
        </section>
    }
}

fn need(j: &crate::model::JobView) -> String {
    let per_card = match (&j.workload, j.min_vram_mb) {
        (Some(w), _) => format!("workload {w}"),
        (None, Some(m)) => format!("{m} MiB per card"),
        _ => "no GPU".into(),
    };
    let excl = if j.exclusive { ", whole cards" } else { "" };
    format!("{} card(s), {per_card}{excl}", j.gpu_count)
}
