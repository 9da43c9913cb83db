//! Secrets (API tokens, passwords) that a `Debug` form never shows.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A secret string. It serializes as itself, since it must reach whoever it is meant for, but its
/// `Debug` form is `<redacted>`: a struct holding one can derive `Debug`, and a log line or a panic
/// message that prints that struct cannot carry the secret.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that needs it (a header, a hash, a file).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// For command-line flags and environment variables.
impl FromStr for Secret {
    type Err = Infallible;

    fn from_str(s: &str) -> Result<Self, Infallible> {
        Ok(s.into())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_never_shows_the_secret_and_serde_keeps_it() {
        let s = Secret::from("gpuq_s3cr3t");
        let shown = format!("{s:?} {s:#?} {:?}", Some(&s));
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert_eq!(shown, "<redacted> <redacted> Some(<redacted>)");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"gpuq_s3cr3t\"");
        let back: Secret = serde_json::from_str("\"gpuq_s3cr3t\"").unwrap();
        assert_eq!(back.expose(), "gpuq_s3cr3t");
    }
}
