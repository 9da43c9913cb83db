//! Where sessions are served: a host per job under a wildcard domain (`--sessions-domain`), or one
//! listener of their own with a path prefix per job (`--sessions-listen`). Either way an origin
//! that is not gpuq's, so code a session serves never runs where gpuq's cookie and API are.

use crate::model::session_path;
use uuid::Uuid;

/// The origin sessions are served at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOrigin {
    /// One listener of its own (`--sessions-listen`), reached at `base` (`http://host:port`, no
    /// trailing slash); job `id` at `<base>/s/<id>/`.
    Path {
        /// The public base URL of the sessions listener.
        base: String,
    },
    /// A host per job under a wildcard domain (`--sessions-domain`): job `id` at
    /// `<scheme>://<id>.<domain>/`.
    Domain {
        /// `https` (or `http` behind nothing, tests).
        scheme: String,
        /// The wildcard domain, e.g. `sessions.example.com` (with `:port` where not the default).
        domain: String,
    },
}

impl SessionOrigin {
    /// The URL job `id`'s session opens at.
    pub fn url(&self, id: Uuid) -> String {
        match self {
            SessionOrigin::Path { base } => format!("{base}{}", session_path(id)),
            SessionOrigin::Domain { scheme, domain } => {
                format!("{scheme}://{id}.{domain}{}", session_path(id))
            }
        }
    }

    /// Whether the origin is served over HTTPS (its cookie is then `Secure`).
    pub fn https(&self) -> bool {
        match self {
            SessionOrigin::Path { base } => base.starts_with("https://"),
            SessionOrigin::Domain { scheme, .. } => scheme == "https",
        }
    }

    /// The job a request to the session origin is for, from its `Host` and path; `None` for
    /// anything else (no job there).
    pub fn job_of(&self, host: Option<&str>, path: &str) -> Option<Uuid> {
        let rest = path.strip_prefix("/s/")?;
        let id: Uuid = rest.split('/').next()?.parse().ok()?;
        match self {
            SessionOrigin::Path { .. } => Some(id),
            SessionOrigin::Domain { domain, .. } => {
                // The host must name the same job: a page of one job's host never reaches
                // another job's session.
                let host = host?.to_ascii_lowercase();
                let (label, parent) = host.split_once('.')?;
                (parent == domain.to_ascii_lowercase() && label.parse::<Uuid>().ok()? == id)
                    .then_some(id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_origin_finds_the_job_in_the_prefix_and_nothing_else() {
        let o = SessionOrigin::Path {
            base: "http://127.0.0.1:4000".into(),
        };
        let id = Uuid::new_v4();
        assert_eq!(o.url(id), format!("http://127.0.0.1:4000/s/{id}/"));
        assert_eq!(o.job_of(None, &format!("/s/{id}/api/kernels")), Some(id));
        assert_eq!(o.job_of(None, &format!("/s/{id}")), Some(id));
        assert_eq!(o.job_of(None, "/s/not-a-uuid/"), None);
        assert_eq!(o.job_of(None, "/api/v1/jobs"), None);
        assert!(!o.https());
    }

    #[test]
    fn a_domain_origin_finds_the_job_in_the_host_under_its_domain_only() {
        let o = SessionOrigin::Domain {
            scheme: "https".into(),
            domain: "sessions.example.com".into(),
        };
        let id = Uuid::new_v4();
        assert_eq!(
            o.url(id),
            format!("https://{id}.sessions.example.com/s/{id}/")
        );
        let host = format!("{id}.Sessions.Example.com");
        assert_eq!(o.job_of(Some(&host), &format!("/s/{id}/lab")), Some(id));
        let elsewhere = format!("{id}.evil.example.com");
        assert_eq!(o.job_of(Some(&elsewhere), &format!("/s/{id}/")), None);
        let other = format!("{}.sessions.example.com", Uuid::new_v4());
        assert_eq!(o.job_of(Some(&other), &format!("/s/{id}/")), None);
        assert!(o.https());
    }
}
