//! Image references in their one full form, so that the allowlist judges what Docker will really
//! fetch: `busybox` is `docker.io/library/busybox:latest`, and `evil.example/gpuq-test/x` is on
//! `evil.example`, whatever its path looks like.
//!
//! The rules are Docker's own (`reference.ParseNormalizedNamed`): the first path component is a
//! registry host when it holds a `.` or a `:` or is `localhost`; otherwise the image is on Docker
//! Hub (`docker.io`), where a one-component name lives under `library/`; a reference without a
//! tag or digest means `:latest`.

/// Docker Hub, as a full reference names it.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// The full form of an image reference: `registry/repository:tag` or `registry/repository@digest`
/// (a reference with both keeps both). Refuses what Docker could not parse either, naming why.
pub fn normalise(reference: &str) -> Result<String, String> {
    if reference.is_empty() {
        return Err("an image reference must not be empty".into());
    }
    if reference
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "image {reference:?} holds spaces or control characters"
        ));
    }
    if reference.contains("://") {
        return Err(format!(
            "image {reference:?}: name a registry by its host, without a scheme"
        ));
    }
    let (name, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    if let Some(d) = digest {
        let valid = d
            .split_once(':')
            .is_some_and(|(alg, hex)| !alg.is_empty() && !hex.is_empty() && !hex.contains(':'));
        if !valid {
            return Err(format!("image {reference:?}: a digest is `algorithm:hex`"));
        }
    }
    // The tag is after the last `:` of the last path component (a registry's port is not a tag).
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (path, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    if tag == Some("") {
        return Err(format!("image {reference:?} has an empty tag"));
    }
    let (registry, repository) = split_registry(path);
    if repository.is_empty() || repository.split('/').any(str::is_empty) {
        return Err(format!("image {reference:?} has an empty path component"));
    }
    let mut full = format!("{registry}/{repository}");
    match (tag, digest) {
        (Some(t), _) => {
            full.push(':');
            full.push_str(t);
        }
        (None, None) => full.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(d) = digest {
        full.push('@');
        full.push_str(d);
    }
    Ok(full)
}

/// The full form of an allowlist pattern, by the same rules as [`normalise`], so a pattern and a
/// reference are compared in one form:
///
/// - `*` alone matches every reference, on every registry;
/// - a pattern whose first component names a registry (a `.`, a `:` or `localhost`, as in
///   `registry.local/*` or `127.0.0.1:*/team/*`) is kept as written;
/// - a pattern whose first component holds a `*` but names no registry (`*/x`) is kept as
///   written, so it may match across registries: its author wrote a wildcard there;
/// - any other pattern is on Docker Hub: `gpuq-test/*` means `docker.io/gpuq-test/*`, and a
///   one-component `busybox` means `docker.io/library/busybox`;
/// - a pattern without a `*` whose last component has no tag or digest means `:latest`, as the
///   reference it names does (`busybox` allows `busybox:latest` and not `busybox:1`).
pub fn normalise_pattern(pattern: &str) -> String {
    if pattern == "*" {
        return pattern.to_owned();
    }
    let first = pattern.split('/').next().unwrap_or_default();
    let mut full = if pattern.contains('/') && is_registry(first) {
        pattern.to_owned()
    } else if first.contains('*') && pattern.contains('/') {
        return pattern.to_owned();
    } else if pattern.contains('/') {
        format!("{DEFAULT_REGISTRY}/{pattern}")
    } else {
        format!("{DEFAULT_REGISTRY}/library/{pattern}")
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if !full.contains('*') && !last.contains(':') && !last.contains('@') {
        full.push_str(":latest");
    }
    full
}

/// Whether the reference matches the pattern, both in their full forms; a reference that does not
/// parse matches nothing.
pub fn allowed_by(pattern: &str, reference: &str) -> bool {
    match normalise(reference) {
        Ok(full) => super::policy::glob_match(&normalise_pattern(pattern), &full),
        Err(_) => false,
    }
}

/// The repository of a full reference, without its tag or digest (`docker.io/library/busybox`):
/// what Docker's `RepoDigests` entries name before their `@`.
pub fn repository_of(full: &str) -> &str {
    let name = full.split_once('@').map_or(full, |(n, _)| n);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    match name[last_slash..].rfind(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    }
}

fn is_registry(component: &str) -> bool {
    component.contains('.') || component.contains(':') || component == "localhost"
}

fn split_registry(path: &str) -> (&str, String) {
    match path.split_once('/') {
        Some((first, rest)) if is_registry(first) => {
            let host = if first == "index.docker.io" {
                DEFAULT_REGISTRY
            } else {
                first
            };
            (host, rest.to_owned())
        }
        Some(_) => (DEFAULT_REGISTRY, path.to_owned()),
        None => (DEFAULT_REGISTRY, format!("library/{path}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_take_their_full_form() {
        for (given, full) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            (
                "docker.io/library/busybox",
                "docker.io/library/busybox:latest",
            ),
            (
                "index.docker.io/library/busybox",
                "docker.io/library/busybox:latest",
            ),
            (
                "gpuq-test/busybox:latest",
                "docker.io/gpuq-test/busybox:latest",
            ),
            (
                "pytorch/pytorch:2.4.0-cuda12.4",
                "docker.io/pytorch/pytorch:2.4.0-cuda12.4",
            ),
            ("127.0.0.1:5000/team/x", "127.0.0.1:5000/team/x:latest"),
            ("localhost/x:1", "localhost/x:1"),
            ("registry.local/a/b/c:2", "registry.local/a/b/c:2"),
            (
                "evil.example/gpuq-test/x",
                "evil.example/gpuq-test/x:latest",
            ),
            ("busybox@sha256:abc", "docker.io/library/busybox@sha256:abc"),
            ("r.io/x:1@sha256:abc", "r.io/x:1@sha256:abc"),
        ] {
            assert_eq!(normalise(given).as_deref(), Ok(full), "{given}");
        }
        for bad in [
            "",
            "a b",
            "x:",
            "https://r.io/x",
            "a//b",
            "x@sha256",
            "/x",
            "r.io/",
        ] {
            assert!(normalise(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn patterns_take_the_same_form() {
        for (given, full) in [
            ("*", "*"),
            ("busybox", "docker.io/library/busybox:latest"),
            ("gpuq-test/*", "docker.io/gpuq-test/*"),
            ("pytorch/*:2.*", "docker.io/pytorch/*:2.*"),
            ("registry.local/*", "registry.local/*"),
            ("127.0.0.1:*/gpuq-test/*", "127.0.0.1:*/gpuq-test/*"),
            ("*/gpuq-test/*", "*/gpuq-test/*"),
            (
                "docker.io/library/busybox",
                "docker.io/library/busybox:latest",
            ),
            ("nvidia/cuda:12", "docker.io/nvidia/cuda:12"),
        ] {
            assert_eq!(normalise_pattern(given), full, "{given}");
        }
    }

    #[test]
    fn the_allowlist_judges_the_full_reference() {
        assert!(allowed_by("busybox", "docker.io/library/busybox:latest"));
        assert!(allowed_by("docker.io/library/busybox", "busybox"));
        assert!(!allowed_by("busybox", "busybox:1"));
        assert!(allowed_by("gpuq-test/*", "gpuq-test/busybox:latest"));
        assert!(!allowed_by("gpuq-test/*", "docker.io/library/busybox"));
        assert!(!allowed_by("gpuq-test/*", "evil.example/gpuq-test/x"));
        assert!(!allowed_by("gpuq-test/*", "127.0.0.1:5000/gpuq-test/x"));
        assert!(allowed_by(
            "127.0.0.1:*/gpuq-test/*",
            "127.0.0.1:5000/gpuq-test/x:1"
        ));
        assert!(!allowed_by(
            "registry.local/*",
            "registry.local.evil.example/x"
        ));
        assert!(allowed_by("*", "anything.example/x:1"));
        assert!(!allowed_by("*", "not a reference"));
    }

    #[test]
    fn repositories_drop_tag_and_digest() {
        assert_eq!(repository_of("127.0.0.1:5000/a/b:1"), "127.0.0.1:5000/a/b");
        assert_eq!(
            repository_of("docker.io/library/x@sha256:1"),
            "docker.io/library/x"
        );
        assert_eq!(
            repository_of("docker.io/library/x:1@sha256:1"),
            "docker.io/library/x"
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn component() -> impl Strategy<Value = String> {
            "[a-z0-9]{1,8}"
        }

        proptest! {
            #[test]
            fn normalising_is_idempotent(
                host in proptest::option::of("[a-z]{1,6}\\.[a-z]{2,3}(:[0-9]{2,5})?"),
                path in proptest::collection::vec(component(), 1..4),
                tag in proptest::option::of("[a-z0-9._-]{1,10}"),
            ) {
                let mut r = host.map(|h| format!("{h}/")).unwrap_or_default();
                r.push_str(&path.join("/"));
                if let Some(t) = tag { r.push(':'); r.push_str(&t); }
                let full = normalise(&r).unwrap();
                prop_assert_eq!(normalise(&full).unwrap(), full.clone());
                // A full reference names its registry first, and the pattern of itself admits it.
                prop_assert!(full.split('/').next().is_some_and(is_registry));
                prop_assert!(allowed_by(&r, &r));
                prop_assert!(allowed_by(&full, &r));
            }

            #[test]
            fn a_hub_pattern_never_admits_another_registry(
                host in "[a-z]{1,6}\\.[a-z]{2,3}",
                path in proptest::collection::vec(component(), 1..3),
            ) {
                prop_assume!(host != "docker.io");
                let r = format!("{host}/{}", path.join("/"));
                let hub_pattern = format!("{}/*", path[0]);
                prop_assert!(!allowed_by(&hub_pattern, &r));
                prop_assert!(!allowed_by(&path.join("/"), &r));
            }
        }
    }
}
