//! What the admin, manifest and account pages exchange with the server.

use super::{AuditKind, ManifestView, Secret};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One entry of the append-only audit log, described for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// When.
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// What kind of change.
    pub kind: AuditKind,
    /// What it was done to (a workload type, a user, a card).
    pub subject: String,
    /// The change, in words.
    pub summary: String,
}

/// The manifest with its change history, and whether a pass has run since the last change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ManifestState {
    /// Workload types and the models present.
    pub manifest: ManifestView,
    /// Manifest edits, newest first (at most 100).
    pub history: Vec<AuditEntry>,
    /// When the last admission pass committed (any process).
    pub last_pass_at: Option<DateTime<Utc>>,
}

impl ManifestState {
    /// Whether the newest edit has been seen by a pass.
    pub fn applied(&self) -> bool {
        match (self.history.first(), self.last_pass_at) {
            (None, _) => true,
            (Some(change), Some(pass)) => pass > change.at,
            (Some(_), None) => false,
        }
    }
}

/// An API token as its owner sees it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct TokenView {
    /// Key, used to revoke.
    pub id: Uuid,
    /// Label the owner chose.
    pub name: String,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// Last request it authenticated.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
    /// When it stops working, if it expires.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// It has expired (by the server's clock) and is refused.
    #[serde(default)]
    pub expired: bool,
}

/// A token just created: the secret is shown this once (and never by `Debug`, so a log line or a
/// panic message cannot carry it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct CreatedToken {
    /// The secret for `Authorization: Bearer …`.
    #[cfg_attr(feature = "ssr", schema(value_type = String))]
    pub token: Secret,
    /// Its record (id to revoke it, name), beside the secret on the wire.
    #[serde(flatten)]
    pub record: TokenView,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_tokens_debug_form_never_holds_the_secret() {
        let created = CreatedToken {
            token: "gpuq_s3cr3t-value".into(),
            record: TokenView {
                id: Uuid::nil(),
                name: "laptop".into(),
                created_at: DateTime::<Utc>::MIN_UTC,
                last_used_at: None,
                revoked_at: None,
                expires_at: None,
                expired: false,
            },
        };
        let shown = format!("{created:?} {created:#?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("laptop"),
            "{shown}"
        );
    }
}
