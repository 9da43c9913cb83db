//! `/admin` (admins): cards (drain / undrain / offline), nodes (drain / undrain / forget), users
//! (create, role, disable, team, weight, budget), teams (`app::teams`), the launch policy and registry credentials (`app::registries`). Every change goes through the same service functions as the REST API.

use super::alert::{action_error, loaded, Fetched};
use super::gate::SignedInAs;
use super::live::use_live;
use super::widgets::{check_box, column_heads, number_input, table_or_note, text_area};
use crate::api::{
    dashboard, get_launch_policy, list_nodes, list_users, CreateUser, ForgetNode, SaveLaunchPolicy,
    SetGpuState, SetNodeState, UpdateUser,
};
use crate::model::{
    DashboardView, GpuState, IdleAction, JobNetwork, LaunchPolicy, NodeState, NodeView, PullPolicy,
    Role, UserView, VolumeRule, VramEnforcement,
};
use leptos::prelude::*;
use leptos_meta::Title;

/// `/admin`
///
/// The page's data is fetched here, once per page, not inside [`SignedInAs`]'s page: server-side
/// rendering may run that closure more than once (see the job page). A non-admin's fetches are
/// refused or unused, and never shown. Each section refetches after its own actions (cards and
/// nodes also on every live event).
#[component]
pub fn AdminPage() -> impl IntoView {
    let live = use_live();
    let set_gpu = ServerAction::<SetGpuState>::new();
    let gpus = Resource::new(
        move || (live.get(), set_gpu.version().get()),
        |_| dashboard(),
    );
    let set_node = ServerAction::<SetNodeState>::new();
    let forget = ServerAction::<ForgetNode>::new();
    let nodes = Resource::new(
        move || (live.get(), set_node.version().get(), forget.version().get()),
        |_| list_nodes(),
    );
    let create = ServerAction::<CreateUser>::new();
    let update = ServerAction::<UpdateUser>::new();
    let place = ServerAction::<crate::api::PlaceUser>::new();
    let users = Resource::new(
        move || {
            let versions = (create.version().get(), update.version().get());
            (versions, place.version().get())
        },
        |_| list_users(),
    );
    let create_team = ServerAction::<crate::api::CreateTeam>::new();
    let update_team = ServerAction::<crate::api::UpdateTeam>::new();
    let teams = Resource::new(
        move || {
            let versions = (create_team.version().get(), update_team.version().get());
            (versions, place.version().get())
        },
        |_| crate::api::list_teams(),
    );
    let save = ServerAction::<SaveLaunchPolicy>::new();
    // Read again after a save that succeeded (the form then shows what is stored), never after a
    // refused one: the form, rebuilt from the stored policy, would throw away what the admin is
    // correcting.
    let saved = RwSignal::new(0u64);
    Effect::new(move |_| {
        if let Some(Ok(_)) = save.value().get() {
            saved.update(|n| *n += 1);
        }
    });
    let policy = Resource::new(move || saved.get(), |_| get_launch_policy());
    let set_registry = ServerAction::<crate::api::SetRegistry>::new();
    let remove_registry = ServerAction::<crate::api::RemoveRegistry>::new();
    let registries = Resource::new(
        move || {
            (
                set_registry.version().get(),
                remove_registry.version().get(),
            )
        },
        |_| crate::api::list_registries(),
    );
    view! {
        <Title text="Admin · gpuq" />
        <SignedInAs
            min=Role::Admin
            page=move |me| view! {
                <Cards set=set_gpu gpus />
                <Nodes set=set_node forget nodes />
                <Users me create update place users />
                <super::teams::Teams create=create_team update=update_team teams />
                <Policy save policy />
                <super::registries::Registries set=set_registry remove=remove_registry registries />
            }
            refused=|| view! { <p class="card error" role="alert">"This page is for admins."</p> }
        />
    }
}

#[component]
fn Cards(set: ServerAction<SetGpuState>, gpus: Fetched<DashboardView>) -> impl IntoView {
    view! {
        <section class="card">
            <h1>"Admin"</h1>
            <h2>"GPUs"</h2>
            <p class="muted">"A draining card runs its jobs out and admits nothing new; an offline card is not counted at all."</p>
            {move || action_error(set.value().get())}
            {loaded(gpus, move |d| view! {
                <table id="gpu-states">
                    {column_heads(["Card", "Node", "Jobs", "State"])}
                    <tbody>
                        {d.gpus.into_iter().map(|g| {
                            let uuid = g.uuid.clone();
                            let label = format!("State of GPU {} on {}", g.index, g.node);
                            let current = g.state;
                            view! {
                                <tr data-gpu=g.index>
                                    <td>{format!("GPU {} · {}", g.index, g.model)}<br /><code class="muted">{g.uuid.clone()}</code></td>
                                    <td>{g.node.clone()}</td>
                                    <td>{g.jobs.len()}</td>
                                    <td>
                                        <select aria-label=label on:change=move |ev| {
                                            set.dispatch(SetGpuState { uuid: uuid.clone(), state: event_target_value(&ev) });
                                        }>
                                            {GpuState::SETTABLE.into_iter().map(|s| view! {
                                                <option value=s.as_str() selected=current == s>{s.as_str()}</option>
                                            }).collect_view()}
                                        </select>
                                        {(current == GpuState::Missing).then(|| view! {
                                            <span class="muted">" missing: its node does not see it"</span>
                                        })}
                                        {(current == GpuState::Lost).then(|| view! {
                                            <span class="muted">" lost: its node stopped heartbeating"</span>
                                        })}
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            })}
        </section>
    }
}

/// The nodes sharing this database: state, heartbeat age, version, cards and running jobs, with
/// drain / undrain and (for a lost node) forget.
#[component]
fn Nodes(
    set: ServerAction<SetNodeState>,
    forget: ServerAction<ForgetNode>,
    nodes: Fetched<Vec<NodeView>>,
) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Nodes"</h2>
            <p class="muted">"A drained node runs its jobs out and takes no new ones. A lost node has stopped heartbeating: its jobs keep their cards and are not started elsewhere; forget it only if it is not coming back (its jobs then end failed, node_lost)."</p>
            {move || action_error(set.value().get())}
            {move || action_error(forget.value().get())}
            {loaded(nodes, move |list| table_or_note("node-states", ["Node", "State", "Heartbeat", "Version", "Cards", "Running", ""], list, move |n| {
                let name = n.name.clone();
                let action = match n.state {
                    NodeState::Up => {
                        let name = name.clone();
                        view! { <button type="button" on:click=move |_| { set.dispatch(SetNodeState { name: name.clone(), state: "drained".into() }); }>"Drain"</button> }.into_any()
                    }
                    NodeState::Drained => {
                        let name = name.clone();
                        view! { <button type="button" on:click=move |_| { set.dispatch(SetNodeState { name: name.clone(), state: "up".into() }); }>"Undrain"</button> }.into_any()
                    }
                    NodeState::Lost => {
                        let name = name.clone();
                        view! { <button type="button" class="danger" on:click=move |_| { forget.dispatch(ForgetNode { name: name.clone() }); }>"Forget"</button> }.into_any()
                    }
                };
                view! {
                    <tr data-node=name.clone()>
                        <td>{n.name.clone()}<br /><code class="muted">{n.advertise_url.clone()}</code></td>
                        <td class=format!("node-{}", n.state)>{n.state.as_str()}</td>
                        <td>{format!("{} s ago", n.heartbeat_age_s)}</td>
                        <td>{n.version.clone()}</td>
                        <td>{n.cards}</td>
                        <td>{n.running_jobs}</td>
                        <td>{action}</td>
                    </tr>
                }
            }, "No node has registered yet."))}
        </section>
    }
}

#[component]
fn Users(
    me: UserView,
    create: ServerAction<CreateUser>,
    update: ServerAction<UpdateUser>,
    place: ServerAction<crate::api::PlaceUser>,
    users: Fetched<Vec<UserView>>,
) -> impl IntoView {
    let created = move || {
        create.value().get().and_then(|r| r.ok()).map(
            |u| view! { <p role="status">{format!("Created {} ({}).", u.username, u.role)}</p> },
        )
    };
    view! {
        <section class="card">
            <h2>"Users"</h2>
            {move || action_error(update.value().get())}
            {move || action_error(place.value().get())}
            {loaded(users, move |list| view! { <UserTable list me=me.clone() update place /> })}
            <h3>"Add a user"</h3>
            <ActionForm action=create attr:id="new-user" attr:class="row">
                <div class="field">
                    <label for="new-username">"Name"</label>
                    <input id="new-username" name="username" type="text" required autocomplete="off" />
                </div>
                <div class="field">
                    <label for="new-role">"Role"</label>
                    <select id="new-role" name="role">
                        {Role::ALL.into_iter().map(|r| view! { <option value=r.as_str()>{r.as_str()}</option> }).collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for="new-password">"Initial password"</label>
                    <input id="new-password" name="password" type="password" required minlength="8" autocomplete="new-password" />
                </div>
                <div class="field"><button type="submit">"Create"</button></div>
            </ActionForm>
            {move || action_error(create.value().get())}
            {created}
        </section>
    }
}

#[component]
fn UserTable(
    list: Vec<UserView>,
    me: UserView,
    update: ServerAction<UpdateUser>,
    place: ServerAction<crate::api::PlaceUser>,
) -> impl IntoView {
    view! {
        <table id="users">
            {column_heads(["Name", "Role", "Status", "", "Team", "Weight", "Budget", ""])}
            <tbody>
                {list.into_iter().map(|u| {
                    let id = u.id;
                    let is_me = u.id == me.id;
                    let label = format!("Role of {}", u.username);
                    let role = u.role;
                    let disabled = u.disabled;
                    let share = u.clone();
                    view! {
                        <tr data-user=u.username.clone()>
                            <td>{u.username.clone()}{is_me.then_some(" (you)")}</td>
                            <td>
                                <select aria-label=label disabled=is_me on:change=move |ev| {
                                    let role = event_target_value(&ev).parse::<Role>().ok();
                                    update.dispatch(UpdateUser { id, role, disabled: None });
                                }>
                                    {Role::ALL.into_iter().map(|r| view! {
                                        <option value=r.as_str() selected=r == role>{r.as_str()}</option>
                                    }).collect_view()}
                                </select>
                            </td>
                            <td>{if disabled { "disabled" } else { "active" }}</td>
                            <td>
                                {(!is_me).then(|| view! {
                                    <button type="button" class="small" class:danger=!disabled on:click=move |_| {
                                        update.dispatch(UpdateUser { id, role: None, disabled: Some(!disabled) });
                                    }>{if disabled { "Enable" } else { "Disable" }}</button>
                                })}
                            </td>
                            <super::teams::ShareCells u=share place />
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn Policy(save: ServerAction<SaveLaunchPolicy>, policy: Fetched<LaunchPolicy>) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Launch policy"</h2>
            {loaded(policy, move |p| view! { <PolicyForm p save /> })}
        </section>
    }
}

/// `path` or `path:ro`, one per line.
fn parse_volumes(text: &str) -> Vec<VolumeRule> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| match l.strip_suffix(":ro") {
            Some(path) => VolumeRule {
                path: path.trim().to_owned(),
                read_only: true,
            },
            None => VolumeRule {
                path: l.to_owned(),
                read_only: false,
            },
        })
        .collect()
}

/// The volume allowlist as the textarea shows it: the inverse of [`parse_volumes`].
fn volumes_text(rules: &[VolumeRule]) -> String {
    rules
        .iter()
        .map(|v| {
            if v.read_only {
                format!("{}:ro", v.path)
            } else {
                v.path.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Image patterns, one per line, trimmed; blank lines skipped.
fn patterns(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A policy figure: a whole number, not negative; the error names the field and quotes the text.
fn whole_number(field: &str, text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| format!("{field}: `{text}` is not a whole number"))
}

/// CPU cores: a number of cores, fractions allowed, not negative; the error names the field.
fn cores(field: &str, text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(c) if c.is_finite() && c >= 0.0 => Ok(c),
        _ => Err(format!(
            "{field}: `{text}` is not a number of cores (e.g. 4 or 0.5)"
        )),
    }
}

/// A size in GiB: fractions allowed, not negative; the error names the field.
fn gib(field: &str, text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(g) if g.is_finite() && g >= 0.0 => Ok(g),
        _ => Err(format!(
            "{field}: `{text}` is not a size in GiB (e.g. 200 or 0.5)"
        )),
    }
}

/// Hours or minutes: fractions allowed, not negative; the error names the field (the server
/// checks the range).
fn amount(field: &str, text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{field}: `{text}` is not a number (e.g. 30 or 0.5)"
        )),
    }
}

#[component]
fn PolicyForm(p: LaunchPolicy, save: ServerAction<SaveLaunchPolicy>) -> impl IntoView {
    // Fields this form does not show yet keep what was loaded.
    let rest = p.clone();
    let images = RwSignal::new(p.image_allowlist.join("\n"));
    let volumes = RwSignal::new(volumes_text(&p.volume_allowlist));
    let default_timeout = RwSignal::new(p.default_timeout_s.to_string());
    let max_timeout = RwSignal::new(p.max_timeout_s.to_string());
    let memory = RwSignal::new(p.memory_limit_mib.to_string());
    let pids = RwSignal::new(p.pids_limit.to_string());
    let root_images = RwSignal::new(p.root_images.join("\n"));
    let max_queued = RwSignal::new(p.max_queued_per_user.to_string());
    let max_running = RwSignal::new(p.max_running_per_user.to_string());
    let max_cpu_jobs = RwSignal::new(p.max_cpu_jobs_per_node.to_string());
    let min_vram = RwSignal::new(p.min_vram_mib.to_string());
    let cpus = RwSignal::new(p.cpus_per_job.to_string());
    let shm = RwSignal::new(p.shm_mib.to_string());
    let read_only = RwSignal::new(p.read_only_rootfs);
    let tmp = RwSignal::new(p.tmp_mib.to_string());
    let log_days = RwSignal::new(p.log_retention_days.to_string());
    let log_total = RwSignal::new(p.log_total_mib.to_string());
    let log_user = RwSignal::new(p.log_user_mib.to_string());
    let network = RwSignal::new(p.network);
    let enforcement = RwSignal::new(p.vram_enforcement);
    let pull = RwSignal::new(p.pull);
    let hints = RwSignal::new(p.framework_memory_hints);
    let webhook_allow = RwSignal::new(p.webhook_allowlist.join("\n"));
    let image_days = RwSignal::new(p.image_keep_days.to_string());
    let image_gib = RwSignal::new(p.image_disk_max_gib.to_string());
    let fair_share = RwSignal::new(p.fair_share);
    let half_life = RwSignal::new(p.fair_share_half_life_h.to_string());
    let idle_action = RwSignal::new(p.idle_action);
    let idle_after = RwSignal::new(p.idle_after_min.to_string());
    let idle_sm = RwSignal::new(p.idle_sm_percent.to_string());
    let idle_grace = RwSignal::new(p.idle_grace_min.to_string());
    let idle_exempt = RwSignal::new(p.idle_exempt_workloads.join("\n"));
    let max_sessions = RwSignal::new(p.max_sessions_per_user.to_string());
    let session_idle = RwSignal::new(p.session_idle_min.to_string());
    let admins_open = RwSignal::new(p.admins_open_sessions);
    let local_error = RwSignal::new(None::<String>);
    let number = |field: &str, s: RwSignal<String>| whole_number(field, &s.get_untracked());
    let small = |field: &str, s: RwSignal<String>| {
        let n = whole_number(field, &s.get_untracked())?;
        u32::try_from(n).map_err(|_| format!("{field}: {n} is too large"))
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        // The form shows every field today; `..rest` keeps a field added later (and not shown
        // yet) as it was loaded, rather than resetting it to a default.
        #[allow(clippy::needless_update)]
        let policy = (|| -> Result<LaunchPolicy, String> {
            Ok(LaunchPolicy {
                image_allowlist: patterns(&images.get_untracked()),
                pull: pull.get_untracked(),
                volume_allowlist: parse_volumes(&volumes.get_untracked()),
                default_timeout_s: number("default timeout", default_timeout)?,
                max_timeout_s: number("maximum timeout", max_timeout)?,
                memory_limit_mib: number("memory limit", memory)?,
                pids_limit: number("process limit", pids)? as i64,
                root_images: patterns(&root_images.get_untracked()),
                max_queued_per_user: small("queued jobs per user", max_queued)?,
                max_running_per_user: small("running jobs per user", max_running)?,
                max_cpu_jobs_per_node: small("jobs without GPUs per node", max_cpu_jobs)?,
                min_vram_mib: number("least VRAM per card", min_vram)?,
                cpus_per_job: cores("CPU cores per job", &cpus.get_untracked())?,
                shm_mib: number("/dev/shm size", shm)?,
                read_only_rootfs: read_only.get_untracked(),
                tmp_mib: number("/tmp size", tmp)?,
                log_retention_days: small("log retention", log_days)?,
                log_total_mib: number("log folder cap", log_total)?,
                log_user_mib: number("logs per user", log_user)?,
                network: network.get_untracked(),
                vram_enforcement: enforcement.get_untracked(),
                framework_memory_hints: hints.get_untracked(),
                webhook_allowlist: patterns(&webhook_allow.get_untracked()),
                image_keep_days: small("keep unused images", image_days)?,
                image_disk_max_gib: gib("images' disk cap", &image_gib.get_untracked())?,
                fair_share: fair_share.get_untracked(),
                fair_share_half_life_h: amount("fair-share half-life", &half_life.get_untracked())?,
                idle_action: idle_action.get_untracked(),
                idle_after_min: amount("idle after", &idle_after.get_untracked())?,
                idle_sm_percent: small("idle below SM %", idle_sm)?,
                idle_grace_min: amount("idle grace", &idle_grace.get_untracked())?,
                idle_exempt_workloads: patterns(&idle_exempt.get_untracked()),
                max_sessions_per_user: small("sessions per user", max_sessions)?,
                session_idle_min: amount("session idle", &session_idle.get_untracked())?,
                admins_open_sessions: admins_open.get_untracked(),
                ..rest.clone()
            })
        })();
        match policy {
            Ok(policy) => {
                local_error.set(None);
                save.dispatch(SaveLaunchPolicy { policy });
            }
            Err(e) => local_error.set(Some(e)),
        }
    };
    let saved = move || {
        save.value()
            .get()
            .and_then(|r| r.ok())
            .map(|_| view! { <p role="status">"Saved. New jobs are checked against it from now on."</p> })
    };
    view! {
        <form id="policy" on:submit=submit>
            <div class="row">
                {text_area("policy-images", "Image allowlist (one pattern per line; * matches anything)", "4", images)}
                {text_area("policy-volumes", "Volume allowlist (one host folder per line; add :ro for read-only)", "4", volumes)}
            </div>
            <div class="row">
                {number_input("policy-default-timeout", "Default timeout (s)", "1", default_timeout)}
                {number_input("policy-max-timeout", "Maximum timeout (s)", "1", max_timeout)}
                {number_input("policy-memory", "Container memory limit (MiB)", "1", memory)}
                {number_input("policy-pids", "Container process limit", "1", pids)}
            </div>
            <p class="muted">"Bounds per user and per job (0: no limit)"</p>
            <div class="row">
                {number_input("policy-max-queued", "Queued jobs per user", "0", max_queued)}
                {number_input("policy-max-running", "Running jobs per user", "0", max_running)}
                {number_input("policy-max-cpu-jobs", "Jobs without GPUs per node", "0", max_cpu_jobs)}
                {number_input("policy-min-vram", "Least VRAM per card (MiB)", "0", min_vram)}
            </div>
            <div class="row">
                <div class="field">
                    <label for="policy-cpus">"CPU cores per job"</label>
                    <input id="policy-cpus" type="number" min="0" step="0.1" prop:value=move || cpus.get() on:input=move |ev| cpus.set(event_target_value(&ev)) />
                </div>
                {number_input("policy-shm", "/dev/shm per job (MiB)", "0", shm)}
                {number_input("policy-log-days", "Keep logs (days)", "0", log_days)}
                {number_input("policy-log-total", "Log folder cap (MiB; 0: 10 % of its disk)", "0", log_total)}
                {number_input("policy-log-user", "Logs per user (MiB; 0: a quarter of the cap)", "0", log_user)}
            </div>
            <div class="row">
                {check_box("policy-read-only", "Read-only root filesystem (jobs write to /tmp, /dev/shm and their volumes, never to Docker's disk)", read_only)}
                {number_input("policy-tmp", "/tmp per job (MiB, counts as memory)", "1", tmp)}
            </div>
            <div class="row">
                {text_area("policy-root-images", "Images that may run as root (one pattern per line)", "2", root_images)}
                {text_area("policy-webhook-allowlist", "Webhooks may also reach (host, host:port or CIDR per line; loopback, private and gpuq's own nodes are refused otherwise)", "2", webhook_allow)}
                <div class="field">
                    <label for="policy-network">"Job network"</label>
                    <select id="policy-network" on:change=move |ev| network.set(if event_target_value(&ev) == "none" { JobNetwork::None } else { JobNetwork::Isolated })>
                        <option value="isolated" selected=move || network.get() == JobNetwork::Isolated>"isolated (reach out, not each other)"</option>
                        <option value="none" selected=move || network.get() == JobNetwork::None>"none"</option>
                    </select>
                </div>
            </div>
            <div class="row">
                <div class="field">
                    <label for="policy-vram-enforcement">"A job above its VRAM commitment"</label>
                    <select id="policy-vram-enforcement" on:change=move |ev| { if let Ok(e) = event_target_value(&ev).parse::<VramEnforcement>() { enforcement.set(e) } }>
                        <option value="stop" selected=move || enforcement.get() == VramEnforcement::Stop>"stop: warned; stopped when its card runs short"</option>
                        <option value="warn" selected=move || enforcement.get() == VramEnforcement::Warn>"warn: an event and a badge, never stopped"</option>
                        <option value="off" selected=move || enforcement.get() == VramEnforcement::Off>"off: only recorded"</option>
                    </select>
                </div>
                <div class="field">
                    <label for="policy-pull">"Pull images"</label>
                    <select id="policy-pull" on:change=move |ev| { if let Ok(p) = event_target_value(&ev).parse::<PullPolicy>() { pull.set(p) } }>
                        <option value="if_not_present" selected=move || pull.get() == PullPolicy::IfNotPresent>"if not present on the node"</option>
                        <option value="always" selected=move || pull.get() == PullPolicy::Always>"always (resolve the tag for every job)"</option>
                        <option value="never" selected=move || pull.get() == PullPolicy::Never>"never (local images only)"</option>
                    </select>
                </div>
                {check_box("policy-framework-hints", "Framework memory hints (JAX/XLA, TensorFlow stay within the commitment)", hints)}
            </div>
            <div class="row">
                {number_input("policy-image-days", "Keep images gpuq pulled, unused (days; 0: kept)", "0", image_days)}
                <div class="field">
                    <label for="policy-image-gib">"Images gpuq pulled, per node (GiB; 0: no cap)"</label>
                    <input id="policy-image-gib" type="number" min="0" step="any" prop:value=move || image_gib.get() on:input=move |ev| image_gib.set(event_target_value(&ev)) />
                </div>
            </div>
            <FairnessFields fair_share half_life idle_action idle_after idle_sm idle_grace idle_exempt max_sessions session_idle admins_open />
            <button type="submit">"Save policy"</button>
            {move || local_error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            {move || action_error(save.value().get())}
            {saved}
        </form>
    }
}

/// The policy form's fair-share, idle-card and session inputs.
#[component]
#[allow(clippy::too_many_arguments)]
fn FairnessFields(
    fair_share: RwSignal<bool>,
    half_life: RwSignal<String>,
    idle_action: RwSignal<IdleAction>,
    idle_after: RwSignal<String>,
    idle_sm: RwSignal<String>,
    idle_grace: RwSignal<String>,
    idle_exempt: RwSignal<String>,
    max_sessions: RwSignal<String>,
    session_idle: RwSignal<String>,
    admins_open: RwSignal<bool>,
) -> impl IntoView {
    let decimal = |id: &'static str, label: &'static str, value: RwSignal<String>| {
        view! {
            <div class="field">
                <label for=id>{label}</label>
                <input id=id type="number" min="0" step="any" prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev)) />
            </div>
        }
    };
    view! {
        <p class="muted">"Fair share, idle cards and interactive sessions"</p>
        <div class="row">
            {check_box("policy-fair-share", "Fair share (order each priority by recent use against teams' and users' weights)", fair_share)}
            {decimal("policy-half-life", "Fair-share half-life (hours)", half_life)}
        </div>
        <div class="row">
            <div class="field">
                <label for="policy-idle-action">"A job whose cards stay idle"</label>
                <select id="policy-idle-action" on:change=move |ev| { if let Ok(a) = event_target_value(&ev).parse::<IdleAction>() { idle_action.set(a) } }>
                    <option value="off" selected=move || idle_action.get() == IdleAction::Off>"off: not watched"</option>
                    <option value="warn" selected=move || idle_action.get() == IdleAction::Warn>"warn: flagged, never stopped"</option>
                    <option value="stop" selected=move || idle_action.get() == IdleAction::Stop>"stop: flagged, stopped after the grace"</option>
                </select>
            </div>
            {decimal("policy-idle-after", "Idle after (minutes)", idle_after)}
            {number_input("policy-idle-sm", "Idle below SM utilisation (%)", "0", idle_sm)}
            {decimal("policy-idle-grace", "Grace before the stop (minutes)", idle_grace)}
            {text_area("policy-idle-exempt", "Workload types never judged idle (one per line)", "2", idle_exempt)}
        </div>
        <div class="row">
            {number_input("policy-max-sessions", "Interactive sessions per user (0: no limit)", "0", max_sessions)}
            {decimal("policy-session-idle", "Session idle (minutes)", session_idle)}
            {check_box("policy-admins-open-sessions", "Admins may open any member's session", admins_open)}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &str, read_only: bool) -> VolumeRule {
        VolumeRule {
            path: path.into(),
            read_only,
        }
    }

    #[test]
    fn cpu_cores_may_be_fractions_but_not_negative_or_words() {
        assert_eq!(cores("cpus", " 4 "), Ok(4.0));
        assert_eq!(cores("cpus", "0.5"), Ok(0.5));
        assert_eq!(cores("cpus", "0"), Ok(0.0));
        for bad in ["-1", "four", "", "NaN", "inf"] {
            let e = cores("CPU cores per job", bad).unwrap_err();
            assert!(e.starts_with("CPU cores per job: `"), "{e}");
        }
    }

    #[test]
    fn hours_and_minutes_may_be_fractions_but_not_negative_or_words() {
        assert_eq!(amount("idle after", " 0.1 "), Ok(0.1));
        assert_eq!(amount("idle grace", "0"), Ok(0.0));
        for bad in ["-1", "soon", "", "NaN", "inf"] {
            let e = amount("session idle", bad).unwrap_err();
            assert!(e.starts_with("session idle: `"), "{e}");
        }
    }

    #[test]
    fn image_disk_caps_are_gib_with_fractions_but_not_negative_or_words() {
        assert_eq!(gib("cap", " 200 "), Ok(200.0));
        assert_eq!(gib("cap", "0.5"), Ok(0.5));
        for bad in ["-1", "lots", "", "NaN", "inf"] {
            let e = gib("images' disk cap", bad).unwrap_err();
            assert!(e.starts_with("images' disk cap: `"), "{e}");
        }
    }

    #[test]
    fn volumes_are_paths_with_an_optional_ro_suffix() {
        assert_eq!(
            parse_volumes("/data:ro\n/scratch\n  /models :ro  \n\n   \n/home/ü/datä"),
            vec![
                rule("/data", true),
                rule("/scratch", false),
                rule("/models", true),
                rule("/home/ü/datä", false),
            ]
        );
        assert!(parse_volumes("").is_empty());
        assert!(parse_volumes(" \n\t\n").is_empty());
        assert_eq!(
            parse_volumes("/a\r\n/b:ro\r\n"),
            vec![rule("/a", false), rule("/b", true)]
        );
    }

    #[test]
    fn only_a_trailing_ro_makes_a_volume_read_only() {
        assert_eq!(parse_volumes("/data:rw"), vec![rule("/data:rw", false)]);
        assert_eq!(parse_volumes("/ro/data"), vec![rule("/ro/data", false)]);
        assert_eq!(parse_volumes("/data:RO"), vec![rule("/data:RO", false)]);
        assert_eq!(parse_volumes("/data:ro:ro"), vec![rule("/data:ro", true)]);
        // A bare `:ro` is an empty path: sent as is, for the server to refuse.
        assert_eq!(parse_volumes(":ro"), vec![rule("", true)]);
    }

    #[test]
    fn the_volume_box_shows_what_it_saves() {
        let rules = vec![
            rule("/data", true),
            rule("/scratch", false),
            rule("/ü x", true),
        ];
        let text = volumes_text(&rules);
        assert_eq!(text, "/data:ro\n/scratch\n/ü x:ro");
        assert_eq!(parse_volumes(&text), rules);
        assert_eq!(volumes_text(&[]), "");
        assert!(parse_volumes(&volumes_text(&[])).is_empty());
    }

    #[test]
    fn image_patterns_are_one_per_line() {
        assert_eq!(
            patterns("  pytorch/pytorch:*\n\nnvcr.io/nvidia/*  \r\n*"),
            vec!["pytorch/pytorch:*", "nvcr.io/nvidia/*", "*"]
        );
        assert!(patterns("").is_empty());
        assert!(patterns("\n  \n").is_empty());
    }

    #[test]
    fn policy_figures_are_whole_numbers() {
        assert_eq!(whole_number("default timeout", "3600"), Ok(3600));
        assert_eq!(whole_number("default timeout", " 60 "), Ok(60));
        assert_eq!(whole_number("memory limit", "0"), Ok(0));
        assert_eq!(
            whole_number("memory limit", "18446744073709551615"),
            Ok(u64::MAX)
        );
    }

    #[test]
    fn a_bad_policy_figure_names_its_field_and_quotes_the_text() {
        assert_eq!(
            whole_number("maximum timeout", "1.5"),
            Err("maximum timeout: `1.5` is not a whole number".into())
        );
        assert_eq!(
            whole_number("process limit", "-1"),
            Err("process limit: `-1` is not a whole number".into())
        );
        // The text is quoted as typed, spaces included, so an empty box is recognisable.
        assert_eq!(
            whole_number("memory limit", "  "),
            Err("memory limit: `  ` is not a whole number".into())
        );
        for bad in ["", "1e6", "18446744073709551616", "４"] {
            assert!(whole_number("memory limit", bad).is_err(), "{bad:?}");
        }
    }
}
