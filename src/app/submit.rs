//! The submit form: the same parser as the API decides, errors appear next to their field, and a
//! live preview says whether the job fits now, would wait, or can never run here.

use super::gate::SignedIn;
use super::widgets::{number_input, text_area, text_input};
use crate::api::{get_manifest, my_budget, PreviewJob, SubmitJob};
use crate::model::{AppError, BudgetUse, ManifestView, Preview};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_navigate;

/// `/submit`
///
/// The manifest (for the workload type choices) is fetched here, once per page, not inside
/// [`SignedIn`]'s page: server-side rendering may run that closure more than once (see the job
/// page).
#[component]
pub fn SubmitPage() -> impl IntoView {
    let manifest = Resource::new(|| (), |_| get_manifest());
    let budget = Resource::new(|| (), |_| my_budget());
    view! {
        <Title text="Submit · gpuq" />
        <SignedIn page=move |_| view! { <SubmitForm manifest budget /> } />
    }
}

/// The form's fields, as typed.
#[derive(Clone, Copy)]
struct Fields {
    image: RwSignal<String>,
    command: RwSignal<String>,
    name: RwSignal<String>,
    gpus: RwSignal<String>,
    workload: RwSignal<String>,
    vram: RwSignal<String>,
    env: RwSignal<String>,
    volumes: RwSignal<String>,
    timeout: RwSignal<String>,
    priority: RwSignal<String>,
    notebook: RwSignal<bool>,
}

impl Fields {
    fn new() -> Self {
        Fields {
            image: RwSignal::new(String::new()),
            command: RwSignal::new(String::new()),
            name: RwSignal::new(String::new()),
            gpus: RwSignal::new("1".into()),
            workload: RwSignal::new(String::new()),
            vram: RwSignal::new(String::new()),
            env: RwSignal::new(String::new()),
            volumes: RwSignal::new(String::new()),
            timeout: RwSignal::new(String::new()),
            priority: RwSignal::new(String::new()),
            notebook: RwSignal::new(false),
        }
    }

    /// The JSON body the API takes (see [`spec_json`]).
    fn spec(&self) -> String {
        let text = |s: RwSignal<String>| s.get_untracked();
        spec_json(&FormText {
            image: text(self.image),
            command: text(self.command),
            name: text(self.name),
            gpus: text(self.gpus),
            workload: text(self.workload),
            vram: text(self.vram),
            env: text(self.env),
            volumes: text(self.volumes),
            timeout: text(self.timeout),
            priority: text(self.priority),
            notebook: self.notebook.get_untracked(),
        })
    }
}

/// The form's fields as typed, read once.
#[derive(Default)]
struct FormText {
    image: String,
    command: String,
    name: String,
    gpus: String,
    workload: String,
    vram: String,
    env: String,
    volumes: String,
    timeout: String,
    priority: String,
    notebook: bool,
}

/// The "notebook" choice: Jupyter on the session's port, under the base path gpuq gives it, with
/// no token of its own (gpuq's proxy is the gate), notebooks kept in the job's `/tmp` (the root
/// filesystem is read-only). Its command unless the form names another.
pub const NOTEBOOK_COMMAND: &str = "sh -c \"exec jupyter notebook --ip=0.0.0.0 --port=8888 \
    --no-browser --NotebookApp.token='' --NotebookApp.password='' \
    --NotebookApp.base_url=$GPUQ_SESSION_BASE --NotebookApp.allow_remote_access=True \
    --NotebookApp.notebook_dir=/tmp\"";
/// The port the notebook choice serves.
pub const NOTEBOOK_PORT: u16 = 8888;

/// The JSON body the API takes. Every field is trimmed; empty optional fields are left out so the
/// server's defaults apply. The command line goes as typed: the server splits it, with the same
/// parser as the API. Numbers that do not parse are sent as text so the server's parser names
/// the field.
fn spec_json(t: &FormText) -> String {
    let mut spec = serde_json::Map::new();
    let text = |s: &str| s.trim().to_owned();
    spec.insert("image".into(), text(&t.image).into());
    let command = match text(&t.command) {
        c if c.is_empty() && t.notebook => NOTEBOOK_COMMAND.to_owned(),
        c => c,
    };
    spec.insert("command".into(), command.into());
    if t.notebook {
        spec.insert("port".into(), NOTEBOOK_PORT.into());
    }
    for (key, field) in [("name", &t.name), ("workload", &t.workload)] {
        let v = text(field);
        if !v.is_empty() {
            spec.insert(key.into(), v.into());
        }
    }
    for (key, field) in [
        ("gpu_count", &t.gpus),
        ("min_vram_mb", &t.vram),
        ("timeout_s", &t.timeout),
        ("priority", &t.priority),
    ] {
        let v = text(field);
        if !v.is_empty() {
            spec.insert(key.into(), number_or_text(&v));
        }
    }
    let env = env_lines(&text(&t.env));
    if !env.is_empty() {
        spec.insert("env".into(), env.into());
    }
    let volumes = volume_lines(&text(&t.volumes));
    if !volumes.is_empty() {
        spec.insert("volumes".into(), volumes.into());
    }
    serde_json::Value::Object(spec).to_string()
}

/// A whole number as a JSON number; anything else as the text itself.
fn number_or_text(s: &str) -> serde_json::Value {
    s.parse::<i64>()
        .map(serde_json::Value::from)
        .unwrap_or_else(|_| serde_json::Value::from(s))
}

/// `KEY=value` per line: the key is trimmed, the value kept as typed (after the first `=`); a
/// line without `=` is a key with an empty value; blank lines are skipped; a repeated key keeps
/// its last value.
fn env_lines(text: &str) -> serde_json::Map<String, serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.split_once('=') {
            Some((k, v)) => (k.trim().to_owned(), v.into()),
            None => (l.trim().to_owned(), "".into()),
        })
        .collect()
}

/// One mount per line, trimmed; blank lines skipped.
fn volume_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(Into::into)
        .collect()
}

/// The spec fields the form shows errors next to; errors on anything else appear below the form.
const FORM_FIELDS: [&str; 11] = [
    "image",
    "command",
    "name",
    "gpu_count",
    "workload",
    "min_vram_mb",
    "env",
    "volumes",
    "timeout_s",
    "priority",
    "port",
];

/// Whether an error's field (`env.FOO`, `volumes[2]`, `image`) belongs to a form field.
fn belongs_to(field: &str, form_field: &str) -> bool {
    field
        .strip_prefix(form_field)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

/// Whether an error about `field` appears next to one of the form's fields (otherwise it appears
/// below the form).
fn shown_by_a_field(field: &str) -> bool {
    FORM_FIELDS.iter().any(|p| belongs_to(field, p))
}

#[component]
fn SubmitForm(
    manifest: Resource<Result<ManifestView, AppError>>,
    budget: Resource<Result<Vec<BudgetUse>, AppError>>,
) -> impl IntoView {
    let f = Fields::new();
    let preview = ServerAction::<PreviewJob>::new();
    let submit = ServerAction::<SubmitJob>::new();
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(ack)) = submit.value().get() {
            navigate(&format!("/jobs/{}", ack.job_id), Default::default());
        }
    });
    // The error of the last submission (or, before any, of the last preview), by field.
    let error = move || match submit.value().get() {
        Some(Err(e)) => Some(e),
        _ => match preview.value().get() {
            Some(Err(e)) => Some(e),
            _ => None,
        },
    };
    // The error about any of `fields` (one line: there is one error at a time), under the form
    // field or row of fields it is about.
    let field_error = move |fields: &'static [&'static str]| {
        move || match error() {
            Some(AppError::Invalid { field, message })
                if fields.iter().any(|p| belongs_to(&field, p)) =>
            {
                Some(
                    view! { <p class="field-error" role="alert">{format!("{field}: {message}")}</p> },
                )
            }
            _ => None,
        }
    };
    let other_error = move || match error() {
        Some(AppError::Invalid { field, .. }) if shown_by_a_field(&field) => None,
        Some(e) => Some(view! { <p class="error" role="alert">{e.to_string()}</p> }),
        None => None,
    };
    let verdict = move || match preview.value().get() {
        Some(Ok(Preview::FitsNow(t))) => Some(view! { <p class="preview fits">{t}</p> }.into_any()),
        Some(Ok(Preview::WouldWait(t))) => {
            Some(view! { <p class="preview waits">{t}</p> }.into_any())
        }
        Some(Ok(Preview::Never(t))) => Some(
            view! { <p class="preview never">{format!("can never run here: {t}")}</p> }.into_any(),
        ),
        _ => None,
    };
    let on_change = move |_| {
        preview.dispatch(PreviewJob { spec: f.spec() });
    };
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        submit.dispatch(SubmitJob { spec: f.spec() });
    };
    view! {
        <section class="card">
            <h1>"Submit a job"</h1>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    super::budget::budget_lines(budget.await.unwrap_or_default())
                })}
            </Transition>
            <form on:submit=on_submit on:change=on_change>
                {text_input("image", "Image", "registry/name:tag", f.image)}
                {field_error(&["image"])}
                {text_input("command", "Command", "python train.py --epochs 3", f.command)}
                {field_error(&["command"])}
                {text_input("name", "Name (optional)", "", f.name)}
                {field_error(&["name"])}
                <div class="row">
                    {number_input("gpus", "GPUs", "0", f.gpus)}
                    <div class="field">
                        <label for="workload">"Workload type"</label>
                        <Transition fallback=|| view! { <select id="workload" disabled=true></select> }>
                            {move || Suspend::new(async move {
                                let names: Vec<String> = manifest
                                    .await
                                    .map(|m| m.workloads.into_iter().map(|w| w.name).collect())
                                    .unwrap_or_default();
                                view! {
                                    <select id="workload" on:change=move |ev| f.workload.set(event_target_value(&ev))>
                                        <option value="">"— none: give VRAM per card —"</option>
                                        {names.into_iter().map(|n| { let label = n.clone(); view! { <option value=n>{label}</option> } }).collect_view()}
                                    </select>
                                }
                            })}
                        </Transition>
                    </div>
                    {number_input("vram", "VRAM per card (MiB)", "1", f.vram)}
                </div>
                {field_error(&["gpu_count", "workload", "min_vram_mb"])}
                {text_area("env", "Environment (KEY=value per line)", "3", f.env)}
                {field_error(&["env"])}
                {text_area("volumes", "Volumes (host:container[:ro] per line)", "2", f.volumes)}
                {field_error(&["volumes"])}
                <div class="row">
                    {text_input("timeout", "Timeout (s)", "default", f.timeout)}
                    {text_input("priority", "Priority (-100…100)", "0", f.priority)}
                </div>
                {field_error(&["timeout_s", "priority"])}
                <div class="field">
                    <label for="notebook">
                        <input type="checkbox" id="notebook" prop:checked=move || f.notebook.get()
                            on:change=move |ev| f.notebook.set(event_target_checked(&ev)) />
                        " Notebook: Jupyter, opened from the job's page (it runs when the field above is left empty)"
                    </label>
                </div>
                {field_error(&["port"])}
                <div aria-live="polite" id="preview">{verdict}</div>
                {other_error}
                <button type="submit" disabled=move || submit.pending().get()>"Submit"</button>
            </form>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn spec(t: FormText) -> Value {
        serde_json::from_str(&spec_json(&t)).unwrap()
    }

    #[test]
    fn a_minimal_form_sends_image_command_and_the_default_card() {
        let v = spec(FormText {
            image: "  pytorch/pytorch:2.3 ".into(),
            command: " python train.py --epochs 3\n".into(),
            gpus: "1".into(),
            ..Default::default()
        });
        assert_eq!(
            v,
            json!({ "image": "pytorch/pytorch:2.3", "command": "python train.py --epochs 3", "gpu_count": 1 })
        );
    }

    #[test]
    fn the_command_line_goes_as_typed_for_the_server_to_split() {
        let v = spec(FormText {
            command: r#"  sh -c 'echo "a  b" && sleep 1'  "#.into(),
            ..Default::default()
        });
        assert_eq!(v["command"], r#"sh -c 'echo "a  b" && sleep 1'"#);
    }

    #[test]
    fn empty_optional_fields_are_left_out() {
        let v = spec(FormText {
            name: "   ".into(),
            workload: "\t".into(),
            gpus: " ".into(),
            vram: String::new(),
            env: "\n  \n".into(),
            volumes: " \n\n ".into(),
            timeout: "".into(),
            priority: "  ".into(),
            ..Default::default()
        });
        // Image and command are always sent, so the server names them when they are missing.
        assert_eq!(v, json!({ "image": "", "command": "" }));
    }

    #[test]
    fn numbers_are_numbers_and_anything_else_is_text_for_the_server_to_name() {
        let v = spec(FormText {
            gpus: " 2 ".into(),
            vram: "16384".into(),
            timeout: "1.5".into(),
            priority: "-100".into(),
            ..Default::default()
        });
        assert_eq!(v["gpu_count"], 2);
        assert_eq!(v["min_vram_mb"], 16384);
        assert_eq!(v["timeout_s"], "1.5");
        assert_eq!(v["priority"], -100);
        assert_eq!(number_or_text("+7"), json!(7));
        assert_eq!(number_or_text("0"), json!(0));
        assert_eq!(number_or_text("ten"), json!("ten"));
        assert_eq!(number_or_text("1e3"), json!("1e3"));
        assert_eq!(number_or_text("1 000"), json!("1 000"));
        assert_eq!(number_or_text("٣"), json!("٣"));
        assert_eq!(number_or_text("9223372036854775807"), json!(i64::MAX));
        // Too large for a number: sent as text, so the server reports it instead of a wrapped value.
        assert_eq!(
            number_or_text("9223372036854775808"),
            json!("9223372036854775808")
        );
    }

    #[test]
    fn environment_lines_become_a_map() {
        let env = env_lines("A=1\n  B = two words \nC=x=y\nFLAG\n\n   \nÜ=ü");
        assert_eq!(
            Value::Object(env),
            json!({ "A": "1", "B": " two words ", "C": "x=y", "FLAG": "", "Ü": "ü" })
        );
        assert!(env_lines("").is_empty());
        assert!(env_lines("\n \n\t").is_empty());
    }

    #[test]
    fn a_repeated_environment_key_keeps_its_last_value() {
        assert_eq!(Value::Object(env_lines("A=1\nA=2")), json!({ "A": "2" }));
        // Keys are trimmed, so these are the same key.
        assert_eq!(Value::Object(env_lines("A=1\n A =3")), json!({ "A": "3" }));
    }

    #[test]
    fn the_whole_environment_box_is_trimmed_before_it_is_split() {
        let v = spec(FormText {
            env: "  A=1\nB=2  ".into(),
            ..Default::default()
        });
        assert_eq!(v["env"], json!({ "A": "1", "B": "2" }));
    }

    #[test]
    fn volumes_are_one_per_line() {
        assert_eq!(
            volume_lines(" /data:/data:ro \n\n/scratch:/scratch\n"),
            vec![json!("/data:/data:ro"), json!("/scratch:/scratch")]
        );
        assert!(volume_lines("").is_empty());
        assert!(volume_lines(" \n \n").is_empty());
        let v = spec(FormText {
            volumes: "/a:/b\r\n/c:/d".into(),
            ..Default::default()
        });
        assert_eq!(v["volumes"], json!(["/a:/b", "/c:/d"]));
    }

    #[test]
    fn errors_belong_to_their_field_and_its_parts() {
        assert!(belongs_to("image", "image"));
        assert!(belongs_to("env.FOO", "env"));
        assert!(belongs_to("env.", "env"));
        assert!(belongs_to("volumes[2]", "volumes"));
        assert!(!belongs_to("environment", "env"));
        assert!(!belongs_to("images", "image"));
        assert!(!belongs_to("gpu", "gpu_count"));
        assert!(!belongs_to("", "image"));
        assert!(!belongs_to("Image", "image"));
        assert!(!belongs_to(" image", "image"));
    }

    #[test]
    fn errors_about_other_fields_show_below_the_form() {
        for field in FORM_FIELDS {
            assert!(shown_by_a_field(field), "{field}");
        }
        assert!(shown_by_a_field("env.MY_VAR"));
        assert!(shown_by_a_field("volumes[0]"));
        assert!(shown_by_a_field("min_vram_mb"));
        assert!(!shown_by_a_field("request"));
        assert!(!shown_by_a_field("spec"));
        assert!(!shown_by_a_field("exclusive"));
        assert!(!shown_by_a_field(""));
        assert!(!shown_by_a_field("timeout"));
    }

    #[test]
    fn the_notebook_choice_serves_jupyter_on_its_port_unless_a_command_is_given() {
        let v = spec(FormText {
            image: "gpuq-test/jupyter:latest".into(),
            notebook: true,
            ..Default::default()
        });
        assert_eq!(v["port"], json!(NOTEBOOK_PORT));
        let command = v["command"].as_str().unwrap();
        assert!(
            command.contains("--NotebookApp.base_url=$GPUQ_SESSION_BASE"),
            "{command}"
        );
        assert!(command.contains("--NotebookApp.token=''"), "{command}");
        let own = spec(FormText {
            command: "jupyter lab".into(),
            notebook: true,
            ..Default::default()
        });
        assert_eq!(own["command"], json!("jupyter lab"));
        assert!(spec(FormText::default()).get("port").is_none());
    }
}
