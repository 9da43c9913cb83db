//! Image references: `[registry[:port]/]path[:tag][@sha256:hex]`.
//!
//! Checked up front so a typo is reported at submission rather than as a
//! pull failure minutes later, and so nothing odd (whitespace, option-like
//! strings) ever reaches the container engine's command line.

use super::SpecError;

const MAX_IMAGE_LEN: usize = 255;
const MAX_TAG_LEN: usize = 128;
const MAX_NAME_CHARS: usize = 128;

fn refuse(message: impl Into<String>) -> SpecError {
    SpecError::new("image", message)
}

/// Checks `image` and returns the default job name derived from it (the
/// last path component, without registry, tag or digest).
pub(super) fn parse_image(image: &str) -> Result<String, SpecError> {
    if image.is_empty() {
        return Err(refuse("image must not be empty"));
    }
    if image.len() > MAX_IMAGE_LEN {
        return Err(refuse(format!(
            "image must be at most {MAX_IMAGE_LEN} characters"
        )));
    }
    if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse(
            "image must not contain spaces, line breaks or control characters",
        ));
    }
    let name_and_tag = match image.split_once('@') {
        None => image,
        Some((rest, digest)) => {
            check_digest(digest)?;
            rest
        }
    };
    // A ':' after the last '/' starts the tag; one before it is a port.
    let (name, tag) = match name_and_tag.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
        _ => (name_and_tag, None),
    };
    if let Some(tag) = tag {
        check_tag(tag)?;
    }
    let path = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
            check_registry(first)?;
            rest
        }
        _ => name,
    };
    let mut last = "";
    for component in path.split('/') {
        check_component(component)?;
        last = component;
    }
    Ok(last.chars().take(MAX_NAME_CHARS).collect())
}

fn check_digest(digest: &str) -> Result<(), SpecError> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(refuse(
            "image digest must be @sha256: followed by 64 lowercase hex characters",
        ))
    }
}

fn check_tag(tag: &str) -> Result<(), SpecError> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    let ok = bytes.first().is_some_and(|b| word(*b))
        && bytes.len() <= MAX_TAG_LEN
        && bytes.iter().all(|b| word(*b) || *b == b'.' || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(refuse(format!(
            "image tag `{tag}` must be 1 to {MAX_TAG_LEN} characters of letters, digits, '_', '.' \
             or '-', not starting with '.' or '-'"
        )))
    }
}

fn check_registry(registry: &str) -> Result<(), SpecError> {
    let (host, port) = match registry.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    let label_ok = |label: &str| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let port_ok = port.is_none_or(|p| {
        (1..=5).contains(&p.len())
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u16>().is_ok_and(|n| n > 0)
    });
    if host.split('.').all(label_ok) && port_ok {
        Ok(())
    } else {
        Err(refuse(format!(
            "image registry `{registry}` must be a host name, optionally with :port"
        )))
    }
}

fn check_component(component: &str) -> Result<(), SpecError> {
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    if bytes.iter().any(u8::is_ascii_uppercase) {
        return Err(refuse(format!(
            "image path `{component}` must be lowercase"
        )));
    }
    let ok = bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || b"._-".contains(b));
    if ok {
        Ok(())
    } else {
        Err(refuse(format!(
            "image path component `{component}` must use only a-z, 0-9, '.', '_' and '-', \
             start and end with a letter or digit, and be separated by single '/'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn accepts_plausible_references_and_derives_names() {
        let digest = format!("app@sha256:{HEX}");
        let full = format!("registry.example.com:5000/team/sub/app:v1.2-rc_3@sha256:{HEX}");
        let long_tag = format!("app:{}", "t".repeat(128));
        let cases: &[(&str, &str)] = &[
            ("ubuntu", "ubuntu"),
            ("ubuntu:22.04", "ubuntu"),
            ("pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", "pytorch"),
            ("nvcr.io/nvidia/pytorch:24.05-py3", "pytorch"),
            ("localhost/app", "app"),
            ("localhost:5000/app:latest", "app"),
            ("localhost:5000", "localhost"),
            ("Registry.Example.com/a_b.c-d", "a_b.c-d"),
            ("ghcr.io/org/my-app:Tag_1", "my-app"),
            (&digest, "app"),
            (&full, "app"),
            (&long_tag, "app"),
        ];
        for (image, name) in cases {
            assert_eq!(parse_image(image).as_deref(), Ok(*name), "image {image}");
        }
    }

    #[test]
    fn default_name_is_capped() {
        let image = "a".repeat(200);
        assert_eq!(parse_image(&image).map(|n| n.len()), Ok(128));
    }

    #[test]
    fn refusals() {
        let too_long = "a".repeat(256);
        let tag_too_long = format!("app:{}", "t".repeat(129));
        let short_digest = format!("app@sha256:{}", &HEX[1..]);
        let upper_digest = format!("app@sha256:{}", HEX.to_uppercase());
        let cases: &[(&str, &str)] = &[
            ("", "must not be empty"),
            (&too_long, "at most 255"),
            ("ubuntu latest", "must not contain spaces"),
            ("ubuntu\n", "must not contain spaces"),
            ("ubuntu\t:x", "must not contain spaces"),
            ("Ubuntu", "must be lowercase"),
            ("org/MyApp:1", "must be lowercase"),
            ("app:", "image tag"),
            ("app:.hidden", "image tag"),
            ("app:-x", "image tag"),
            ("app:v1+2", "image tag"),
            (&tag_too_long, "image tag"),
            ("app@sha256:abc", "digest"),
            ("app@md5:abc", "digest"),
            (&short_digest, "digest"),
            (&upper_digest, "digest"),
            ("app@", "digest"),
            ("a//b", "path component"),
            ("/app", "path component"),
            ("app/", "path component"),
            ("org/../app", "path component"),
            ("./app", "registry"),
            ("-app", "path component"),
            ("app_", "path component"),
            ("a$b", "path component"),
            ("--privileged", "path component"),
            ("reg.io:abc/app", "registry"),
            ("reg.io:99999/app", "registry"),
            ("reg.io:0/app", "registry"),
            ("reg..io/app", "registry"),
            ("-reg.io/app", "registry"),
            ("reg_x.io/app", "registry"),
            ("localhost:5000/", "path component"),
        ];
        for (image, needle) in cases {
            match parse_image(image) {
                Ok(name) => panic!("accepted {image:?} as {name:?}"),
                Err(e) => {
                    assert_eq!(e.field, "image");
                    assert!(e.message.contains(needle), "{image:?}: {}", e.message);
                }
            }
        }
    }
}
