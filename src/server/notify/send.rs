//! Sending one delivery: a webhook (to the checked address, signed, no redirects) or a mail
//! (through the admin's SMTP relay). `Ok` only once the receiver acknowledged it.

use super::ssrf::Checked;
use crate::model::WebhookFormat;
use hmac::{Hmac, Mac};
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::Value;
use sha2::Sha256;
use std::fmt;
use std::time::Duration;
use uuid::Uuid;

/// How long one webhook request may take, connection included (`gpuq serve`).
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one SMTP conversation may take.
pub const SMTP_TIMEOUT: Duration = Duration::from_secs(20);

/// How the connection to the relay is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain text.
    None,
    /// STARTTLS, required.
    StartTls,
    /// Implicit TLS.
    Tls,
}

/// The admin's SMTP relay (`--smtp-*`).
#[derive(Clone)]
pub struct SmtpConfig {
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Its protection.
    pub tls: SmtpTls,
    /// AUTH user name and password, if any.
    pub credentials: Option<(String, String)>,
    /// The sender.
    pub from: String,
    /// Certificate authorities (PEM) trusted for the relay besides the public roots
    /// (`--smtp-ca-file`).
    pub ca_pem: Option<Vec<u8>>,
}

impl fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.credentials.as_ref().map(|c| &c.0))
            .field("password", &self.credentials.as_ref().map(|_| "<redacted>"))
            .field("from", &self.from)
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .finish()
    }
}

/// `sha256=<hex>`: HMAC-SHA256 with `secret` over `<timestamp>.<body>`.
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Posts `message` to the checked URL, connecting to the checked address only.
pub async fn webhook(
    to: &Checked,
    format: WebhookFormat,
    secret: Option<&str>,
    key: Uuid,
    event: &str,
    message: &Value,
    timeout: Duration,
) -> Result<(), String> {
    let body = match format {
        WebhookFormat::Generic => serde_json::to_vec(&message["json"]),
        WebhookFormat::Slack => serde_json::to_vec(&serde_json::json!({ "text": message["text"] })),
    }
    .map_err(|e| e.to_string())?;
    let mut client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .user_agent(concat!("gpuq/", env!("CARGO_PKG_VERSION")));
    if let Some(domain) = &to.domain {
        client = client.resolve(domain, to.addr);
    }
    let client = client.build().map_err(|e| e.to_string())?;
    let now = chrono::Utc::now().timestamp();
    let mut req = client
        .post(to.url.clone())
        .header("content-type", "application/json")
        .header("idempotency-key", key.to_string())
        .header("x-gpuq-event", event)
        .header("x-gpuq-timestamp", now.to_string());
    if let Some(secret) = secret {
        req = req.header("x-gpuq-signature", signature(secret, now, &body));
    }
    let answer = req.body(body).send().await.map_err(|e| {
        let kind = if e.is_timeout() {
            "no answer in time"
        } else if e.is_connect() {
            "could not connect"
        } else {
            "request failed"
        };
        format!("{kind}: {}", error_chain(&e))
    })?;
    let status = answer.status();
    if status.is_success() {
        Ok(())
    } else if status.is_redirection() {
        Err(format!("answered {status}: redirects are not followed"))
    } else {
        Err(format!("answered {status}"))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Sends `message` to `to` through the relay; `Ok` once the relay accepted it.
pub async fn mail(smtp: &SmtpConfig, to: &str, key: Uuid, message: &Value) -> Result<(), String> {
    let subject = message["subject"]
        .as_str()
        .unwrap_or("[gpuq] job notification");
    let text = message["text"].as_str().unwrap_or_default().to_owned();
    let email = Message::builder()
        .from(smtp.from.parse().map_err(|e| format!("--smtp-from: {e}"))?)
        .to(to.parse().map_err(|e| format!("`{to}`: {e}"))?)
        .subject(subject)
        .message_id(Some(format!("<{key}@gpuq>")))
        .header(ContentType::TEXT_PLAIN)
        .body(text)
        .map_err(|e| e.to_string())?;
    let builder = match (smtp.tls, &smtp.ca_pem) {
        (SmtpTls::None, _) => {
            AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.host.as_str())
        }
        (SmtpTls::StartTls, None) => {
            AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host)
                .map_err(|e| e.to_string())?
        }
        (SmtpTls::Tls, None) => {
            AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host).map_err(|e| e.to_string())?
        }
        // The public roots and the admin's own authorities: the relay's certificate must chain
        // to one of them and name the relay's host, as without the file.
        (tls, Some(pem)) => {
            let ca = Certificate::from_pem(pem).map_err(|e| format!("--smtp-ca-file: {e}"))?;
            let params = TlsParameters::builder(smtp.host.clone())
                .add_root_certificate(ca)
                .build_rustls()
                .map_err(|e| e.to_string())?;
            let tls = match tls {
                SmtpTls::Tls => Tls::Wrapper(params),
                _ => Tls::Required(params),
            };
            AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.host.as_str()).tls(tls)
        }
    };
    let mut builder = builder.port(smtp.port).timeout(Some(SMTP_TIMEOUT));
    if let Some((user, pw)) = &smtp.credentials {
        builder = builder.credentials(Credentials::new(user.clone(), pw.clone()));
    }
    let transport = builder.build();
    transport.send(email).await.map(drop).map_err(|e| {
        format!(
            "the SMTP relay refused or did not answer: {}",
            error_chain(&e)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_over_timestamp_dot_body() {
        // Computed independently: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac key
        assert_eq!(
            signature("key", 1_700_000_000, br#"{"a":1}"#),
            "sha256=a438e398bfafc57e4396bb7fc2304422f0f768e965d073ca313cb52e22e6ad03"
        );
    }

    #[test]
    fn the_relays_password_never_shows_in_debug_output() {
        let cfg = SmtpConfig {
            host: "smtp.example.org".into(),
            port: 587,
            tls: SmtpTls::StartTls,
            credentials: Some(("gpuq".into(), "hunter2-the-password".into())),
            from: "gpuq@example.org".into(),
            ca_pem: None,
        };
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("gpuq"),
            "{shown}"
        );
    }
}
