//! Small pieces of markup more than one page draws the same way.

use leptos::prelude::*;

/// A table cell with a small red button that runs `act` when pressed; an empty cell when `shown`
/// is false (a job that can no longer be cancelled, a token already revoked).
pub fn danger_cell(
    shown: bool,
    label: &'static str,
    act: impl Fn() + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <td>{shown.then(|| view! {
            <button type="button" class="small danger" on:click=move |_| act()>{label}</button>
        })}</td>
    }
}

/// A table's head: one `<th scope="col">` per name, in order (an empty name heads a column of
/// buttons).
pub fn column_heads<N: IntoView + 'static>(names: impl IntoIterator<Item = N>) -> impl IntoView {
    let cells = names
        .into_iter()
        .map(|name| view! { <th scope="col">{name}</th> })
        .collect_view();
    view! { <thead><tr>{cells}</tr></thead> }
}

/// A table with id `id`: `heads`, then one row per item drawn by `row`; a muted `none` instead
/// when there are no items.
pub fn table_or_note<T, R: IntoView + 'static>(
    id: &'static str,
    heads: impl IntoIterator<Item = &'static str>,
    items: Vec<T>,
    row: impl FnMut(T) -> R,
    none: &'static str,
) -> AnyView {
    if items.is_empty() {
        return view! { <p class="muted">{none}</p> }.into_any();
    }
    view! { <table id=id>{heads_and_rows(heads, items, row)}</table> }.into_any()
}

/// The inside of a table: `heads`, then one row per item drawn by `row`.
pub fn heads_and_rows<T, N: IntoView + 'static, R: IntoView + 'static>(
    heads: impl IntoIterator<Item = N>,
    items: Vec<T>,
    row: impl FnMut(T) -> R,
) -> impl IntoView {
    let rows = items.into_iter().map(row).collect_view();
    view! {
        {column_heads(heads)}
        <tbody>{rows}</tbody>
    }
}

/// A form field: `control` under a label for `id`.
fn labelled(id: &'static str, label: &'static str, control: impl IntoView) -> impl IntoView {
    view! {
        <div class="field">
            <label for=id>{label}</label>
            {control}
        </div>
    }
}

/// A labelled one-line text box bound to `value`, showing `hint` while empty.
pub fn text_input(
    id: &'static str,
    label: &'static str,
    hint: &'static str,
    value: RwSignal<String>,
) -> impl IntoView {
    bound_input(id, label, "text", Some(hint), None, value)
}

/// A labelled text area of `rows` lines bound to `value`.
pub fn text_area(
    id: &'static str,
    label: &'static str,
    rows: &'static str,
    value: RwSignal<String>,
) -> impl IntoView {
    let area = view! {
        <textarea id=id rows=rows prop:value=move || value.get()
            on:input=move |ev| value.set(event_target_value(&ev))></textarea>
    };
    labelled(id, label, area)
}

/// A labelled number box bound to `value`, from `min` up.
pub fn number_input(
    id: &'static str,
    label: &'static str,
    min: &'static str,
    value: RwSignal<String>,
) -> impl IntoView {
    bound_input(id, label, "number", None, Some(min), value)
}

/// A check box bound to `value`, inside its label (the label names what ticking it turns on).
pub fn check_box(id: &'static str, label: &'static str, value: RwSignal<bool>) -> impl IntoView {
    view! {
        <div class="field">
            <label for=id>
                <input id=id type="checkbox" prop:checked=move || value.get()
                    on:change=move |ev| value.set(event_target_checked(&ev)) />
                {format!(" {label}")}
            </label>
        </div>
    }
}

/// A labelled `<input>` of type `kind` bound to `value`, with a `placeholder` and a `min` where
/// given.
fn bound_input(
    id: &'static str,
    label: &'static str,
    kind: &'static str,
    placeholder: Option<&'static str>,
    min: Option<&'static str>,
    value: RwSignal<String>,
) -> impl IntoView {
    let input = view! {
        <input id=id type=kind placeholder=placeholder min=min prop:value=move || value.get()
            on:input=move |ev| value.set(event_target_value(&ev)) />
    };
    labelled(id, label, input)
}
