//! The account page's notifications: what I hear about and where, and my recent deliveries with
//! their state (sent; retrying, and when next; failed, and why).

use super::alert::{action_error, loaded};
use super::widgets::{check_box, number_input, table_or_note, text_area};
use crate::api::{my_deliveries, my_notifications, SaveNotifications};
use crate::model::{
    AppError, DeliveryView, NotificationSettings, NotificationsPut, NotifyEvent, WebhookFormat,
    WebhookPut,
};
use chrono::{DateTime, Utc};
use leptos::prelude::*;

/// What the section reads: made once per page by the account page (not inside the signed-in
/// closure, which server-side rendering may run more than once).
pub struct NotifyData {
    /// Saving the settings.
    pub save: ServerAction<SaveNotifications>,
    /// The settings.
    pub settings: Resource<Result<NotificationSettings, AppError>>,
    /// The recent deliveries.
    pub deliveries: Resource<Result<Vec<DeliveryView>, AppError>>,
}

impl NotifyData {
    /// The action and the two resources, re-read after each save.
    pub fn load() -> NotifyData {
        let save = ServerAction::<SaveNotifications>::new();
        NotifyData {
            save,
            settings: Resource::new(move || save.version().get(), |_| my_notifications()),
            deliveries: Resource::new(move || save.version().get(), |_| my_deliveries()),
        }
    }
}

/// The section: the settings form and the deliveries table.
#[component]
pub fn Notifications(
    save: ServerAction<SaveNotifications>,
    settings: Resource<Result<NotificationSettings, AppError>>,
    deliveries: Resource<Result<Vec<DeliveryView>, AppError>>,
) -> impl IntoView {
    view! {
        <section class="card" id="notifications">
            <h2>"Notifications"</h2>
            <p class="muted">"Tell me when my jobs end, by e-mail or webhook. Each message says why the job ended and links to its page."</p>
            {loaded(settings, move |s| view! { <NotifyForm s save /> })}
            <h3>"Recent deliveries"</h3>
            {loaded(deliveries, move |list| table_or_note("deliveries", ["Job", "Event", "To", "State", "Attempts", "Created"], list, |d| {
                let state = delivery_state(&d);
                view! {
                    <tr data-delivery=d.id.to_string()>
                        <td><a href=format!("/jobs/{}", d.job_id)>{d.job_name.clone()}</a></td>
                        <td>{d.event.as_str()}</td>
                        <td>{format!("{} {}", d.channel, d.target)}</td>
                        <td>{state}</td>
                        <td>{d.attempts}</td>
                        <td>{stamp(d.created_at)}</td>
                    </tr>
                }
            }, "No deliveries yet."))}
        </section>
    }
}

/// `HH:MM:SS` of a time (UTC), date first.
fn stamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A delivery's state in words: "sent", "retrying at … (why)", "failed: why", "pending".
pub fn delivery_state(d: &DeliveryView) -> String {
    let why = d.last_error.clone().unwrap_or_default();
    match d.state_word() {
        "sent" => "sent".to_owned(),
        "retrying" => match d.next_attempt_at {
            Some(at) => format!("retrying at {} ({why})", stamp(at)),
            None => format!("retrying ({why})"),
        },
        "failed" => format!("failed: {why}"),
        other => other.to_owned(),
    }
}

/// The webhooks box: one per line, `URL [generic|slack] [secret]`. A line without a secret keeps
/// the one its URL has.
fn webhooks_text(s: &NotificationSettings) -> String {
    s.webhooks
        .iter()
        .map(|w| format!("{} {}", w.url, w.format))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads the webhooks box; the error names the line.
pub fn parse_webhooks(text: &str) -> Result<Vec<WebhookPut>, AppError> {
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let mut words = line.split_whitespace();
        let url = words.next().unwrap_or_default().to_owned();
        let mut format = WebhookFormat::Generic;
        let mut secret = None;
        for w in words {
            match w.parse::<WebhookFormat>() {
                Ok(f) => format = f,
                Err(_) if secret.is_none() => secret = Some(w.to_owned()),
                Err(_) => {
                    return Err(AppError::invalid(
                        format!("webhooks[{i}]"),
                        "one URL, then generic or slack, then the secret",
                    ))
                }
            }
        }
        out.push(WebhookPut {
            url,
            format,
            secret,
        });
    }
    Ok(out)
}

#[component]
fn NotifyForm(s: NotificationSettings, save: ServerAction<SaveNotifications>) -> impl IntoView {
    let email = RwSignal::new(s.email.clone().unwrap_or_default());
    let hooks = RwSignal::new(webhooks_text(&s));
    let minutes = RwSignal::new(s.started_after_wait_minutes.to_string());
    let on: Vec<(NotifyEvent, RwSignal<bool>)> = NotifyEvent::ALL
        .iter()
        .map(|e| (*e, RwSignal::new(s.on.contains(e))))
        .collect();
    let signed: Vec<String> = s
        .webhooks
        .iter()
        .filter(|w| w.secret_set)
        .map(|w| w.url.clone())
        .collect();
    let local_error = RwSignal::new(None::<String>);
    let boxes = on.clone();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let put = (|| -> Result<NotificationsPut, AppError> {
            let email = email.get_untracked();
            let minutes = minutes.get_untracked();
            Ok(NotificationsPut {
                email: Some(email.trim().to_owned()).filter(|e| !e.is_empty()),
                webhooks: parse_webhooks(&hooks.get_untracked())?,
                on: on
                    .iter()
                    .filter(|(_, v)| v.get_untracked())
                    .map(|(e, _)| *e)
                    .collect(),
                started_after_wait_minutes: Some(minutes.trim().parse().map_err(|_| {
                    AppError::invalid("started_after_wait_minutes", "a whole number of minutes")
                })?),
            })
        })();
        match put {
            Ok(settings) => {
                local_error.set(None);
                save.dispatch(SaveNotifications { settings });
            }
            Err(e) => local_error.set(Some(e.to_string())),
        }
    };
    let saved = move || {
        save.value()
            .get()
            .and_then(|r| r.ok())
            .map(|_| view! { <p role="status">"Saved."</p> })
    };
    view! {
        <form id="notify-form" on:submit=submit>
            <div class="row">
                <div class="field">
                    <label for="notify-email">"E-mail address"</label>
                    <input id="notify-email" type="email" placeholder="none" prop:value=move || email.get()
                        on:input=move |ev| email.set(event_target_value(&ev)) />
                </div>
                {number_input("notify-minutes", "Tell me of a start after waiting more than (minutes)", "1", minutes)}
            </div>
            <div class="row">
                {boxes.into_iter().map(|(e, v)| check_box(event_id(e), event_label(e), v)).collect_view()}
            </div>
            {text_area("notify-webhooks", "Webhooks, one per line: URL, then generic or slack, then a signing secret (left out: the URL keeps its secret)", "3", hooks)}
            <p class="muted">{if signed.is_empty() { "No webhook is signed.".to_owned() } else { format!("Signed: {}", signed.join(", ")) }}</p>
            <button type="submit">"Save notifications"</button>
        </form>
        {move || local_error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
        {move || action_error(save.value().get())}
        {saved}
    }
}

fn event_id(e: NotifyEvent) -> &'static str {
    match e {
        NotifyEvent::Succeeded => "notify-succeeded",
        NotifyEvent::Failed => "notify-failed",
        NotifyEvent::TimedOut => "notify-timed-out",
        NotifyEvent::Cancelled => "notify-cancelled",
        NotifyEvent::VramOveruse => "notify-vram-overuse",
        NotifyEvent::StartedAfterWait => "notify-started-after-wait",
        NotifyEvent::Idle => "notify-idle",
    }
}

fn event_label(e: NotifyEvent) -> &'static str {
    match e {
        NotifyEvent::Succeeded => "succeeded",
        NotifyEvent::Failed => "failed",
        NotifyEvent::TimedOut => "timed out",
        NotifyEvent::Cancelled => "cancelled",
        NotifyEvent::VramOveruse => "stopped for VRAM overuse",
        NotifyEvent::StartedAfterWait => "started after a long wait",
        NotifyEvent::Idle => "flagged idle (cards unused)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_lines_read_url_format_and_secret() {
        let hooks = parse_webhooks(
            "https://a.example/x\n\n https://b.example/y slack\nhttps://c.example/z generic s3cret-s3cret-s3cret",
        )
        .unwrap();
        assert_eq!(hooks.len(), 3);
        assert_eq!(hooks[0].format, WebhookFormat::Generic);
        assert_eq!(hooks[0].secret, None);
        assert_eq!(hooks[1].format, WebhookFormat::Slack);
        assert_eq!(hooks[2].secret.as_deref(), Some("s3cret-s3cret-s3cret"));
        let e = parse_webhooks("https://a.example/x one two").unwrap_err();
        assert_eq!(e.field(), Some("webhooks[0]"));
    }

    #[test]
    fn a_delivery_says_where_it_stands() {
        let mut d = DeliveryView {
            id: 1,
            idempotency_key: uuid::Uuid::nil(),
            job_id: uuid::Uuid::nil(),
            job_name: "j".into(),
            event: NotifyEvent::Failed,
            channel: "webhook".into(),
            target: "https://a.example".into(),
            state: crate::model::DeliveryState::Pending,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            created_at: Utc::now(),
            sent_at: None,
        };
        assert_eq!(delivery_state(&d), "pending");
        d.attempts = 1;
        d.last_error = Some("answered 500".into());
        assert!(
            delivery_state(&d).starts_with("retrying"),
            "{}",
            delivery_state(&d)
        );
        assert!(delivery_state(&d).contains("answered 500"));
        d.state = crate::model::DeliveryState::Failed;
        assert_eq!(delivery_state(&d), "failed: answered 500");
        d.state = crate::model::DeliveryState::Sent;
        assert_eq!(delivery_state(&d), "sent");
    }
}
