//! Queue and history: every job, filtered by status, owner or "mine", sorted newest or oldest
//! first, in queue order or by name, a page at a time; queue positions and wait reasons for queued jobs; cancel where allowed.

use super::alert::action_error;
use super::gate::SignedIn;
use super::live::use_live;
use crate::api::{list_jobs, CancelJob};
use crate::model::{JobPage, JobStatus, Role, UserView};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;

/// `/jobs`
#[component]
pub fn QueuePage() -> impl IntoView {
    view! {
        <Title text="Jobs · gpuq" />
        <SignedIn page=|me| view! { <Queue me /> } />
    }
}

#[component]
fn Queue(me: UserView) -> impl IntoView {
    let live = use_live();
    let status = RwSignal::new(String::new());
    let owner = RwSignal::new(String::new());
    let mine = RwSignal::new(false);
    let sort = RwSignal::new(String::new());
    let page = RwSignal::new(1i64);
    let cancel = ServerAction::<CancelJob>::new();
    let jobs = Resource::new(
        move || {
            (
                live.get(),
                cancel.version().get(),
                status.get(),
                owner.get(),
                mine.get(),
                page.get(),
                sort.get(),
            )
        },
        |(_, _, s, o, m, p, order)| list_jobs(s, o, m, p, order),
    );
    let statuses = [
        ("", "all"),
        ("queued", "queued"),
        ("admitted,starting,running", "running"),
        ("succeeded,failed,cancelled,timed_out,rejected", "finished"),
    ];
    view! {
        <section class="card">
            <h1>"Jobs"</h1>
            <form class="row filters" on:submit=|ev| ev.prevent_default()>
                <div class="field">
                    <label for="filter-status">"Status"</label>
                    <select id="filter-status" on:change=move |ev| { status.set(event_target_value(&ev)); page.set(1); }>
                        {statuses.into_iter().map(|(v, l)| view! { <option value=v>{l}</option> }).collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for="filter-owner">"Owner"</label>
                    <input id="filter-owner" type="text" prop:value=move || owner.get()
                        on:change=move |ev| { owner.set(event_target_value(&ev)); page.set(1); } />
                </div>
                <div class="field">
                    <label for="filter-sort">"Sort"</label>
                    <select id="filter-sort" on:change=move |ev| { sort.set(event_target_value(&ev)); page.set(1); }>
                        <option value="newest">"newest first"</option>
                        <option value="oldest">"oldest first"</option>
                        <option value="queue">"queue order (priority, then age)"</option>
                        <option value="name">"name"</option>
                    </select>
                </div>
                <div class="field checkbox">
                    <label>
                        <input id="filter-mine" type="checkbox" prop:checked=move || mine.get()
                            on:change=move |ev| { mine.set(event_target_checked(&ev)); page.set(1); } />
                        " Only mine"
                    </label>
                </div>
            </form>
            {move || action_error(cancel.value().get())}
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || {
                    let me = me.clone();
                    Suspend::new(async move {
                        match jobs.await {
                            Ok(p) => view! { <Table p me cancel page /> }.into_any(),
                            Err(e) => view! { <p class="error">{e.to_string()}</p> }.into_any(),
                        }
                    })
                }}
            </Transition>
        </section>
    }
}

#[component]
fn Table(
    p: JobPage,
    me: UserView,
    cancel: ServerAction<CancelJob>,
    page: RwSignal<i64>,
) -> impl IntoView {
    let pages = ((p.total + p.per_page - 1) / p.per_page).max(1);
    let current = p.page;
    let (first, last) = (current <= 1, current >= pages);
    let may_cancel = move |owner: &str, status: JobStatus| {
        !status.is_terminal() && (owner == me.username || me.role.at_least(Role::Admin))
    };
    view! {
        <table id="jobs">
            <thead>
                <tr>
                    <th scope="col">"Job"</th><th scope="col">"Owner"</th><th scope="col">"Status"</th>
                    <th scope="col">"GPUs"</th><th scope="col">"Submitted"</th><th scope="col">"Queue"</th><th scope="col"></th>
                </tr>
            </thead>
            <tbody>
                {p.jobs.into_iter().map(|j| {
                    let id = j.id;
                    let queue = j.queue_position.map(|q| format!("#{q}: {}", j.wait_reason.clone().unwrap_or_default()));
                    let cancellable = may_cancel(&j.owner, j.status);
                    view! {
                        <tr>
                            <td><A href=format!("/jobs/{id}")>{j.name.clone()}</A></td>
                            <td>{j.owner.clone()}</td>
                            <td class=format!("status status-{}", j.status)>{j.status.as_str()}</td>
                            <td>{j.gpu_count}</td>
                            <td>{j.created_at.format("%Y-%m-%d %H:%M:%S").to_string()}</td>
                            <td class="wait">{queue}</td>
                            <td>{cancellable.then(|| view! {
                                <button type="button" class="small danger" on:click=move |_| { cancel.dispatch(CancelJob { id }); }>
                                    "Cancel"
                                </button>
                            })}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        <nav class="pager" aria-label="Pages">
            <button type="button" disabled=first on:click=move |_| page.update(|p| *p -= 1)>"Previous"</button>
            <span>{format!(" page {current} of {pages} ({} jobs) ", p.total)}</span>
            <button type="button" disabled=last on:click=move |_| page.update(|p| *p += 1)>"Next"</button>
        </nav>
    }
}
