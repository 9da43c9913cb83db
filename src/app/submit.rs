//! The submit form: the same parser as the API decides, errors appear next to their field, and a
//! live preview says whether the job fits now, would wait, or can never run here.

use super::gate::SignedIn;
use crate::api::{get_manifest, PreviewJob, SubmitJob};
use crate::model::{AppError, Preview};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_navigate;

/// `/submit`
#[component]
pub fn SubmitPage() -> impl IntoView {
    view! {
        <Title text="Submit · gpuq" />
        <SignedIn page=|_| view! { <SubmitForm /> } />
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
        }
    }

    /// The JSON body the API takes; numbers that do not parse are sent as text so the server's
    /// parser names the field.
    fn spec(&self) -> String {
        let mut spec = serde_json::Map::new();
        let text = |s: RwSignal<String>| s.get_untracked().trim().to_owned();
        let number = |s: &str| {
            s.parse::<i64>()
                .map(serde_json::Value::from)
                .unwrap_or_else(|_| serde_json::Value::from(s))
        };
        spec.insert("image".into(), text(self.image).into());
        spec.insert("command".into(), text(self.command).into());
        for (key, field) in [("name", self.name), ("workload", self.workload)] {
            let v = text(field);
            if !v.is_empty() {
                spec.insert(key.into(), v.into());
            }
        }
        for (key, field) in [
            ("gpu_count", self.gpus),
            ("min_vram_mb", self.vram),
            ("timeout_s", self.timeout),
            ("priority", self.priority),
        ] {
            let v = text(field);
            if !v.is_empty() {
                spec.insert(key.into(), number(&v));
            }
        }
        let env: serde_json::Map<String, serde_json::Value> = text(self.env)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| match l.split_once('=') {
                Some((k, v)) => (k.trim().to_owned(), v.into()),
                None => (l.trim().to_owned(), "".into()),
            })
            .collect();
        if !env.is_empty() {
            spec.insert("env".into(), env.into());
        }
        let volumes: Vec<serde_json::Value> = text(self.volumes)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(Into::into)
            .collect();
        if !volumes.is_empty() {
            spec.insert("volumes".into(), volumes.into());
        }
        serde_json::Value::Object(spec).to_string()
    }
}

/// The spec fields the form shows errors next to; errors on anything else appear below the form.
const FORM_FIELDS: [&str; 10] = [
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
];

/// Whether an error's field (`env.FOO`, `volumes[2]`, `image`) belongs to a form field.
fn belongs_to(field: &str, form_field: &str) -> bool {
    field
        .strip_prefix(form_field)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

#[component]
fn SubmitForm() -> impl IntoView {
    let f = Fields::new();
    let preview = ServerAction::<PreviewJob>::new();
    let submit = ServerAction::<SubmitJob>::new();
    let manifest = Resource::new(|| (), |_| get_manifest());
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
    let field_error = move |prefix: &'static str| {
        move || match error() {
            Some(AppError::Invalid { field, message }) if belongs_to(&field, prefix) => Some(
                view! { <p class="field-error" role="alert">{format!("{field}: {message}")}</p> },
            ),
            _ => None,
        }
    };
    let other_error = move || match error() {
        Some(AppError::Invalid { field, .. })
            if FORM_FIELDS.iter().any(|p| belongs_to(&field, p)) =>
        {
            None
        }
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
    let text_input =
        move |id: &'static str, label: &'static str, sig: RwSignal<String>, hint: &'static str| {
            view! {
                <div class="field">
                    <label for=id>{label}</label>
                    <input id=id type="text" placeholder=hint prop:value=move || sig.get()
                        on:input=move |ev| sig.set(event_target_value(&ev)) />
                </div>
            }
        };
    view! {
        <section class="card">
            <h1>"Submit a job"</h1>
            <form on:submit=on_submit on:change=on_change>
                {text_input("image", "Image", f.image, "registry/name:tag")}
                {field_error("image")}
                {text_input("command", "Command", f.command, "python train.py --epochs 3")}
                {field_error("command")}
                {text_input("name", "Name (optional)", f.name, "")}
                {field_error("name")}
                <div class="row">
                    <div class="field">
                        <label for="gpus">"GPUs"</label>
                        <input id="gpus" type="number" min="0" prop:value=move || f.gpus.get()
                            on:input=move |ev| f.gpus.set(event_target_value(&ev)) />
                    </div>
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
                    <div class="field">
                        <label for="vram">"VRAM per card (MiB)"</label>
                        <input id="vram" type="number" min="1" prop:value=move || f.vram.get()
                            on:input=move |ev| f.vram.set(event_target_value(&ev)) />
                    </div>
                </div>
                {field_error("gpu_count")}
                {field_error("workload")}
                {field_error("min_vram_mb")}
                <div class="field">
                    <label for="env">"Environment (KEY=value per line)"</label>
                    <textarea id="env" rows="3" prop:value=move || f.env.get()
                        on:input=move |ev| f.env.set(event_target_value(&ev))></textarea>
                </div>
                {field_error("env")}
                <div class="field">
                    <label for="volumes">"Volumes (host:container[:ro] per line)"</label>
                    <textarea id="volumes" rows="2" prop:value=move || f.volumes.get()
                        on:input=move |ev| f.volumes.set(event_target_value(&ev))></textarea>
                </div>
                {field_error("volumes")}
                <div class="row">
                    {text_input("timeout", "Timeout (s)", f.timeout, "default")}
                    {text_input("priority", "Priority (-100…100)", f.priority, "0")}
                </div>
                {field_error("timeout_s")}
                {field_error("priority")}
                <div aria-live="polite" id="preview">{verdict}</div>
                {other_error}
                <button type="submit" disabled=move || submit.pending().get()>"Submit"</button>
            </form>
        </section>
    }
}
