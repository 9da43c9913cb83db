//! What a notification says: the job's end (or late start) in the job's own words (status, exit
//! code, reason, who stopped it, the last log lines of a failure) and its page's link. Composed
//! once per delivery and kept in the outbox, so every attempt sends the same message.

use crate::model::NotifyEvent;
use crate::server::db::notifications::JobFacts;
use serde_json::{json, Value};
use uuid::Uuid;

/// Log lines a failure's message carries.
pub const TAIL_LINES: usize = 20;

/// Whether the event is one whose message carries the log's last lines.
pub fn wants_tail(event: NotifyEvent) -> bool {
    matches!(
        event,
        NotifyEvent::Failed | NotifyEvent::TimedOut | NotifyEvent::VramOveruse
    )
}

/// The message of one notification: `{"subject", "text", "json"}` (the webhook's generic body is
/// `json`; mails and Slack bodies are `subject` and `text`).
pub fn compose(
    key: Uuid,
    job: Uuid,
    event: NotifyEvent,
    facts: &JobFacts,
    tail: Option<&str>,
    link: &str,
) -> Value {
    let what = match event {
        NotifyEvent::Succeeded => "succeeded".to_owned(),
        NotifyEvent::Failed => "failed".to_owned(),
        NotifyEvent::TimedOut => "timed out".to_owned(),
        NotifyEvent::Cancelled => "was cancelled".to_owned(),
        NotifyEvent::VramOveruse => "was stopped for using more VRAM than it committed".to_owned(),
        NotifyEvent::StartedAfterWait => {
            let waited = facts
                .started_at
                .map(|s| (s - facts.created_at).num_minutes())
                .unwrap_or_default();
            format!("started after waiting {waited} min")
        }
        NotifyEvent::Idle => "is idle: its cards have been idle past the launch policy's \
                              idle_after_min (see its page for when it will be stopped)"
            .to_owned(),
    };
    let subject = format!("[gpuq] job {} {what}", facts.name);
    let mut text = format!("Job {} ({job}) {what}.\n", facts.name);
    if let Some(code) = facts.exit_code {
        text.push_str(&format!("Exit code: {code}\n"));
    }
    if let Some(reason) = &facts.status_reason {
        text.push_str(&format!("Reason: {reason}\n"));
    }
    if let Some(cause) = &facts.stop_cause {
        text.push_str(&format!("Stopped by: {cause}\n"));
    }
    if let Some(node) = &facts.node {
        text.push_str(&format!("Node: {node}\n"));
    }
    text.push_str(&format!("Submitted: {}\n", facts.created_at.to_rfc3339()));
    if let Some(t) = facts.started_at {
        text.push_str(&format!("Started: {}\n", t.to_rfc3339()));
    }
    if let Some(t) = facts.finished_at {
        text.push_str(&format!("Ended: {}\n", t.to_rfc3339()));
    }
    if let Some(tail) = tail {
        text.push_str(&format!(
            "\nLast {TAIL_LINES} log lines:\n{}\n",
            tail.trim_end()
        ));
    }
    text.push_str(&format!("\n{link}\n"));
    let body = json!({
        "idempotency_key": key,
        "event": event,
        "job": {
            "id": job,
            "name": facts.name,
            "owner": facts.owner,
            "status": facts.status,
            "exit_code": facts.exit_code,
            "reason": facts.status_reason,
            "stop_cause": facts.stop_cause,
            "node": facts.node,
            "created_at": facts.created_at,
            "started_at": facts.started_at,
            "finished_at": facts.finished_at,
            "url": link,
        },
        "log_tail": tail,
        "text": text,
    });
    json!({ "subject": subject, "text": text, "json": body })
}
