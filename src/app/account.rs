//! `/account`: change my password; create and revoke my API tokens (for the CLI and scripts).

use super::alert::action_error;
use super::gate::SignedIn;
use crate::api::{my_tokens, ChangePassword, CreateToken, RevokeToken};
use crate::model::{AppError, UserView};
use leptos::prelude::*;
use leptos_meta::Title;

/// `/account`
#[component]
pub fn AccountPage() -> impl IntoView {
    view! {
        <Title text="Account · gpuq" />
        <SignedIn page=|me| view! { <Password me /> <Tokens /> } />
    }
}

fn field_error(r: Option<Result<(), AppError>>, field: &'static str) -> Option<String> {
    match r {
        Some(Err(e)) if e.field() == Some(field) => Some(e.to_string()),
        _ => None,
    }
}

#[component]
fn Password(me: UserView) -> impl IntoView {
    let change = ServerAction::<ChangePassword>::new();
    let result = move || change.value().get();
    let general = move || match result() {
        Some(Err(e)) if !matches!(e.field(), Some("current_password" | "new_password")) => {
            Some(view! { <p class="error" role="alert">{e.to_string()}</p> })
        }
        _ => None,
    };
    let done = move || {
        matches!(result(), Some(Ok(()))).then(|| view! { <p role="status">"Password changed."</p> })
    };
    let current_error = move || field_error(result(), "current_password");
    let new_error = move || field_error(result(), "new_password");
    view! {
        <section class="card">
            <h1>{format!("Account: {}", me.username)}</h1>
            <h2>"Change password"</h2>
            <ActionForm action=change attr:id="password-form">
                <input type="text" name="username" value=me.username.clone() autocomplete="username" hidden />
                <div class="field">
                    <label for="current-password">"Current password"</label>
                    <input id="current-password" name="current_password" type="password" required autocomplete="current-password"
                        aria-invalid=move || current_error().is_some().to_string() aria-describedby="current-password-error" />
                </div>
                <p id="current-password-error" class="field-error">{current_error}</p>
                <div class="field">
                    <label for="new-password">"New password (at least 8 characters)"</label>
                    <input id="new-password" name="new_password" type="password" required minlength="8" autocomplete="new-password"
                        aria-invalid=move || new_error().is_some().to_string() aria-describedby="new-password-error" />
                </div>
                <p id="new-password-error" class="field-error">{new_error}</p>
                <button type="submit">"Change password"</button>
            </ActionForm>
            {general}
            {done}
        </section>
    }
}

#[component]
fn Tokens() -> impl IntoView {
    let create = ServerAction::<CreateToken>::new();
    let revoke = ServerAction::<RevokeToken>::new();
    let tokens = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| my_tokens(),
    );
    let secret = move || {
        match create.value().get() {
        Some(Ok(t)) => Some(
            view! {
                <div class="new-token" role="status">
                    <p>{format!("Token `{}` created. Copy it now: it is shown only this once.", t.record.name)}</p>
                    <code id="new-token">{t.token}</code>
                </div>
            }
            .into_any(),
        ),
        Some(Err(e)) => Some(view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any()),
        None => None,
    }
    };
    view! {
        <section class="card">
            <h2>"API tokens"</h2>
            <p class="muted">"For the gpuq CLI and scripts: send as " <code>"Authorization: Bearer …"</code> "."</p>
            <ActionForm action=create attr:id="token-form" attr:class="row">
                <div class="field">
                    <label for="token-name">"Name"</label>
                    <input id="token-name" name="name" type="text" required maxlength="128" placeholder="e.g. laptop CLI" />
                </div>
                <div class="field"><button type="submit">"Create token"</button></div>
            </ActionForm>
            {secret}
            {move || action_error(revoke.value().get())}
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match tokens.await {
                        Ok(list) if list.is_empty() => view! { <p>"No tokens yet."</p> }.into_any(),
                        Ok(list) => view! {
                            <table id="tokens">
                                <thead><tr>
                                    <th scope="col">"Name"</th><th scope="col">"Created"</th><th scope="col">"Last used"</th><th scope="col">"Status"</th><th scope="col"></th>
                                </tr></thead>
                                <tbody>
                                    {list.into_iter().map(|t| {
                                        let id = t.id;
                                        let live = t.revoked_at.is_none();
                                        let fmt = |d: chrono::DateTime<chrono::Utc>| d.format("%Y-%m-%d %H:%M").to_string();
                                        view! {
                                            <tr data-token=t.name.clone()>
                                                <td>{t.name.clone()}</td>
                                                <td>{fmt(t.created_at)}</td>
                                                <td>{t.last_used_at.map(fmt).unwrap_or_else(|| "never".into())}</td>
                                                <td>{if live { "live".to_owned() } else { format!("revoked {}", t.revoked_at.map(fmt).unwrap_or_default()) }}</td>
                                                <td>{live.then(|| view! {
                                                    <button type="button" class="small danger" on:click=move |_| { revoke.dispatch(RevokeToken { id }); }>
                                                        "Revoke"
                                                    </button>
                                                })}</td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any(),
                        Err(e) => view! { <p class="error">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}
