//! The one error type that crosses the wire from server functions and the REST API.
//!
//! Internal errors (database, I/O) never travel as their text: the server logs them and sends
//! `Internal`, so a user sees a safe message and an operator finds the cause in the log.

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use serde::{Deserialize, Serialize};

/// Why a request was refused or failed, in words a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum AppError {
    /// No valid session or token.
    #[error("not signed in")]
    Unauthorized,
    /// Signed in, but the role or ownership does not allow it.
    #[error("not allowed: {0}")]
    Forbidden(String),
    /// Wrong username or password (never says which).
    #[error("wrong username or password")]
    BadCredentials,
    /// Too many failed logins for this name; wait before trying again.
    #[error("too many failed sign-in attempts; try again in {retry_after_s} s")]
    Throttled {
        /// Seconds until another attempt is accepted.
        retry_after_s: u64,
    },
    /// A per-user cap of the launch policy is reached (e.g. `max_queued_per_user`); the message
    /// names the cap.
    #[error("{message}; try again in {retry_after_s} s")]
    OverCap {
        /// Which cap, and its value, in plain words.
        message: String,
        /// Seconds after which a retry is worth it.
        retry_after_s: u64,
    },
    /// The server is at a bound of its own (e.g. concurrent password checks); retry shortly.
    #[error("server busy: {message}; try again in {retry_after_s} s")]
    Busy {
        /// What is busy.
        message: String,
        /// Seconds after which a retry is worth it.
        retry_after_s: u64,
    },
    /// A field of the request is invalid.
    #[error("{field}: {message}")]
    Invalid {
        /// The field at fault.
        field: String,
        /// What is wrong, in plain words.
        message: String,
    },
    /// The thing asked for does not exist (or is not visible to the caller).
    #[error("not found: {0}")]
    NotFound(String),
    /// The request conflicts with the current state (for example a duplicate name).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A cross-site request was refused.
    #[error("cross-site request refused")]
    CrossSite,
    /// What is asked for lives on another node that cannot hand it over now (it is lost,
    /// unreachable, or the nodes share no secret); the message says which and why.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Something failed on the server; the details are in its log.
    #[error("internal error; see the server log")]
    Internal,
    /// The call itself failed in transport (network, encoding).
    #[error("request failed: {0}")]
    Transport(String),
}

/// What a refusal read from a link says in place of its own words (see [`AppError::for_a_link`]).
pub const LINK_TEXT: &str = "refused (send the form again with JavaScript on to see why)";

impl AppError {
    /// Shorthand for a refusal naming the field at fault.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        AppError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error about another field: a shared check reused where the request names the
    /// value differently (e.g. `password` checked as `new_password`). Other errors are unchanged.
    pub fn for_field(self, field: impl Into<String>) -> Self {
        match self {
            AppError::Invalid { message, .. } => AppError::Invalid {
                field: field.into(),
                message,
            },
            other => other,
        }
    }

    /// What of an error carried in a link may be shown. A form sent without the WASM bundle gets
    /// its refusal back in the URL (`?__path=…&__err=…`), and anyone can write such a URL and send
    /// it round: so the page shows the kind of refusal and its numbers, never words from the URL.
    /// Free text is replaced by [`LINK_TEXT`]; a field name is kept only if it looks like one.
    pub fn for_a_link(self) -> Self {
        /// Longest wait a link may announce (a day).
        const MAX_WAIT_S: u64 = 86_400;
        let text = || LINK_TEXT.to_owned();
        match self {
            AppError::Unauthorized
            | AppError::BadCredentials
            | AppError::CrossSite
            | AppError::Internal => self,
            AppError::Throttled { retry_after_s } => AppError::Throttled {
                retry_after_s: retry_after_s.min(MAX_WAIT_S),
            },
            AppError::OverCap { retry_after_s, .. } => AppError::OverCap {
                message: text(),
                retry_after_s: retry_after_s.min(MAX_WAIT_S),
            },
            AppError::Busy { retry_after_s, .. } => AppError::Busy {
                message: text(),
                retry_after_s: retry_after_s.min(MAX_WAIT_S),
            },
            AppError::Invalid { field, .. } => {
                let named = field.len() <= 40
                    && field.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.[]".contains(&b)
                    });
                AppError::Invalid {
                    field: if named { field } else { "request".to_owned() },
                    message: text(),
                }
            }
            AppError::Forbidden(_) => AppError::Forbidden(text()),
            AppError::NotFound(_) => AppError::NotFound(text()),
            AppError::Conflict(_) => AppError::Conflict(text()),
            AppError::Unavailable(_) => AppError::Unavailable(text()),
            AppError::Transport(_) => AppError::Transport(text()),
        }
    }

    /// The field at fault, when the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            AppError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Seconds the caller should wait before retrying (`Retry-After`), for errors that have one.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            AppError::Throttled { retry_after_s }
            | AppError::OverCap { retry_after_s, .. }
            | AppError::Busy { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            AppError::Unauthorized | AppError::BadCredentials => 401,
            AppError::Forbidden(_) | AppError::CrossSite => 403,
            AppError::Throttled { .. } | AppError::OverCap { .. } => 429,
            AppError::Busy { .. } | AppError::Unavailable(_) => 503,
            AppError::Invalid { .. } => 400,
            AppError::NotFound(_) => 404,
            AppError::Conflict(_) => 409,
            AppError::Internal => 500,
            AppError::Transport(_) => 502,
        }
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            ServerFnErrorErr::Args(msg) | ServerFnErrorErr::MissingArg(msg) => {
                AppError::invalid("request", msg)
            }
            other => AppError::Transport(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_round_trip_as_json() {
        let err = AppError::invalid("username", "must not be empty");
        let json = serde_json::to_string(&err).unwrap();
        assert_eq!(serde_json::from_str::<AppError>(&json).unwrap(), err);
        assert_eq!(err.status(), 400);
        assert_eq!(err.to_string(), "username: must not be empty");
        assert_eq!(err.for_field("name").to_string(), "name: must not be empty");
        assert_eq!(AppError::Internal.for_field("x"), AppError::Internal);
    }

    #[test]
    fn a_link_shows_the_kind_and_numbers_of_a_refusal_never_its_words() {
        for kept in [
            AppError::BadCredentials,
            AppError::Unauthorized,
            AppError::Internal,
            AppError::Throttled { retry_after_s: 30 },
        ] {
            assert_eq!(kept.clone().for_a_link(), kept);
        }
        let bait = "Your account is locked: call 555-0100";
        for forged in [
            AppError::Forbidden(bait.into()),
            AppError::NotFound(bait.into()),
            AppError::Conflict(bait.into()),
            AppError::Unavailable(bait.into()),
            AppError::Transport(bait.into()),
            AppError::invalid("username", bait),
            AppError::Busy {
                message: bait.into(),
                retry_after_s: 2,
            },
            AppError::OverCap {
                message: bait.into(),
                retry_after_s: 2,
            },
        ] {
            let shown = forged.clone().for_a_link();
            assert_eq!(shown.status(), forged.status(), "{forged:?}");
            assert!(!shown.to_string().contains("555"), "{shown}");
            assert!(shown.to_string().contains(LINK_TEXT), "{shown}");
        }
        assert_eq!(
            AppError::invalid("username", "x").for_a_link().field(),
            Some("username")
        );
        assert_eq!(
            AppError::invalid("Call 555-0100 now", "x")
                .for_a_link()
                .field(),
            Some("request")
        );
        assert_eq!(
            AppError::Throttled {
                retry_after_s: u64::MAX
            }
            .for_a_link(),
            AppError::Throttled {
                retry_after_s: 86_400
            }
        );
    }
}
