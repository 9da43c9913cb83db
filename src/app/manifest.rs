//! `/manifest`: the grid of workload types × GPU models present (VRAM MiB per card). Admins edit
//! it: add, change, rename, delete, each validated by the same rules as the REST API. Everyone
//! sees the change history and whether the last change has been applied by an admission pass.
//! Below the grid, the learning manifest: what finished jobs were observed to use per type and
//! model beside the declared figure, and a suggested figure an admin applies with one click (an
//! ordinary, audited edit).

use super::alert::loaded;
use super::gate::SignedIn;
use super::live::use_live;
use super::widgets::column_heads;
use crate::api::{
    get_manifest_state, get_manifest_suggestions, ApplyManifestSuggestion, DeleteWorkload,
    RenameWorkload, SaveWorkload,
};
use crate::model::{
    AppError, ManifestState, ManifestSuggestions, Observed, Role, UserView, WorkloadView,
};
use leptos::prelude::*;
use leptos_meta::Title;
use std::collections::{BTreeMap, HashMap, HashSet};

/// `/manifest`
///
/// The edits, the manifest and the observed peaks live here, once per page, not inside
/// [`SignedIn`]'s page: server-side rendering may run that closure more than once (see the job
/// page).
#[component]
pub fn ManifestPage() -> impl IntoView {
    let live = use_live();
    let edits = Edits::new();
    // Until a pass has seen the newest edit, look again every second.
    let tick = RwSignal::new(0u64);
    let data = Resource::new(
        move || {
            (
                live.get(),
                tick.get(),
                edits.save.version().get(),
                edits.rename.version().get(),
                edits.delete.version().get(),
                edits.apply.version().get(),
            )
        },
        |_| get_manifest_state(),
    );
    let learned = Resource::new(
        move || {
            (
                live.get(),
                edits.save.version().get(),
                edits.apply.version().get(),
            )
        },
        |_| get_manifest_suggestions(),
    );
    poll_until_applied(data, tick);
    view! {
        <Title text="Manifest · gpuq" />
        <SignedIn page=move |me| view! { <Manifest me edits data learned /> } />
    }
}

/// The three edit actions the grid shares (any of them finishing refetches the manifest), the
/// error of the latest one, and the admin's drafts. The grid is rebuilt on every refetch (live
/// events, passes, other admins' edits); drafts live here, keyed by workload type, so typing is
/// never lost to a refetch. A row's draft follows the server until its first keystroke, and again
/// once it has been saved.
#[derive(Clone, Copy)]
struct Edits {
    save: ServerAction<SaveWorkload>,
    rename: ServerAction<RenameWorkload>,
    delete: ServerAction<DeleteWorkload>,
    apply: ServerAction<ApplyManifestSuggestion>,
    error: RwSignal<Option<AppError>>,
    // Owned by the page (see `page`), not by the grid that the next refetch disposes: a draft
    // that follows the server is set while the new grid is built, and the old grid's inputs,
    // still in place until then, read it.
    drafts: StoredValue<HashMap<(String, String), RwSignal<String>>>,
    dirty: RwSignal<HashSet<String>>,
    /// The page's owner, that the drafts are created under.
    page: StoredValue<Option<WeakOwner>>,
}

/// Draft keys for a row's name and description (model names never start with `#`).
const NAME: &str = "#name";
const DESCRIPTION: &str = "#description";
const CONFIRM: &str = "#confirm";
/// Draft key of a row's refusal (kept with the drafts, so a refetch does not forget it).
const ERROR: &str = "#error";
/// The row key of the "add a type" row.
const NEW_ROW: &str = "#new";

impl Edits {
    fn new() -> Self {
        let edits = Edits {
            save: ServerAction::new(),
            rename: ServerAction::new(),
            delete: ServerAction::new(),
            apply: ServerAction::new(),
            error: RwSignal::new(None),
            drafts: StoredValue::new(HashMap::new()),
            dirty: RwSignal::new(HashSet::new()),
            page: StoredValue::new(Owner::current().map(|o| o.downgrade())),
        };
        // The latest action's outcome decides the error line; a success also ends its row's draft.
        Effect::new(move |_| {
            if let Some(r) = edits.save.value().get() {
                match r {
                    Ok(w) => {
                        edits.error.set(None);
                        edits.clean(&w.name);
                        if edits.draft(NEW_ROW, NAME, "").get_untracked().trim() == w.name {
                            edits.clean(NEW_ROW);
                            edits.reset(NEW_ROW);
                        }
                    }
                    Err(e) => edits.error.set(Some(e)),
                }
            }
        });
        Effect::new(move |_| {
            if let Some(r) = edits.rename.value().get() {
                edits.error.set(r.err());
            }
        });
        Effect::new(move |_| {
            if let Some(r) = edits.delete.value().get() {
                edits.error.set(r.err());
            }
        });
        Effect::new(move |_| {
            if let Some(r) = edits.apply.value().get() {
                match r {
                    Ok(w) => {
                        edits.error.set(None);
                        edits.clean(&w.name);
                    }
                    Err(e) => edits.error.set(Some(e)),
                }
            }
        });
        edits
    }

    /// The draft of one field of one row; `server` is the stored value, which the draft follows
    /// while the row is not being edited.
    fn draft(&self, row: &str, field: &str, server: &str) -> RwSignal<String> {
        let key = (row.to_owned(), field.to_owned());
        let dirty = self.dirty.with_untracked(|d| d.contains(row));
        match self.drafts.with_value(|m| m.get(&key).copied()) {
            Some(sig) => {
                if !dirty && sig.get_untracked() != server {
                    sig.set(server.to_owned());
                }
                sig
            }
            None => {
                let new = || RwSignal::new(server.to_owned());
                let sig = match self
                    .page
                    .with_value(|p| p.as_ref().and_then(|p| p.upgrade()))
                {
                    Some(page) => page.with(new),
                    None => new(),
                };
                self.drafts.update_value(|m| {
                    m.insert(key, sig);
                });
                sig
            }
        }
    }

    /// Saves a row as drafted, its cells checked here first: a cell that is not a number is the
    /// row's `error`, and nothing is sent.
    fn save_row(
        &self,
        name: String,
        description: RwSignal<String>,
        cells: &[(String, RwSignal<String>)],
        error: RwSignal<String>,
    ) {
        match needs(cells) {
            Ok(vram_mib) => {
                error.set(String::new());
                self.save.dispatch(SaveWorkload {
                    name,
                    description: description.get_untracked(),
                    vram_mib,
                });
            }
            Err(e) => error.set(e),
        }
    }

    fn touch(&self, row: &str) {
        if !self.dirty.with_untracked(|d| d.contains(row)) {
            self.dirty.update(|d| {
                d.insert(row.to_owned());
            });
        }
    }

    fn clean(&self, row: &str) {
        self.dirty.update(|d| {
            d.remove(row);
        });
    }

    fn reset(&self, row: &str) {
        self.drafts.with_value(|m| {
            for ((r, _), sig) in m.iter() {
                if r == row {
                    sig.set(String::new());
                }
            }
        });
    }
}

#[component]
fn Manifest(
    me: UserView,
    edits: Edits,
    data: Resource<Result<ManifestState, AppError>>,
    learned: Resource<Result<ManifestSuggestions, AppError>>,
) -> impl IntoView {
    let admin = me.role.at_least(Role::Admin);
    view! {
        <section class="card">
            <h1>"Manifest"</h1>
            <p class="muted">
                "VRAM each workload type needs per card, by GPU model (MiB). An empty cell: that type does not run on that model. "
                "A change applies at the next admission pass (every 2 s, or at once when woken)."
            </p>
            {loaded(data, move |state| view! { <Grid state admin edits /> })}
        </section>
        <section class="card" id="manifest-learned">
            <h2>"Observed peaks"</h2>
            <p class="muted">
                "What finished jobs really used per card (the larger of the sampler's peak and NVML accounting's), beside the declared figure. "
                "Suggested: p95 plus 10 %, rounded up to 256 MiB, from at least 3 records."
            </p>
            {loaded(learned, move |s| view! { <Learned s admin edits /> })}
        </section>
    }
}

/// A suggestion as shown: the figure, or why there is none.
/// The observed figures of a suggestions row (records, p50, p95, max) and the suggestion.
fn observed_cells(o: &Observed) -> impl IntoView {
    view! {
        <td class="n">{o.stats.n}</td>
        <td>{o.stats.p50_mib}</td>
        <td>{o.stats.p95_mib}</td>
        <td>{o.stats.max_mib}</td>
        <td class="suggested">{suggestion_text(o.suggested_mib, o.note.as_deref())}</td>
    }
}

fn suggestion_text(suggested: Option<i64>, note: Option<&str>) -> String {
    match (suggested, note) {
        (Some(mib), _) => format!("{mib} MiB"),
        (None, Some(why)) => why.to_owned(),
        (None, None) => "-".to_owned(),
    }
}

/// The learning manifest's tables: per workload type × model (with the apply button for admins
/// where the suggestion differs from the declared figure), then raw-declared jobs per image.
#[component]
fn Learned(s: ManifestSuggestions, admin: bool, edits: Edits) -> impl IntoView {
    if s.workloads.is_empty() && s.images.is_empty() {
        return view! { <p class="muted">"No finished job has an observed peak yet."</p> }
            .into_any();
    }
    let rows = s
        .workloads
        .into_iter()
        .map(|w| {
            let button = w
                .observed
                .suggested_mib
                .filter(|mib| admin && w.declared_mib != Some(*mib))
                .map(|mib| {
                    let (workload, gpu_model) = (w.workload.clone(), w.gpu_model.clone());
                    let click = move |_| {
                        edits.apply.dispatch(ApplyManifestSuggestion {
                            workload: workload.clone(),
                            gpu_model: gpu_model.clone(),
                        });
                    };
                    view! {
                        <button type="button" class="small apply-suggestion" on:click=click>
                            {format!("Use suggestion ({mib} MiB)")}
                        </button>
                    }
                });
            let declared = w
                .declared_mib
                .map_or_else(|| "-".to_owned(), |d| d.to_string());
            view! {
                <tr data-workload=w.workload.clone() data-model=w.gpu_model.clone()>
                    <th scope="row">{w.workload.clone()}</th>
                    <td>{w.gpu_model.clone()}</td>
                    <td class="declared">{declared}</td>
                    {observed_cells(&w.observed)}
                    {admin.then(|| view! { <td class="actions">{button}</td> })}
                </tr>
            }
        })
        .collect_view();
    let images = (!s.images.is_empty()).then(|| {
        let rows = s
            .images
            .into_iter()
            .map(|i| {
                view! {
                    <tr data-image=i.image.clone() data-model=i.gpu_model.clone()>
                        <th scope="row">{i.image.clone()}</th>
                        <td>{i.gpu_model.clone()}</td>
                        <td>{i.declared_max_mib}</td>
                        {observed_cells(&i.observed)}
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h3>"Jobs without a workload type, per image"</h3>
            <p class="muted">"A hint to create a workload type for the image."</p>
            <div class="scroll">
                <table id="manifest-learned-images" class="grid">
                    {column_heads(["Image", "GPU model", "Declared (largest)", "n", "p50", "p95", "max", "Suggested"])}
                    <tbody>{rows}</tbody>
                </table>
            </div>
        }
    });
    view! {
        <div class="scroll">
            <table id="manifest-suggestions" class="grid">
                {column_heads(
                    ["Workload type", "GPU model", "Declared", "n", "p50", "p95", "max", "Suggested"]
                        .into_iter()
                        .chain(admin.then_some("Apply")),
                )}
                <tbody>{rows}</tbody>
            </table>
        </div>
        {images}
    }
    .into_any()
}

#[cfg(feature = "hydrate")]
fn poll_until_applied(data: Resource<Result<ManifestState, AppError>>, tick: RwSignal<u64>) {
    Effect::new(move |_| {
        if let Some(Ok(state)) = data.get() {
            if !state.applied() {
                set_timeout(
                    move || tick.update(|n| *n += 1),
                    std::time::Duration::from_millis(700),
                );
            }
        }
    });
}

#[cfg(not(feature = "hydrate"))]
fn poll_until_applied(_: Resource<Result<ManifestState, AppError>>, _: RwSignal<u64>) {}

#[component]
fn Grid(state: ManifestState, admin: bool, edits: Edits) -> impl IntoView {
    let models = columns(&state.manifest.models_present, &state.manifest.workloads);
    let present = state.manifest.models_present.clone();
    let applied = state.applied();
    let last = state.history.first().cloned();
    let pass = state
        .last_pass_at
        .map(|t| t.format("%H:%M:%S%.3f").to_string());
    let status = match (last, applied) {
        (None, _) => "No edits yet.".to_owned(),
        (Some(c), true) => format!(
            "Last change: {} {} by {} at {}; applied by the admission pass at {} UTC.",
            c.subject,
            c.summary,
            c.actor,
            c.at.format("%H:%M:%S%.3f"),
            pass.unwrap_or_default()
        ),
        (Some(c), false) => format!(
            "Last change: {} {} by {} at {}; waiting for the next admission pass…",
            c.subject,
            c.summary,
            c.actor,
            c.at.format("%H:%M:%S%.3f")
        ),
    };
    let error = move || {
        edits
            .error
            .get()
            .map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })
    };
    let headers = models
        .iter()
        .map(|m| {
            let note = (!present.contains(m)).then_some(" (no such card here)");
            view! { <th scope="col">{m.clone()}<span class="muted">{note}</span></th> }
        })
        .collect_view();
    let rows = state
        .manifest
        .workloads
        .iter()
        .cloned()
        .map(|w| {
            let models = models.clone();
            view! { <Row w models admin edits /> }
        })
        .collect_view();
    let add = admin.then(|| view! { <AddRow models=models.clone() edits /> });
    let history = state.history;
    view! {
        <p id="manifest-status" class=if applied { "applied" } else { "pending" } role="status" aria-live="polite">
            {status}
        </p>
        {error}
        <div class="scroll">
            <table id="manifest" class="grid">
                <thead>
                    <tr>
                        <th scope="col">"Workload type"</th>
                        {headers}
                        {admin.then(|| view! { <th scope="col">"Actions"</th> })}
                    </tr>
                </thead>
                <tbody>{rows}{add}</tbody>
            </table>
        </div>
        <h2>"History"</h2>
        <ol id="manifest-history" class="history">
            {history.into_iter().map(|h| view! {
                <li>
                    <time>{h.at.format("%Y-%m-%d %H:%M:%S").to_string()}</time>
                    {format!(" {} · {} {}", h.actor, h.subject, h.summary)}
                </li>
            }).collect_view()}
        </ol>
    }
}

/// The grid's model columns: models present first, then any model named only in the manifest
/// (no such card here now), in the order the workload types name them.
fn columns(present: &[String], workloads: &[WorkloadView]) -> Vec<String> {
    let mut models = present.to_vec();
    for w in workloads {
        for m in w.vram_mib.keys() {
            if !models.contains(m) {
                models.push(m.clone());
            }
        }
    }
    models
}

/// One cell as typed: empty (the type does not run on that model), or a whole number of MiB
/// (range checks are the server's); anything else is refused, naming the model.
fn cell(model: &str, text: &str) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<i64>()
        .map(Some)
        .map_err(|_| format!("{model}: `{text}` is not a whole number of MiB"))
}

/// Cell inputs → the map the server expects; the first unparsable cell names its model.
fn needs(cells: &[(String, RwSignal<String>)]) -> Result<BTreeMap<String, i64>, String> {
    row_needs(cells.iter().map(|(m, v)| (m.as_str(), v.get_untracked())))
}

/// A row's cells as typed, `(model, text)` → the map the server expects: empty cells are left
/// out; the first unparsable cell names its model.
fn row_needs<'a>(
    cells: impl IntoIterator<Item = (&'a str, String)>,
) -> Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for (model, text) in cells {
        if let Some(n) = cell(model, &text)? {
            out.insert(model.to_owned(), n);
        }
    }
    Ok(out)
}

/// A VRAM cell an admin types into: a whole number of MiB, kept in the row's draft `value`;
/// `touch` marks the row as being edited.
fn mib_cell(
    label: String,
    value: RwSignal<String>,
    touch: impl Fn() + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <td>
            <input type="number" min="1" step="1" inputmode="numeric" aria-label=label
                prop:value=move || value.get() on:input=move |ev| { touch(); value.set(event_target_value(&ev)); } />
        </td>
    }
}

#[component]
fn Row(w: WorkloadView, models: Vec<String>, admin: bool, edits: Edits) -> impl IntoView {
    let name = w.name.clone();
    let cells: Vec<(String, RwSignal<String>)> = models
        .iter()
        .map(|m| {
            let v = w.vram_mib.get(m).map(|n| n.to_string()).unwrap_or_default();
            (m.clone(), edits.draft(&name, m, &v))
        })
        .collect();
    let description = edits.draft(&name, DESCRIPTION, &w.description);
    let new_name = edits.draft(&name, NAME, &w.name);
    let touch = {
        let name = name.clone();
        move || edits.touch(&name)
    };
    let local_error = edits.draft(&name, ERROR, "");
    // Asked once more before deleting; kept with the drafts so a refetch does not forget it.
    let confirm = edits.draft(&name, CONFIRM, "");
    let inputs = cells
        .iter()
        .map(|(model, value)| {
            let value = *value;
            let label = format!("VRAM MiB for {} on {}", w.name, model);
            let touch = touch.clone();
            if admin {
                mib_cell(label, value, touch).into_any()
            } else {
                view! { <td>{move || value.get()}</td> }.into_any()
            }
        })
        .collect_view();
    let save = {
        let cells = cells.clone();
        let name = name.clone();
        move |_| edits.save_row(name.clone(), description, &cells, local_error)
    };
    let rename = {
        let name = name.clone();
        move |_| {
            edits.rename.dispatch(RenameWorkload {
                from: name.clone(),
                to: new_name.get_untracked(),
            });
        }
    };
    let delete = {
        let name = name.clone();
        let touch = touch.clone();
        move |_| {
            if !confirm.get_untracked().is_empty() {
                edits.delete.dispatch(DeleteWorkload { name: name.clone() });
            } else {
                touch();
                confirm.set("yes".into());
            }
        }
    };
    let head = if admin {
        view! {
            <th scope="row">
                <input type="text" class="name" aria-label=format!("Name of {}", w.name)
                    prop:value=move || new_name.get() on:input={
                        let touch = touch.clone();
                        move |ev| { touch(); new_name.set(event_target_value(&ev)); }
                    } />
                <input type="text" class="description" aria-label=format!("Description of {}", w.name) placeholder="description"
                    prop:value=move || description.get() on:input={
                        let touch = touch.clone();
                        move |ev| { touch(); description.set(event_target_value(&ev)); }
                    } />
            </th>
        }
        .into_any()
    } else {
        view! {
            <th scope="row">{w.name.clone()}<br /><span class="muted">{w.description.clone()}</span></th>
        }
        .into_any()
    };
    let actions = admin.then(|| {
        view! {
            <td class="actions">
                <button type="button" class="small" on:click=save>"Save"</button>
                <button type="button" class="small" on:click=rename>"Rename"</button>
                <button type="button" class="small danger" on:click=delete>
                    {move || if confirm.get().is_empty() { "Delete" } else { "Really delete?" }}
                </button>
                {move || Some(local_error.get()).filter(|e| !e.is_empty()).map(|e| view! { <p class="error" role="alert">{e}</p> })}
            </td>
        }
    });
    view! { <tr data-workload=name.clone()>{head}{inputs}{actions}</tr> }
}

#[component]
fn AddRow(models: Vec<String>, edits: Edits) -> impl IntoView {
    let name = edits.draft(NEW_ROW, NAME, "");
    let description = edits.draft(NEW_ROW, DESCRIPTION, "");
    let cells: Vec<(String, RwSignal<String>)> = models
        .iter()
        .map(|m| (m.clone(), edits.draft(NEW_ROW, m, "")))
        .collect();
    let touch = move || edits.touch(NEW_ROW);
    let local_error = edits.draft(NEW_ROW, ERROR, "");
    let inputs = cells
        .iter()
        .map(|(model, value)| {
            mib_cell(
                format!("VRAM MiB for the new type on {model}"),
                *value,
                touch,
            )
        })
        .collect_view();
    let add = move |_| edits.save_row(name.get_untracked(), description, &cells, local_error);
    view! {
        <tr class="new">
            <th scope="row">
                <input id="new-workload" type="text" class="name" aria-label="Name of a new workload type" placeholder="new type, e.g. llm-7b"
                    prop:value=move || name.get() on:input=move |ev| { touch(); name.set(event_target_value(&ev)); } />
                <input type="text" class="description" aria-label="Description of the new type" placeholder="description"
                    prop:value=move || description.get() on:input=move |ev| { touch(); description.set(event_target_value(&ev)); } />
            </th>
            {inputs}
            <td class="actions">
                <button id="add-workload" type="button" class="small" on:click=add>"Add"</button>
                {move || Some(local_error.get()).filter(|e| !e.is_empty()).map(|e| view! { <p class="error" role="alert">{e}</p> })}
            </td>
        </tr>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str, needs: &[(&str, i64)]) -> WorkloadView {
        WorkloadView {
            name: name.into(),
            description: String::new(),
            vram_mib: needs.iter().map(|(m, n)| (m.to_string(), *n)).collect(),
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn typed<'a>(cells: &[(&'a str, &str)]) -> Vec<(&'a str, String)> {
        cells.iter().map(|(m, t)| (*m, t.to_string())).collect()
    }

    #[test]
    fn a_cell_is_empty_or_a_whole_number_of_mib() {
        assert_eq!(cell("A100", "20480"), Ok(Some(20480)));
        assert_eq!(cell("A100", "  8192 \t"), Ok(Some(8192)));
        assert_eq!(cell("A100", ""), Ok(None));
        assert_eq!(cell("A100", "   "), Ok(None));
        // Range checks (zero, negative, too large for a card) are left to the server.
        assert_eq!(cell("A100", "0"), Ok(Some(0)));
        assert_eq!(cell("A100", "-1"), Ok(Some(-1)));
        assert_eq!(cell("A100", "+5"), Ok(Some(5)));
    }

    #[test]
    fn a_bad_cell_names_its_model_and_the_text() {
        assert_eq!(
            cell("NVIDIA A100-SXM4-80GB", "1.5"),
            Err("NVIDIA A100-SXM4-80GB: `1.5` is not a whole number of MiB".into())
        );
        // The text is quoted trimmed.
        assert_eq!(
            cell("H100", "  20 GiB "),
            Err("H100: `20 GiB` is not a whole number of MiB".into())
        );
        for bad in ["1e4", "1_000", "８", "9223372036854775808"] {
            assert!(cell("H100", bad).is_err(), "{bad:?}");
        }
        assert_eq!(cell("H100", "9223372036854775807"), Ok(Some(i64::MAX)));
    }

    #[test]
    fn a_row_keeps_its_filled_cells_only() {
        let cells = typed(&[("A100", " 20480 "), ("H100", ""), ("L4", "  ")]);
        assert_eq!(
            row_needs(cells),
            Ok(BTreeMap::from([("A100".to_owned(), 20480)]))
        );
        assert_eq!(row_needs(typed(&[])), Ok(BTreeMap::new()));
        assert_eq!(
            row_needs(typed(&[("A100", ""), ("H100", "")])),
            Ok(BTreeMap::new())
        );
    }

    #[test]
    fn a_row_with_a_bad_cell_is_not_saved() {
        let cells = typed(&[("A100", "100"), ("H100", "lots"), ("L4", "x")]);
        assert_eq!(
            row_needs(cells),
            Err("H100: `lots` is not a whole number of MiB".into())
        );
    }

    #[test]
    fn present_models_come_first_then_those_only_the_manifest_names() {
        let present = strings(&["H100", "A100"]);
        let workloads = [
            workload("llm-7b", &[("A100", 1), ("V100", 2)]),
            workload("sd", &[("H100", 3), ("RTX 4090", 4), ("V100", 5)]),
        ];
        // Present models keep their order; the rest follow, each once (a map's keys are sorted).
        assert_eq!(
            columns(&present, &workloads),
            strings(&["H100", "A100", "V100", "RTX 4090"])
        );
        assert_eq!(columns(&present, &[]), present);
        assert_eq!(
            columns(&[], &workloads),
            strings(&["A100", "V100", "H100", "RTX 4090"])
        );
        assert!(columns(&[], &[workload("empty", &[])]).is_empty());
    }
}
