//! The admin's launch policy: which images and host folders jobs may use, and their limits.

use serde::{Deserialize, Serialize};

/// A host folder jobs may mount (and everything below it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VolumeRule {
    /// Absolute host path; symlinks in it are resolved when checking.
    pub path: String,
    /// Mounts from here must be read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// Launch policy, stored in the `settings` table and edited by admins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct LaunchPolicy {
    /// Image patterns a job may use; `*` matches any run of characters.
    pub image_allowlist: Vec<String>,
    /// Host folders jobs may mount. Empty: no volumes at all.
    pub volume_allowlist: Vec<VolumeRule>,
    /// Run-time limit of jobs that do not set one.
    pub default_timeout_s: u64,
    /// Longest run-time limit a job may ask for.
    pub max_timeout_s: u64,
    /// Memory limit of every container, MiB.
    pub memory_limit_mib: u64,
    /// Process limit of every container.
    pub pids_limit: i64,
}

impl Default for LaunchPolicy {
    fn default() -> Self {
        LaunchPolicy {
            image_allowlist: vec!["*".into()],
            volume_allowlist: Vec::new(),
            default_timeout_s: 3600,
            max_timeout_s: 7 * 24 * 3600,
            memory_limit_mib: 16 * 1024,
            pids_limit: 4096,
        }
    }
}

impl LaunchPolicy {
    /// Checks the policy itself, naming the field at fault.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.max_timeout_s == 0 || self.default_timeout_s == 0 {
            return Err(("max_timeout_s".into(), "timeouts must be positive".into()));
        }
        if self.default_timeout_s > self.max_timeout_s {
            return Err((
                "default_timeout_s".into(),
                "the default timeout must not exceed the maximum".into(),
            ));
        }
        if self.memory_limit_mib < 16 || self.pids_limit < 16 {
            return Err((
                "memory_limit_mib".into(),
                "memory limit must be at least 16 MiB and pids limit at least 16".into(),
            ));
        }
        for (i, rule) in self.volume_allowlist.iter().enumerate() {
            if !rule.path.starts_with('/') || rule.path == "/" {
                return Err((
                    format!("volume_allowlist[{i}]"),
                    "must be an absolute path other than /".into(),
                ));
            }
        }
        for (i, p) in self.image_allowlist.iter().enumerate() {
            if p.is_empty() || p.chars().any(char::is_whitespace) {
                return Err((
                    format!("image_allowlist[{i}]"),
                    "patterns must be non-empty, without spaces".into(),
                ));
            }
        }
        Ok(())
    }

    /// Whether an image reference matches one of the allowed patterns.
    pub fn image_allowed(&self, image: &str) -> bool {
        self.image_allowlist.iter().any(|p| glob_match(p, image))
    }
}

/// `*`-only glob matching (no other metacharacters), linear in practice for short patterns.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything:tag"));
        assert!(glob_match("registry.local/*", "registry.local/team/x:1"));
        assert!(!glob_match("registry.local/*", "docker.io/x"));
        assert!(glob_match("pytorch/*:2.*", "pytorch/pytorch:2.3"));
        assert!(!glob_match("pytorch/*:2.*", "pytorch/pytorch:1.9"));
        assert!(glob_match("busybox", "busybox"));
        assert!(!glob_match("busybox", "busybox:1"));
        assert!(!glob_match("a*a", "a"));
    }

    #[test]
    fn policy_checks() {
        assert!(LaunchPolicy::default().check().is_ok());
        let bad = LaunchPolicy {
            default_timeout_s: 10,
            max_timeout_s: 5,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "default_timeout_s");
    }
}
