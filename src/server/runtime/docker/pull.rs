//! Pulling images and reading what the node has (`docker pull`, `docker image inspect`), with
//! bollard's types and dockerd's error words turned into ours here.

use std::collections::HashMap;

use bollard::auth::DockerCredentials;
use bollard::errors::Error as BollardError;
use bollard::models::CreateImageInfo;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::convert::map_err;
use super::Docker;
use crate::model::{image_ref, Secret};
use crate::server::runtime::RuntimeError;

/// How far a pull has come, summed over its layers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PullProgress {
    /// Bytes fetched.
    pub bytes_done: i64,
    /// Bytes to fetch in all, over the layers whose size the registry said so far.
    pub bytes_total: Option<i64>,
    /// Layers the image has, as far as dockerd said.
    pub layers: u32,
    /// Layers on the node already.
    pub layers_done: u32,
}

/// Why a pull did not bring the image, in the cases the puller treats differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    /// The registry has no such repository or tag.
    #[error("not found in its registry: {0}")]
    NotFound(String),
    /// The registry refused (credentials missing or wrong, access denied).
    #[error("the registry refused access: {0}")]
    Unauthorized(String),
    /// The registry (or dockerd) could not be reached: worth trying again later.
    #[error("registry unreachable: {0}")]
    Unreachable(String),
    /// Anything else dockerd refused (a malformed reference, a full disk): not tried again.
    #[error("{0}")]
    Refused(String),
}

/// The credentials a pull hands its registry (through dockerd's `X-Registry-Auth`, never written
/// anywhere). `Debug` shows the password as `<redacted>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullAuth {
    /// The registry host (`docker.io` for Docker Hub).
    pub server: String,
    /// The account.
    pub username: String,
    /// Its password or token.
    pub password: Secret,
}

impl PullAuth {
    fn credentials(&self) -> DockerCredentials {
        // dockerd keys Docker Hub's credentials by its v1 index address.
        let server = match self.server.as_str() {
            image_ref::DEFAULT_REGISTRY => "https://index.docker.io/v1/".to_owned(),
            other => other.to_owned(),
        };
        DockerCredentials {
            username: Some(self.username.clone()),
            password: Some(self.password.expose().to_owned()),
            serveraddress: Some(server),
            ..Default::default()
        }
    }
}

/// An image the node has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    /// `repo@sha256:…` of the reference's own repository when dockerd knows one (the image came
    /// from a registry), else the image id (`sha256:…`) of a local image.
    pub digest: String,
    /// The folders the image declares as `VOLUME`, sorted.
    pub volumes: Vec<String>,
}

impl Docker {
    /// What the node has under `reference`, or `None` when it has nothing.
    pub async fn local_image(&self, reference: &str) -> Result<Option<LocalImage>, RuntimeError> {
        let found = match self.inner.inspect_image(reference).await.map_err(map_err) {
            Ok(found) => found,
            Err(RuntimeError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut volumes = found
            .config
            .as_ref()
            .and_then(|c| c.volumes.clone())
            .unwrap_or_default();
        volumes.sort();
        let digests = found.repo_digests.unwrap_or_default();
        let digest = pick_digest(reference, &digests)
            .or(found.id)
            .ok_or_else(|| RuntimeError::Docker(format!("image {reference} has no id")))?;
        Ok(Some(LocalImage { digest, volumes }))
    }

    /// Pulls `reference` (a full reference), with `auth` when its registry has credentials,
    /// telling `progress` how far it has come after every message of dockerd's. Returns once the
    /// image is on the node, or why it is not.
    pub async fn pull(
        &self,
        reference: &str,
        progress: &watch::Sender<PullProgress>,
        auth: Option<&PullAuth>,
    ) -> Result<(), PullError> {
        let options = CreateImageOptionsBuilder::new()
            .from_image(reference)
            .build();
        let credentials = auth.map(PullAuth::credentials);
        let mut stream = self.inner.create_image(Some(options), None, credentials);
        let mut layers = Layers::default();
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if layers.take(&info) {
                        progress.send_replace(layers.progress());
                    }
                }
                Err(e) => return Err(classify(e)),
            }
        }
        Ok(())
    }
}

/// The digest of `reference`'s repository among dockerd's `RepoDigests` (which name Docker Hub
/// images in their short form). `None` when none is of its repository: a digest of another
/// repository (the same image pushed elsewhere) says nothing about where `reference` came from,
/// and the caller records the image id instead.
fn pick_digest(reference: &str, digests: &[String]) -> Option<String> {
    let want = image_ref::normalise(reference).ok()?;
    let repository = image_ref::repository_of(&want).to_owned();
    let full: Vec<String> = digests
        .iter()
        .filter_map(|d| image_ref::normalise(d).ok())
        .collect();
    full.into_iter()
        .find(|d| image_ref::repository_of(d) == repository)
}

/// Per-layer sizes, from dockerd's progress messages.
#[derive(Default)]
struct Layers {
    /// Layer id → (bytes fetched, size if said, done).
    by_id: HashMap<String, (i64, Option<i64>, bool)>,
}

impl Layers {
    /// Takes one message; whether it changed anything.
    fn take(&mut self, info: &CreateImageInfo) -> bool {
        let (Some(id), Some(status)) = (&info.id, &info.status) else {
            return false;
        };
        // The first message names the tag, not a layer.
        if status.starts_with("Pulling from") {
            return false;
        }
        let entry = self.by_id.entry(id.clone()).or_insert((0, None, false));
        let detail = info.progress_detail.as_ref();
        match status.as_str() {
            "Downloading" => {
                if let Some(d) = detail {
                    entry.0 = d.current.unwrap_or(entry.0);
                    entry.1 = d.total.filter(|t| *t > 0).or(entry.1);
                }
            }
            "Download complete" | "Verifying Checksum" | "Extracting" => {
                if let Some(total) = entry.1 {
                    entry.0 = total;
                }
            }
            "Pull complete" | "Already exists" => {
                if let Some(total) = entry.1 {
                    entry.0 = total;
                }
                entry.2 = true;
            }
            _ => {}
        }
        true
    }

    fn progress(&self) -> PullProgress {
        let sizes: Vec<i64> = self.by_id.values().filter_map(|l| l.1).collect();
        PullProgress {
            bytes_done: self.by_id.values().map(|l| l.0).sum(),
            bytes_total: (!sizes.is_empty()).then(|| sizes.iter().sum()),
            layers: self.by_id.len() as u32,
            layers_done: self.by_id.values().filter(|l| l.2).count() as u32,
        }
    }
}

/// Sorts dockerd's answer to a pull by what the puller does next. dockerd says the registry's
/// words in its message (its status is 404 for an unknown tag or repository, 500 for most else),
/// so the words decide, the status only where they say nothing.
fn classify(e: BollardError) -> PullError {
    let (status, message) = match e {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => (Some(status_code), message),
        BollardError::DockerStreamError { error } => (None, error),
        other => {
            return match map_err(other) {
                RuntimeError::Unreachable(m) => PullError::Unreachable(format!("Docker: {m}")),
                other => PullError::Refused(other.to_string()),
            }
        }
    };
    let words = message.to_lowercase();
    if [
        "unauthorized",
        "authentication required",
        // dockerd's words for a registry that asked for credentials when it was sent none.
        "no basic auth credentials",
        "denied",
        "forbidden",
    ]
    .iter()
    .any(|w| words.contains(w))
    {
        PullError::Unauthorized(message)
    } else if words.contains("manifest unknown")
        || words.contains("not found")
        || words.contains("name unknown")
        || status == Some(404)
    {
        PullError::NotFound(message)
    } else if status == Some(400) || words.contains("no space left") {
        PullError::Refused(message)
    } else {
        PullError::Unreachable(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(status: u16, message: &str) -> BollardError {
        BollardError::DockerResponseServerError {
            status_code: status,
            message: message.into(),
        }
    }

    #[test]
    fn dockerd_words_sort_pull_failures() {
        let nf = "manifest for 127.0.0.1:5000/x:nope not found: manifest unknown: manifest unknown";
        assert!(matches!(classify(err(404, nf)), PullError::NotFound(_)));
        let refused = "Get \"http://127.0.0.1:5999/v2/\": dial tcp 127.0.0.1:5999: connect: connection refused";
        assert!(matches!(
            classify(err(500, refused)),
            PullError::Unreachable(_)
        ));
        let auth = "Head \"http://r/v2/x/manifests/1\": no basic auth credentials: unauthorized";
        assert!(matches!(
            classify(err(500, auth)),
            PullError::Unauthorized(_)
        ));
        let asked = "Head \"http://127.0.0.1:40459/v2/x/manifests/t1\": no basic auth credentials";
        assert!(matches!(
            classify(err(500, asked)),
            PullError::Unauthorized(_)
        ));
        let bad = "invalid reference format";
        assert!(matches!(classify(err(400, bad)), PullError::Refused(_)));
    }

    #[test]
    fn the_digest_of_the_references_repository_is_chosen() {
        let digests = vec![
            "other/x@sha256:aaa".to_string(),
            "127.0.0.1:5000/gpuq-test/busybox@sha256:bbb".to_string(),
        ];
        assert_eq!(
            pick_digest("127.0.0.1:5000/gpuq-test/busybox:t1", &digests).as_deref(),
            Some("127.0.0.1:5000/gpuq-test/busybox@sha256:bbb")
        );
        assert_eq!(
            pick_digest("busybox", &["busybox@sha256:ccc".into()]).as_deref(),
            Some("docker.io/library/busybox@sha256:ccc")
        );
        assert_eq!(pick_digest("x", &[]), None);
        // A local image also pushed to some registry: that registry's digest is not its own.
        assert_eq!(pick_digest("gpuq-test/busybox:latest", &digests[1..]), None);
    }

    #[test]
    fn progress_sums_the_layers() {
        let msg = |id: &str, status: &str, cur: Option<i64>, total: Option<i64>| CreateImageInfo {
            id: Some(id.into()),
            status: Some(status.into()),
            progress_detail: Some(bollard::models::ProgressDetail {
                current: cur,
                total,
            }),
            ..Default::default()
        };
        let mut l = Layers::default();
        assert!(!l.take(&msg("t1", "Pulling from gpuq-test/busybox", None, None)));
        l.take(&msg("a", "Pulling fs layer", None, None));
        l.take(&msg("b", "Already exists", None, None));
        l.take(&msg("a", "Downloading", Some(100), Some(1000)));
        let p = l.progress();
        assert_eq!(
            (p.bytes_done, p.bytes_total, p.layers, p.layers_done),
            (100, Some(1000), 2, 1)
        );
        l.take(&msg("a", "Pull complete", None, None));
        let p = l.progress();
        assert_eq!((p.bytes_done, p.layers_done), (1000, 2));
    }
}
