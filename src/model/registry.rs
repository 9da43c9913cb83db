//! Registry credentials as they cross the wire: what an admin sends (a username and a password,
//! the password a [`Secret`]), and what anyone allowed to look gets back (the host, the username,
//! when and by whom; never the password). And what a registry host may look like.

use super::{image_ref, Secret};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Docker Hub's other names: credentials set for any of them are stored under `docker.io`, the
/// registry [`image_ref::normalise`] gives Hub images.
const HUB_ALIASES: [&str; 3] = [
    "index.docker.io",
    "registry-1.docker.io",
    "registry.hub.docker.com",
];

/// The longest username or password accepted (registries' tokens are long, but not this long).
pub const MAX_CREDENTIAL_LEN: usize = 4096;

/// `PUT /api/v1/registries/{host}`: the credentials a node hands the registry when it pulls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegistryLogin {
    /// The registry account (or token name).
    pub username: String,
    /// Its password or access token: stored encrypted, never shown again.
    #[cfg_attr(feature = "ssr", schema(value_type = String))]
    pub password: Secret,
}

/// Stored credentials of one registry, as listed: never the password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct RegistryView {
    /// The registry host (`host[:port]`, `docker.io` for Docker Hub).
    pub host: String,
    /// The account the nodes pull as.
    pub username: String,
    /// When they were set.
    pub set_at: DateTime<Utc>,
    /// The admin who set them.
    pub set_by: String,
}

/// The one form of a registry host, or why `host` is not one: `host[:port]` (a DNS name,
/// `localhost`, an IPv4 address or a bracketed IPv6 address; port 1–65535), lower-cased, without a
/// scheme or a path; Docker Hub's other names are `docker.io`.
pub fn check_registry_host(host: &str) -> Result<String, String> {
    let host = host.trim().to_ascii_lowercase();
    if host.is_empty() {
        return Err("a registry host must not be empty (e.g. registry.example.com:5000, or docker.io for Docker Hub)".into());
    }
    if host.len() > 261 {
        return Err("a registry host is at most 253 characters and a port".into());
    }
    if host.contains("://") {
        return Err(format!(
            "`{host}`: name the registry by its host, without a scheme"
        ));
    }
    if host.contains('/') {
        return Err(format!("`{host}`: a registry host has no path"));
    }
    let (name, port) = split_port(&host)?;
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => {
                return Err(format!(
                    "`{host}`: the port must be a number from 1 to 65535"
                ))
            }
        }
    }
    let valid_name = if let Some(inner) = name.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
    };
    if !valid_name {
        return Err(format!(
            "`{host}` is not a registry host: use host[:port], e.g. registry.example.com:5000, \
             127.0.0.1:5000, or docker.io for Docker Hub"
        ));
    }
    if port.is_none() && HUB_ALIASES.contains(&name) {
        return Ok(image_ref::DEFAULT_REGISTRY.to_owned());
    }
    Ok(host)
}

/// `name` and the port after its last `:` (outside an IPv6 address's brackets).
fn split_port(host: &str) -> Result<(&str, Option<&str>), String> {
    let after_brackets = host.rfind(']').map_or(0, |i| i + 1);
    match host[after_brackets..].rfind(':') {
        Some(i) => {
            let at = after_brackets + i;
            Ok((&host[..at], Some(&host[at + 1..])))
        }
        None if host.starts_with('[') || !host.contains(':') => Ok((host, None)),
        None => Err(format!(
            "`{host}`: put an IPv6 address in brackets, as in [::1]:5000"
        )),
    }
}

/// The registry host an image reference is pulled from, in the form credentials are stored
/// under (`docker.io` for `busybox`); `None` when the reference does not parse.
pub fn registry_of_image(reference: &str) -> Option<String> {
    let full = image_ref::normalise(reference).ok()?;
    let host = full.split('/').next()?;
    check_registry_host(host).ok()
}

/// Checks an admin's credentials: a username and a password, neither empty nor too long, the
/// username without control characters; the error names the field.
pub fn check_login(login: &RegistryLogin) -> Result<(), (&'static str, String)> {
    let user = login.username.as_str();
    if user.trim().is_empty() {
        return Err(("username", "must not be empty".into()));
    }
    if user.len() > MAX_CREDENTIAL_LEN || user.chars().any(char::is_control) {
        return Err((
            "username",
            format!("at most {MAX_CREDENTIAL_LEN} characters, without control characters"),
        ));
    }
    let password = login.password.expose();
    if password.is_empty() {
        return Err(("password", "must not be empty".into()));
    }
    if password.len() > MAX_CREDENTIAL_LEN {
        return Err((
            "password",
            format!("at most {MAX_CREDENTIAL_LEN} characters"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_hosts_take_one_form_and_anything_else_is_refused() {
        for (given, host) in [
            ("docker.io", "docker.io"),
            ("index.docker.io", "docker.io"),
            ("Registry.Example.com", "registry.example.com"),
            ("127.0.0.1:5000", "127.0.0.1:5000"),
            ("localhost:5000", "localhost:5000"),
            ("[::1]:5000", "[::1]:5000"),
            ("ghcr.io", "ghcr.io"),
        ] {
            assert_eq!(check_registry_host(given).as_deref(), Ok(host), "{given}");
        }
        for bad in [
            "",
            "https://r.io",
            "r.io/team",
            "r.io:0",
            "r.io:70000",
            "r.io:x",
            "-r.io",
            "r..io",
            "r io",
            "::1",
            "[::1",
            "[nope]:5",
            "a\u{0}b",
        ] {
            assert!(
                check_registry_host(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn an_image_names_the_registry_its_credentials_are_under() {
        assert_eq!(registry_of_image("busybox").as_deref(), Some("docker.io"));
        assert_eq!(
            registry_of_image("127.0.0.1:5000/team/x:1").as_deref(),
            Some("127.0.0.1:5000")
        );
        assert_eq!(
            registry_of_image("index.docker.io/library/x").as_deref(),
            Some("docker.io")
        );
        assert_eq!(registry_of_image("a b"), None);
    }

    #[test]
    fn empty_credentials_are_refused_naming_the_field() {
        let login = |u: &str, p: &str| RegistryLogin {
            username: u.into(),
            password: p.into(),
        };
        assert_eq!(check_login(&login("", "pw")).unwrap_err().0, "username");
        assert_eq!(check_login(&login(" ", "pw")).unwrap_err().0, "username");
        assert_eq!(check_login(&login("u", "")).unwrap_err().0, "password");
        assert!(check_login(&login("u", "pw")).is_ok());
        let shown = format!("{:?}", login("u", "hunter2-secret"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
