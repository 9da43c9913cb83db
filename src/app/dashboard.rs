//! The dashboard: every card and what holds it, the queue, my jobs; a live server check.
//! Updates in place on live events.

use super::gate::SignedIn;
use super::live::use_live;
use crate::api::{dashboard, ServerStatus};
use crate::model::{human_duration, DashboardView, GpuView, JobView, StatusView, UserView};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;

/// `/`: signed-in users only; others are sent to the sign-in page.
#[component]
pub fn DashboardPage() -> impl IntoView {
    view! {
        <Title text="Dashboard · gpuq" />
        <SignedIn page=|user| view! { <Dashboard user /> } />
    }
}

#[component]
fn Dashboard(user: UserView) -> impl IntoView {
    view! {
        <section class="card">
            <h1>{format!("Welcome, {}", user.username)}</h1>
            <p>
                "You are signed in as " <strong>{user.role.as_str()}</strong> ". "
                <A href="/submit">"Submit a job"</A>
            </p>
        </section>
        <Overview />
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
fn Overview() -> impl IntoView {
    let live = use_live();
    let data = Resource::new(move || live.get(), |_| dashboard());
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
    let waiting = match (d.waiting, d.oldest_wait_since) {
        (0, _) => "Nobody is waiting.".to_owned(),
        (n, Some(since)) => format!(
            "{n} job(s) waiting; the oldest since {} UTC.",
            since.format("%Y-%m-%d %H:%M:%S")
        ),
        (n, None) => format!("{n} job(s) waiting."),
    };
    view! {
        <section class="card">
            <h2>"GPUs"</h2>
            <p id="queue-summary">{waiting}</p>
            <div class="gpus">{d.gpus.into_iter().map(|g| view! { <GpuCard g /> }).collect_view()}</div>
        </section>
        <section class="card">
            <h2>"My jobs"</h2>
            <MyJobs jobs=d.mine />
        </section>
    }
}

fn pct(part: i64, total: i64) -> f64 {
    if total <= 0 {
        0.0
    } else {
        (part.max(0) as f64 * 100.0 / total as f64).min(100.0)
    }
}

#[component]
fn GpuCard(g: GpuView) -> impl IntoView {
    let label = format!(
        "reserved {} MiB, foreign {} MiB, free {} MiB of {} MiB",
        g.reserved_mib, g.external_mib, g.free_mib, g.total_mib
    );
    let reserved = format!("width: {:.1}%", pct(g.reserved_mib, g.total_mib));
    let external = format!("width: {:.1}%", pct(g.external_mib, g.total_mib));
    view! {
        <article class="gpu" data-gpu=g.index>
            <h3>{format!("GPU {} · {}", g.index, g.model)}</h3>
            <p class="muted">{format!("{} · {}", g.node, g.state)}</p>
            <div class="bar" role="img" aria-label=label.clone()>
                <span class="reserved" style=reserved></span>
                <span class="external" style=external></span>
            </div>
            <p class="legend">{label}</p>
            <ul class="holders">
                {g.jobs.into_iter().map(|h| view! {
                    <li>
                        <A href=format!("/jobs/{}", h.id)>{h.name}</A>
                        {format!(" · {} · {} MiB · {}", h.owner, h.vram_mib, match h.running_s {
                            Some(s) => format!("running {}", human_duration(s)),
                            None => h.status.clone(),
                        })}
                    </li>
                }).collect_view()}
            </ul>
        </article>
    }
}

#[component]
fn MyJobs(jobs: Vec<JobView>) -> impl IntoView {
    if jobs.is_empty() {
        return view! { <p>"No unfinished jobs."</p> }.into_any();
    }
    view! {
        <table>
            <thead><tr><th scope="col">"Job"</th><th scope="col">"Status"</th><th scope="col">"GPUs"</th><th scope="col">"Waiting because"</th></tr></thead>
            <tbody>
                {jobs.into_iter().map(|j| view! {
                    <tr>
                        <td><A href=format!("/jobs/{}", j.id)>{j.name}</A></td>
                        <td class=format!("status status-{}", j.status)>{j.status.as_str()}</td>
                        <td>{j.assigned_gpus.iter().map(|g| format!("GPU {}", g.index)).collect::<Vec<_>>().join(", ")}</td>
                        <td>{j.wait_reason.unwrap_or_default()}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
