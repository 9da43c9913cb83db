//! Queue and history: every job, filtered by status, owner or "mine", sorted newest or oldest
//! first, in queue order or by name, a page at a time; queue positions and wait reasons for queued jobs; cancel where allowed.

use super::alert::{action_error, loaded};
use super::gate::SignedIn;
use super::live::use_live;
use super::widgets::{column_heads, danger_cell};
use crate::api::{list_jobs, CancelArray, CancelJob, ResubmitArray};
use crate::model::batch::ArraySummary;
use crate::model::{AppError, JobPage, JobStatus, JobView, Role, UserView};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;

/// `/jobs`
///
/// The filters and the page of jobs live here, once per page, not inside [`SignedIn`]'s page:
/// server-side rendering may run that closure more than once, and markup from one read of the
/// changing queue with hydration data from another would break hydration.
#[component]
pub fn QueuePage() -> impl IntoView {
    let filters = Filters::new();
    view! {
        <Title text="Jobs · gpuq" />
        <SignedIn page=move |me| view! { <Queue me filters /> } />
    }
}

/// The queue page's filters and the page of jobs they select.
#[derive(Clone, Copy)]
struct Filters {
    status: RwSignal<String>,
    owner: RwSignal<String>,
    mine: RwSignal<bool>,
    sort: RwSignal<String>,
    page: RwSignal<i64>,
    cancel: ServerAction<CancelJob>,
    cancel_array: ServerAction<CancelArray>,
    resubmit_array: ServerAction<ResubmitArray>,
    jobs: Resource<Result<JobPage, AppError>>,
}

impl Filters {
    fn new() -> Self {
        let live = use_live();
        let status = RwSignal::new(String::new());
        let owner = RwSignal::new(String::new());
        let mine = RwSignal::new(false);
        let sort = RwSignal::new(String::new());
        let page = RwSignal::new(1i64);
        let cancel = ServerAction::<CancelJob>::new();
        let cancel_array = ServerAction::<CancelArray>::new();
        let resubmit_array = ServerAction::<ResubmitArray>::new();
        let jobs = Resource::new(
            move || {
                (
                    live.get(),
                    (
                        cancel.version().get(),
                        cancel_array.version().get(),
                        resubmit_array.version().get(),
                    ),
                    status.get(),
                    owner.get(),
                    mine.get(),
                    page.get(),
                    sort.get(),
                )
            },
            |(_, _, s, o, m, p, order)| list_jobs(s, o, m, p, order),
        );
        Filters {
            status,
            owner,
            mine,
            sort,
            page,
            cancel,
            cancel_array,
            resubmit_array,
            jobs,
        }
    }

    /// Sets one filter; the list starts again at its first page.
    fn refine<T: Send + Sync + 'static>(self, filter: RwSignal<T>, value: T) {
        filter.set(value);
        self.page.set(1);
    }
}

/// The status filter's choices: the `status` query value and its label.
const STATUS_FILTERS: [(&str, &str); 4] = [
    ("", "all"),
    ("queued", "queued"),
    ("admitted,starting,running", "running"),
    ("succeeded,failed,cancelled,timed_out,rejected", "finished"),
];

#[component]
fn Queue(me: UserView, filters: Filters) -> impl IntoView {
    view! {
        <section class="card">
            <h1>"Jobs"</h1>
            <super::budget::MyBudgets />
            <form class="row filters" on:submit=|ev| ev.prevent_default()>
                <div class="field">
                    <label for="filter-status">"Status"</label>
                    <select id="filter-status" on:change=move |ev| filters.refine(filters.status, event_target_value(&ev))>
                        {STATUS_FILTERS.into_iter().map(|(v, l)| view! { <option value=v>{l}</option> }).collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for="filter-owner">"Owner"</label>
                    <input id="filter-owner" type="text" prop:value=move || filters.owner.get()
                        on:change=move |ev| filters.refine(filters.owner, event_target_value(&ev)) />
                </div>
                <div class="field">
                    <label for="filter-sort">"Sort"</label>
                    <select id="filter-sort" on:change=move |ev| filters.refine(filters.sort, event_target_value(&ev))>
                        <option value="newest">"newest first"</option>
                        <option value="oldest">"oldest first"</option>
                        <option value="queue">"queue order (priority, then age)"</option>
                        <option value="name">"name"</option>
                    </select>
                </div>
                <div class="field checkbox">
                    <label>
                        <input id="filter-mine" type="checkbox" prop:checked=move || filters.mine.get()
                            on:change=move |ev| filters.refine(filters.mine, event_target_checked(&ev)) />
                        " Only mine"
                    </label>
                </div>
            </form>
            {move || action_error(filters.cancel.value().get())}
            {move || action_error(filters.cancel_array.value().get())}
            {move || action_error(filters.resubmit_array.value().get())}
            {loaded(filters.jobs, move |p| view! {
                <Table p me=me.clone() cancel=filters.cancel cancel_array=filters.cancel_array
                    resubmit_array=filters.resubmit_array page=filters.page />
            })}
        </section>
    }
}

/// Pages of `per_page` jobs that `total` jobs fill; an empty list is still one page.
fn page_count(total: i64, per_page: i64) -> i64 {
    ((total + per_page - 1) / per_page).max(1)
}

/// The queue column: place in the queue and why the job waits; empty for jobs not queued.
fn queue_cell(position: Option<i64>, reason: Option<&str>) -> Option<String> {
    position.map(|q| format!("#{q}: {}", reason.unwrap_or_default()))
}

/// Whether `me` gets a Cancel button: on an unfinished job of their own, or any unfinished job
/// for an admin.
fn may_cancel(me: &UserView, owner: &str, status: JobStatus) -> bool {
    !status.is_terminal() && (owner == me.username || me.role.at_least(Role::Admin))
}

/// An array row's counts: the whole array's, as the server counted them, where the page carries
/// them; else those of its elements on this page.
fn whole_counts(
    summary: Option<&ArraySummary>,
    on_page: Vec<(JobStatus, usize)>,
) -> Vec<(JobStatus, usize)> {
    let Some(s) = summary else { return on_page };
    JobStatus::ALL
        .iter()
        .filter_map(|st| {
            let n = *s.counts.get(st.as_str())?;
            (n > 0).then_some((*st, usize::try_from(n).unwrap_or(0)))
        })
        .collect()
}

/// Whether `me` gets a Cancel button on an array row: some element has not ended, and the array
/// is theirs (or they are an admin).
fn may_cancel_array(me: &UserView, owner: &str, counts: &[(JobStatus, usize)]) -> bool {
    counts.iter().any(|(s, n)| *n > 0 && !s.is_terminal())
        && (owner == me.username || me.role.at_least(Role::Admin))
}

/// What the button cell of an array row offers `me`: Cancel while some element has not ended
/// (its owner, or an admin); once all ended, Resubmit failed where some failed or timed out (its
/// owner only: the elements' env is theirs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArrayButton {
    Cancel,
    ResubmitFailed,
}

fn array_button(me: &UserView, owner: &str, counts: &[(JobStatus, usize)]) -> Option<ArrayButton> {
    if may_cancel_array(me, owner, counts) {
        return Some(ArrayButton::Cancel);
    }
    let all_ended = counts.iter().all(|(s, _)| s.is_terminal());
    let some_failed = counts
        .iter()
        .any(|(s, n)| *n > 0 && matches!(s, JobStatus::Failed | JobStatus::TimedOut));
    (all_ended && some_failed && owner == me.username).then_some(ArrayButton::ResubmitFailed)
}

/// A row of the table: one job, or the elements of one array that this page holds.
#[derive(Debug, Clone, PartialEq)]
enum Row {
    /// A job of its own.
    Job(Box<JobView>),
    /// An array's elements on this page: the first of them, and how many are in each status.
    Array {
        /// The first element on the page (its row links there).
        first: Box<JobView>,
        /// Elements per status, in the vocabulary's order.
        counts: Vec<(JobStatus, usize)>,
    },
}

/// The page's jobs with each array's elements gathered into one row, where its first element is.
fn rows(jobs: Vec<JobView>) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::with_capacity(jobs.len());
    for j in jobs {
        let Some(array) = j.array_id else {
            out.push(Row::Job(Box::new(j)));
            continue;
        };
        let at = out
            .iter()
            .position(|r| matches!(r, Row::Array { first, .. } if first.array_id == Some(array)));
        match at {
            Some(i) => {
                if let Row::Array { counts, .. } = &mut out[i] {
                    match counts.iter_mut().find(|(s, _)| *s == j.status) {
                        Some((_, n)) => *n += 1,
                        None => counts.push((j.status, 1)),
                    }
                    counts.sort_by_key(|(s, _)| JobStatus::ALL.iter().position(|a| a == s));
                }
            }
            None => out.push(Row::Array {
                counts: vec![(j.status, 1)],
                first: Box::new(j),
            }),
        }
    }
    out
}

/// `3 queued · 2 running`: an array row's status cell.
fn counts_cell(counts: &[(JobStatus, usize)]) -> String {
    counts
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// An array's name: its elements' name without their `-<index>`.
fn array_name(element: &JobView) -> String {
    let base = match element.array_index {
        Some(i) => element
            .name
            .strip_suffix(&format!("-{i}"))
            .unwrap_or(&element.name),
        None => &element.name,
    };
    format!("{base} (array)")
}

#[component]
fn Table(
    p: JobPage,
    me: UserView,
    cancel: ServerAction<CancelJob>,
    cancel_array: ServerAction<CancelArray>,
    resubmit_array: ServerAction<ResubmitArray>,
    page: RwSignal<i64>,
) -> impl IntoView {
    let summaries = p.arrays.clone();
    let pages = page_count(p.total, p.per_page);
    let current = p.page;
    let (first, last) = (current <= 1, current >= pages);
    view! {
        <table id="jobs">
            {column_heads(["Job", "Owner", "Status", "GPUs", "Submitted", "Queue", ""])}
            <tbody>
                {rows(p.jobs).into_iter().map(|row| {
                    let j = match row {
                        Row::Job(j) => *j,
                        Row::Array { first, counts } => {
                            let id = first.id;
                            let array = first.array_id.unwrap_or_default();
                            let counts = whole_counts(
                                summaries.iter().find(|s| s.array_id == array),
                                counts,
                            );
                            let button = array_button(&me, &first.owner, &counts);
                            let name = array_name(&first);
                            let owner = first.owner.clone();
                            let gpus = first.gpu_count;
                            let submitted = first.created_at.format("%Y-%m-%d %H:%M:%S").to_string();
                            return view! {
                                <tr class="array">
                                    <td><A href=format!("/jobs/{id}")>{name}</A></td>
                                    <td>{owner}</td>
                                    <td class="status">{counts_cell(&counts)}</td>
                                    <td>{gpus}</td>
                                    <td>{submitted}</td>
                                    <td class="wait"></td>
                                    {match button {
                                        Some(ArrayButton::ResubmitFailed) => view! {
                                            <td>
                                                <button type="button" class="small" on:click=move |_| {
                                                    resubmit_array.dispatch(ResubmitArray { id: array });
                                                }>"Resubmit failed"</button>
                                            </td>
                                        }.into_any(),
                                        b => danger_cell(b == Some(ArrayButton::Cancel), "Cancel array", move || {
                                            cancel_array.dispatch(CancelArray { id: array });
                                        }).into_any(),
                                    }}
                                </tr>
                            }.into_any();
                        }
                    };
                    let id = j.id;
                    let queue = queue_cell(j.queue_position, j.wait_reason.as_deref());
                    let cancellable = may_cancel(&me, &j.owner, j.status);
                    view! {
                        <tr>
                            <td><A href=format!("/jobs/{id}")>{j.name.clone()}</A></td>
                            <td>{j.owner.clone()}</td>
                            <td class=format!("status status-{}", j.status)>{j.status.as_str()}</td>
                            <td>{j.gpu_count}</td>
                            <td>{j.created_at.format("%Y-%m-%d %H:%M:%S").to_string()}</td>
                            <td class="wait">{queue}</td>
                            {danger_cell(cancellable, "Cancel", move || { cancel.dispatch(CancelJob { id }); })}
                        </tr>
                    }.into_any()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, role: Role) -> UserView {
        UserView {
            id: uuid::Uuid::nil(),
            username: name.into(),
            role,
            disabled: false,
            team: "default".into(),
            weight: 1.0,
            budget: None,
        }
    }

    fn job(name: &str, status: JobStatus, array: Option<(uuid::Uuid, i32)>) -> JobView {
        let mut v: JobView = serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::new_v4(), "seq": 1, "name": name, "owner": "o", "status": status,
            "image": "i", "command": [], "gpu_count": 1, "exclusive": false, "priority": 0,
            "timeout_s": 1, "volumes": [], "assigned_gpus": [],
            "created_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap();
        v.array_id = array.map(|a| a.0);
        v.array_index = array.map(|a| a.1);
        v
    }

    #[test]
    fn an_arrays_elements_are_one_row_with_counts_per_status() {
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let page = vec![
            job("lone", JobStatus::Queued, None),
            job("sweep-2", JobStatus::Running, Some((a, 2))),
            job("other-0", JobStatus::Queued, Some((b, 0))),
            job("sweep-1", JobStatus::Queued, Some((a, 1))),
            job("sweep-0", JobStatus::Running, Some((a, 0))),
        ];
        let r = rows(page);
        assert_eq!(r.len(), 3);
        assert!(matches!(&r[0], Row::Job(j) if j.name == "lone"));
        let Row::Array { first, counts } = &r[1] else {
            panic!("an array row")
        };
        assert_eq!(array_name(first), "sweep (array)");
        assert_eq!(counts_cell(counts), "1 queued · 2 running");
        assert!(matches!(&r[2], Row::Array { counts, .. } if counts_cell(counts) == "1 queued"));
    }

    #[test]
    fn an_array_row_counts_the_whole_array_where_the_page_carries_it() {
        let on_page = vec![(JobStatus::Queued, 2)];
        assert_eq!(whole_counts(None, on_page.clone()), on_page);
        let summary = ArraySummary {
            array_id: uuid::Uuid::nil(),
            size: 7,
            running_limit: Some(2),
            counts: [
                ("succeeded".to_owned(), 3),
                ("queued".to_owned(), 2),
                ("running".to_owned(), 2),
            ]
            .into_iter()
            .collect(),
        };
        let mut want = vec![
            (JobStatus::Succeeded, 3),
            (JobStatus::Queued, 2),
            (JobStatus::Running, 2),
        ];
        want.sort_by_key(|(s, _)| JobStatus::ALL.iter().position(|a| a == s));
        assert_eq!(whole_counts(Some(&summary), on_page), want);
    }

    #[test]
    fn only_an_arrays_owner_or_an_admin_may_cancel_it_while_some_element_runs() {
        let alice = user("alice", Role::Member);
        let ada = user("ada", Role::Admin);
        let live = [(JobStatus::Queued, 1), (JobStatus::Succeeded, 2)];
        let done = [(JobStatus::Succeeded, 2), (JobStatus::Failed, 1)];
        assert!(may_cancel_array(&alice, "alice", &live));
        assert!(may_cancel_array(&ada, "alice", &live));
        assert!(!may_cancel_array(&alice, "bob", &live));
        assert!(!may_cancel_array(&alice, "alice", &done));
    }

    #[test]
    fn an_ended_array_with_failures_offers_its_owner_a_resubmit_and_no_one_else() {
        let alice = user("alice", Role::Member);
        let ada = user("ada", Role::Admin);
        let failed = [(JobStatus::Succeeded, 2), (JobStatus::Failed, 1)];
        let fine = [(JobStatus::Succeeded, 3)];
        let live = [(JobStatus::Running, 1), (JobStatus::Failed, 1)];
        assert_eq!(
            array_button(&alice, "alice", &failed),
            Some(ArrayButton::ResubmitFailed)
        );
        assert_eq!(array_button(&ada, "alice", &failed), None);
        assert_eq!(array_button(&alice, "bob", &failed), None);
        assert_eq!(array_button(&alice, "alice", &fine), None);
        assert_eq!(
            array_button(&alice, "alice", &live),
            Some(ArrayButton::Cancel)
        );
    }

    #[test]
    fn pages_round_up_and_never_drop_to_zero() {
        assert_eq!(page_count(0, 50), 1);
        assert_eq!(page_count(1, 50), 1);
        assert_eq!(page_count(50, 50), 1);
        assert_eq!(page_count(51, 50), 2);
        assert_eq!(page_count(100, 50), 2);
        assert_eq!(page_count(101, 50), 3);
        assert_eq!(page_count(7, 1), 7);
        assert_eq!(page_count(1_000_000_000, 25), 40_000_000);
    }

    #[test]
    fn a_queued_job_shows_its_place_and_reason() {
        assert_eq!(
            queue_cell(Some(1), Some("waiting for 2 free cards")).as_deref(),
            Some("#1: waiting for 2 free cards")
        );
        assert_eq!(queue_cell(Some(12), None).as_deref(), Some("#12: "));
        assert_eq!(
            queue_cell(Some(2), Some("à l'attente · 显卡")).as_deref(),
            Some("#2: à l'attente · 显卡")
        );
        // Not queued: nothing, even if a stale reason came along.
        assert_eq!(queue_cell(None, Some("stale")), None);
        assert_eq!(queue_cell(None, None), None);
    }

    #[test]
    fn owners_cancel_their_own_unfinished_jobs() {
        let alice = user("alice", Role::Member);
        assert!(may_cancel(&alice, "alice", JobStatus::Queued));
        assert!(may_cancel(&alice, "alice", JobStatus::Running));
        assert!(!may_cancel(&alice, "bob", JobStatus::Queued));
        // The name must match exactly.
        assert!(!may_cancel(&alice, "Alice", JobStatus::Queued));
        assert!(!may_cancel(&alice, "alice ", JobStatus::Queued));
        assert!(!may_cancel(&alice, "", JobStatus::Queued));
    }

    #[test]
    fn only_admins_cancel_other_peoples_jobs() {
        let manager = user("mia", Role::Manager);
        let admin = user("root", Role::Admin);
        assert!(!may_cancel(&manager, "bob", JobStatus::Running));
        assert!(may_cancel(&admin, "bob", JobStatus::Running));
        assert!(may_cancel(&admin, "bob", JobStatus::Admitted));
    }

    #[test]
    fn nobody_cancels_a_finished_job() {
        let admin = user("root", Role::Admin);
        for &status in JobStatus::ALL {
            assert_eq!(
                may_cancel(&admin, "root", status),
                !status.is_terminal(),
                "{status:?}"
            );
        }
        assert!(!may_cancel(&admin, "root", JobStatus::Succeeded));
        assert!(!may_cancel(&admin, "root", JobStatus::TimedOut));
    }

    #[test]
    fn every_status_is_in_exactly_one_filter() {
        let (all, groups) = STATUS_FILTERS.split_first().unwrap();
        assert_eq!(*all, ("", "all"));
        for &status in JobStatus::ALL {
            let found = groups
                .iter()
                .filter(|(value, _)| value.split(',').any(|s| s == status.as_str()))
                .count();
            assert_eq!(found, 1, "{status:?}");
        }
        // Every name sent is one the server knows.
        for (value, _) in groups {
            for name in value.split(',') {
                assert!(name.parse::<JobStatus>().is_ok(), "{name}");
            }
        }
        // "finished" means terminal, "queued" and "running" do not.
        for (value, label) in groups {
            for name in value.split(',') {
                let terminal = name.parse::<JobStatus>().unwrap().is_terminal();
                assert_eq!(terminal, *label == "finished", "{name}");
            }
        }
    }
}
