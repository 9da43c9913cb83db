//! `/account`: change my password; create and revoke my API tokens (for the CLI and scripts); my
//! notifications and their deliveries ([`super::notifications`]).

use super::alert::{action_error, loaded};
use super::gate::SignedIn;
use super::widgets::{danger_cell, table_or_note};
use crate::api::{my_tokens, ChangePassword, CreateToken, RevokeToken};
use crate::model::{AppError, TokenView, UserView};
use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;

/// `/account`
///
/// The token list is fetched here, once per page, not inside [`SignedIn`]'s page: server-side
/// rendering may run that closure more than once (see the job page).
#[component]
pub fn AccountPage() -> impl IntoView {
    let create = ServerAction::<CreateToken>::new();
    let revoke = ServerAction::<RevokeToken>::new();
    let tokens = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| my_tokens(),
    );
    let super::notifications::NotifyData {
        save,
        settings,
        deliveries,
    } = super::notifications::NotifyData::load();
    view! {
        <Title text="Account · gpuq" />
        <SignedIn page=move |me| view! { <Password me /> <Tokens create revoke tokens /> <super::notifications::Notifications save settings deliveries /> } />
    }
}

/// The fields of the password form that show their own error.
const PASSWORD_FIELDS: [&str; 2] = ["current_password", "new_password"];

/// The error to show next to `field`, when the last attempt failed on that field.
fn field_error(r: Option<Result<(), AppError>>, field: &'static str) -> Option<String> {
    match r {
        Some(Err(e)) if e.field() == Some(field) => Some(e.to_string()),
        _ => None,
    }
}

/// The error to show under the form: any failure not about one of its fields.
fn general_error(r: Option<Result<(), AppError>>) -> Option<String> {
    match r {
        Some(Err(e)) if !e.field().is_some_and(|f| PASSWORD_FIELDS.contains(&f)) => {
            Some(e.to_string())
        }
        _ => None,
    }
}

/// A token's times, to the minute (UTC).
fn stamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M").to_string()
}

/// When a token was last used, or "never".
fn last_used(at: Option<DateTime<Utc>>) -> String {
    at.map(stamp).unwrap_or_else(|| "never".into())
}

/// "live" (and until when), or when the token was revoked or expired.
fn token_status(t: &TokenView) -> String {
    match (t.revoked_at, t.expires_at) {
        (Some(at), _) => format!("revoked {}", stamp(at)),
        (None, Some(at)) if t.expired => format!("expired {}", stamp(at)),
        (None, Some(at)) => format!("live until {}", stamp(at)),
        (None, None) => "live".to_owned(),
    }
}

#[component]
fn Password(me: UserView) -> impl IntoView {
    let change = ServerAction::<ChangePassword>::new();
    let result = move || change.value().get();
    let general =
        move || general_error(result()).map(|e| view! { <p class="error" role="alert">{e}</p> });
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
fn Tokens(
    create: ServerAction<CreateToken>,
    revoke: ServerAction<RevokeToken>,
    tokens: Resource<Result<Vec<TokenView>, AppError>>,
) -> impl IntoView {
    let secret = move || {
        match create.value().get() {
        Some(Ok(t)) => Some(
            view! {
                <div class="new-token" role="status">
                    <p>{format!("Token `{}` created. Copy it now: it is shown only this once.", t.record.name)}</p>
                    <code id="new-token">{t.token.expose().to_owned()}</code>
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
                <div class="field">
                    <label for="token-days">"Expires after (days)"</label>
                    <input id="token-days" name="expires_in_days" type="number" min="1" max="3650" placeholder="never" />
                </div>
                <div class="field"><button type="submit">"Create token"</button></div>
            </ActionForm>
            {secret}
            {move || action_error(revoke.value().get())}
            {loaded(tokens, move |list| table_or_note("tokens", ["Name", "Created", "Last used", "Status", ""], list, move |t| {
                let id = t.id;
                let live = t.revoked_at.is_none() && !t.expired;
                let status = token_status(&t);
                view! {
                    <tr data-token=t.name.clone()>
                        <td>{t.name.clone()}</td>
                        <td>{stamp(t.created_at)}</td>
                        <td>{last_used(t.last_used_at)}</td>
                        <td>{status}</td>
                        {danger_cell(live, "Revoke", move || { revoke.dispatch(RevokeToken { id }); })}
                    </tr>
                }
            }, "No tokens yet."))}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn failed(e: AppError) -> Option<Result<(), AppError>> {
        Some(Err(e))
    }

    #[test]
    fn a_field_error_shows_next_to_its_own_field_only() {
        let wrong = failed(AppError::invalid("current_password", "is wrong"));
        assert_eq!(
            field_error(wrong.clone(), "current_password").as_deref(),
            Some("current_password: is wrong")
        );
        assert_eq!(field_error(wrong.clone(), "new_password"), None);
        assert_eq!(general_error(wrong), None);

        let short = failed(AppError::invalid(
            "new_password",
            "must be at least 8 characters",
        ));
        assert_eq!(field_error(short.clone(), "current_password"), None);
        assert_eq!(
            field_error(short.clone(), "new_password").as_deref(),
            Some("new_password: must be at least 8 characters")
        );
        assert_eq!(general_error(short), None);
    }

    #[test]
    fn other_failures_show_under_the_form() {
        // A field the form does not have (a renamed check, a server-side field name).
        let other = failed(AppError::invalid("password", "too common"));
        assert_eq!(field_error(other.clone(), "current_password"), None);
        assert_eq!(field_error(other.clone(), "new_password"), None);
        assert_eq!(
            general_error(other).as_deref(),
            Some("password: too common")
        );
        // A prefix of a form field is not that field.
        let prefix = failed(AppError::invalid("new", "x"));
        assert_eq!(field_error(prefix.clone(), "new_password"), None);
        assert_eq!(general_error(prefix).as_deref(), Some("new: x"));
        assert_eq!(
            general_error(failed(AppError::Unauthorized)).as_deref(),
            Some("not signed in")
        );
        assert_eq!(
            general_error(failed(AppError::Throttled { retry_after_s: 30 })).as_deref(),
            Some("too many failed sign-in attempts; try again in 30 s")
        );
    }

    #[test]
    fn nothing_shows_before_an_attempt_or_after_success() {
        for r in [None, Some(Ok(()))] {
            assert_eq!(field_error(r.clone(), "current_password"), None);
            assert_eq!(field_error(r.clone(), "new_password"), None);
            assert_eq!(general_error(r), None);
        }
    }

    #[test]
    fn every_failure_shows_exactly_once() {
        let errors = [
            AppError::invalid("current_password", "is wrong"),
            AppError::invalid("new_password", "too short"),
            AppError::invalid("request", "bad body"),
            AppError::BadCredentials,
            AppError::Internal,
            AppError::Transport("offline".into()),
        ];
        for e in errors {
            let r = failed(e.clone());
            let shown = PASSWORD_FIELDS
                .iter()
                .filter(|&&f| field_error(r.clone(), f).is_some())
                .count()
                + usize::from(general_error(r).is_some());
            assert_eq!(shown, 1, "{e:?}");
        }
    }

    #[test]
    fn token_times_read_to_the_minute() {
        let at = Utc.with_ymd_and_hms(2025, 3, 9, 7, 5, 59).unwrap();
        assert_eq!(stamp(at), "2025-03-09 07:05");
        assert_eq!(last_used(Some(at)), "2025-03-09 07:05");
        assert_eq!(last_used(None), "never");
    }

    #[test]
    fn a_token_is_live_until_revoked_or_expired() {
        let at = Utc.with_ymd_and_hms(2024, 12, 31, 23, 59, 0).unwrap();
        let mut t = TokenView {
            id: uuid::Uuid::nil(),
            name: "t".into(),
            created_at: at,
            last_used_at: None,
            revoked_at: None,
            expires_at: None,
            expired: false,
        };
        assert_eq!(token_status(&t), "live");
        t.expires_at = Some(at);
        assert_eq!(token_status(&t), "live until 2024-12-31 23:59");
        t.expired = true;
        assert_eq!(token_status(&t), "expired 2024-12-31 23:59");
        t.revoked_at = Some(at);
        assert_eq!(token_status(&t), "revoked 2024-12-31 23:59");
    }
}
