//! The only module that talks to dockerd. Every bollard value is converted to
//! our own types here, so the rest of gpuq never depends on bollard's API.

mod convert;
mod daemon;
pub mod images;
mod parts;
pub mod pull;

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::{
    CreateContainerOptionsBuilder, EventsOptionsBuilder, InspectContainerOptions,
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, StartContainerOptions, StopContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures_util::stream::{self, Stream, StreamExt};

use super::fence::{container_config, verify};
use super::{
    ContainerFacts, LaunchMode, LaunchRequest, LogLine, ManagedContainer, RuntimeError, ICC_OPTION,
    JOB_NETWORK, LABEL_JOB_ID, LABEL_MANAGED, LABEL_NODE,
};
use crate::model::JobNetwork;
use convert::{facts, log_lines, managed, map_err};

/// Seconds allowed for dockerd's response headers on ordinary calls. Long
/// calls (wait, follow logs) are unaffected: dockerd sends their headers at
/// once and bollard only times the headers.
const REQUEST_TIMEOUT_S: u64 = 120;

/// A connection to one dockerd, already negotiated down to the daemon's API
/// version (bollard defaults to a newer API than older daemons accept).
#[derive(Clone, Debug)]
pub struct Docker {
    inner: bollard::Docker,
    /// The unix socket dockerd answers on, when it is one: where its start time is read.
    socket: Option<std::path::PathBuf>,
    /// The id of gpuq's job network once [`Docker::ensure_job_network`] has checked it, shared by
    /// every clone: a network's driver and options never change, so one check per network is
    /// enough. Forgotten when dockerd says it is gone; the next launch looks it up anew.
    job_network: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

/// Held while gpuq's job network is looked up or created, so this process never creates it twice
/// (dockerd before API 1.44 accepts two networks of one name, and then neither can be used by
/// name).
static NET_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Docker {
    /// Connects to the local default socket (`DOCKER_HOST` if it is a
    /// `unix://` URL, else `/var/run/docker.sock`); fails with `Unreachable`
    /// if dockerd is down, so a node never admits jobs it cannot launch.
    pub async fn connect() -> Result<Self, RuntimeError> {
        let inner = bollard::Docker::connect_with_local_defaults()
            .map_err(|e| RuntimeError::Unreachable(convert::chain(&e)))?;
        // As bollard chooses: DOCKER_HOST when set (a unix socket only if it says `unix://`).
        let socket = match std::env::var("DOCKER_HOST") {
            Ok(host) => host.strip_prefix("unix://").map(std::path::PathBuf::from),
            Err(_) => Some("/var/run/docker.sock".into()),
        };
        Self::negotiate(inner, socket).await
    }

    /// Like [`Docker::connect`] but for a given unix socket path, for nodes
    /// whose dockerd listens elsewhere.
    pub async fn connect_socket(path: &str) -> Result<Self, RuntimeError> {
        let inner = bollard::Docker::connect_with_socket(
            path,
            REQUEST_TIMEOUT_S,
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| RuntimeError::Unreachable(convert::chain(&e)))?;
        Self::negotiate(inner, Some(path.into())).await
    }

    /// [`Docker::connect_socket`] for `Some` socket path, [`Docker::connect`] for `None`.
    pub async fn connect_to(socket: Option<&str>) -> Result<Self, RuntimeError> {
        match socket {
            Some(path) => Self::connect_socket(path).await,
            None => Self::connect().await,
        }
    }

    async fn negotiate(
        inner: bollard::Docker,
        socket: Option<std::path::PathBuf>,
    ) -> Result<Self, RuntimeError> {
        let inner = inner
            .negotiate_version()
            .await
            .map_err(|e| RuntimeError::Unreachable(convert::chain(&e)))?;
        Ok(Self {
            inner,
            socket,
            job_network: Default::default(),
        })
    }

    /// When the dockerd behind this connection started, if the host can tell (see
    /// `docker/daemon.rs`): a container that started before it and was killed around then was
    /// killed by the daemon's restart. `None` for a TCP connection or when the host does not say;
    /// `Unreachable` when its socket takes no connection (the daemon is down or going down).
    pub async fn daemon_started_at(
        &self,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, RuntimeError> {
        let Some(socket) = self.socket.clone() else {
            return Ok(None);
        };
        let at = tokio::task::spawn_blocking(move || daemon::started_at(&socket))
            .await
            .map_err(|e| RuntimeError::Docker(format!("reading dockerd's start: {e}")))?;
        at.map_err(|e| RuntimeError::Unreachable(format!("dockerd's socket: {e}")))
    }

    /// Health check; any failure means the daemon cannot be used right now.
    pub async fn ping(&self) -> Result<(), RuntimeError> {
        self.inner
            .ping()
            .await
            .map(|_| ())
            .map_err(|e| RuntimeError::Unreachable(convert::chain(&e)))
    }

    /// What the daemon says about itself (`docker info` and `docker version`), for `gpuq doctor`.
    pub async fn host_facts(&self) -> Result<DockerHostFacts, RuntimeError> {
        let info = self.inner.info().await.map_err(map_err)?;
        let api_version = self
            .inner
            .version()
            .await
            .map_err(map_err)?
            .api_version
            .unwrap_or_default();
        let mut runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
        runtimes.sort();
        Ok(DockerHostFacts {
            server_version: info.server_version.unwrap_or_default(),
            api_version,
            cgroup_driver: info.cgroup_driver.map(|d| d.to_string()),
            cgroup_version: info.cgroup_version.map(|v| v.to_string()),
            root_dir: info.docker_root_dir,
            live_restore: info.live_restore_enabled.unwrap_or(false),
            userns_remap: info
                .security_options
                .unwrap_or_default()
                .iter()
                .any(|o| o.split(',').any(|kv| kv == "name=userns")),
            runtimes,
            cdi_spec_dirs: info.cdi_spec_dirs.unwrap_or_default(),
        })
    }

    /// Docker's own data folder (`DockerRootDir`, often moved off `/var/lib/docker`): no job may
    /// mount it, its volumes and image layers are in it.
    pub async fn data_root(&self) -> Result<Option<std::path::PathBuf>, RuntimeError> {
        let info = self.inner.info().await.map_err(map_err)?;
        Ok(info.docker_root_dir.map(std::path::PathBuf::from))
    }

    /// The folders `image` declares as `VOLUME`, sorted (`None`: the image is not here).
    pub async fn image_volumes(&self, image: &str) -> Result<Option<Vec<String>>, RuntimeError> {
        match self.inner.inspect_image(image).await.map_err(map_err) {
            Ok(found) => {
                let mut dirs = found.config.and_then(|c| c.volumes).unwrap_or_default();
                dirs.sort();
                Ok(Some(dirs))
            }
            Err(RuntimeError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `image` is present locally (pulls are `Docker::pull`, never a side effect).
    pub async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError> {
        match self.inner.inspect_image(image).await.map_err(map_err) {
            Ok(_) => Ok(true),
            Err(RuntimeError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Creates (does not start) the container `gpuq-<job_id>-<attempt>`. In
    /// `Fenced` mode the created container is inspected and verified against
    /// the request, and removed again if dockerd recorded anything else.
    ///
    /// A missing image is [`RuntimeError::ImageMissing`] (dockerd's own answer: a create never
    /// pulls, so no separate look first); a job network removed since it was looked up is
    /// [`RuntimeError::NetworkGone`].
    pub async fn create(
        &self,
        req: &LaunchRequest,
        mode: LaunchMode,
    ) -> Result<String, RuntimeError> {
        let mut body = container_config(req, mode)?;
        // By id: should two processes have created the network at once, both pick the same one.
        let network = match req.network {
            JobNetwork::Isolated => Some(self.ensure_job_network().await?),
            JobNetwork::None => None,
        };
        if let (Some(id), Some(hc)) = (&network, body.host_config.as_mut()) {
            hc.network_mode = Some(id.clone());
        }
        let name = container_name(req);
        let id = self.create_named(&name, &req.image, body).await?;
        tracing::info!(container = %id, %name, ?mode, "created gpuq container");
        if mode == LaunchMode::Fenced {
            let checked = match self.inspect(&id).await {
                Ok(f) => verify(&f, req).and_then(|()| match &network {
                    Some(net) if &f.network_mode != net => {
                        Err(RuntimeError::FenceViolation(format!(
                            "container {id}: network differs: granted {net}, container has {}",
                            f.network_mode
                        )))
                    }
                    _ => Ok(()),
                }),
                Err(e) => Err(e),
            };
            if let Err(e) = checked {
                tracing::error!(container = %id, error = %e, "fence check failed; removing");
                if let Err(rm) = self.remove(&id).await {
                    tracing::error!(container = %id, error = %rm, "removal failed");
                }
                return Err(e);
            }
        }
        Ok(id)
    }

    /// Creates the container `name` from `body`; dockerd's 404 says whether the image or the
    /// network is missing.
    async fn create_named(
        &self,
        name: &str,
        image: &str,
        body: bollard::models::ContainerCreateBody,
    ) -> Result<String, RuntimeError> {
        let options = CreateContainerOptionsBuilder::new().name(name).build();
        match self.inner.create_container(Some(options), body).await {
            Ok(resp) => Ok(resp.id),
            Err(e) => Err(match map_err(e) {
                RuntimeError::NotFound(m) if is_network_gone(&m) => self.network_gone(m),
                RuntimeError::NotFound(_) => RuntimeError::ImageMissing(image.to_owned()),
                other => other,
            }),
        }
    }

    /// Forgets the job network's id after dockerd said `message` (the network is gone), so the
    /// next launch looks it up or creates it again.
    fn network_gone(&self, message: String) -> RuntimeError {
        if let Ok(mut known) = self.job_network.lock() {
            *known = None;
        }
        RuntimeError::NetworkGone(message)
    }

    /// The id of gpuq's job network ([`JOB_NETWORK`]), created if missing as a bridge with traffic
    /// between its containers disabled. A network of that name that lets containers talk to each
    /// other (made by someone else) is refused, never used. Should several exist (two processes
    /// created it at once), every process keeps the lowest id and removes the others. Looked up
    /// once per connection: later calls answer the id checked then (see `job_network`).
    pub async fn ensure_job_network(&self) -> Result<String, RuntimeError> {
        if let Some(id) = self.known_job_network() {
            return Ok(id);
        }
        let _held = NET_LOCK.lock().await;
        if let Some(id) = self.known_job_network() {
            return Ok(id);
        }
        let id = self.look_up_job_network().await?;
        if let Ok(mut known) = self.job_network.lock() {
            *known = Some(id.clone());
        }
        Ok(id)
    }

    fn known_job_network(&self) -> Option<String> {
        self.job_network.lock().ok().and_then(|k| k.clone())
    }

    async fn look_up_job_network(&self) -> Result<String, RuntimeError> {
        let mut found = self.job_networks().await?;
        if found.is_empty() {
            let request = bollard::models::NetworkCreateRequest {
                name: JOB_NETWORK.to_string(),
                driver: Some("bridge".to_string()),
                options: Some(HashMap::from([(
                    ICC_OPTION.to_string(),
                    "false".to_string(),
                )])),
                labels: Some(HashMap::from([(
                    LABEL_MANAGED.to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            };
            match self.inner.create_network(request).await.map_err(map_err) {
                Ok(_) | Err(RuntimeError::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
            tracing::info!(network = JOB_NETWORK, "created the job network");
            found = self.job_networks().await?;
        }
        found.sort_by(|a, b| a.id.cmp(&b.id));
        let mut found = found.into_iter();
        let Some(net) = found.next() else {
            return Err(RuntimeError::Docker(format!(
                "network {JOB_NETWORK} was created but is not listed"
            )));
        };
        for extra in found.filter_map(|n| n.id) {
            tracing::warn!(network = %extra, "removing a duplicate of the job network");
            if let Err(e) = self.inner.remove_network(&extra).await {
                tracing::warn!(network = %extra, error = %e, "could not remove a duplicate job network");
            }
        }
        let icc = net
            .options
            .as_ref()
            .and_then(|o| o.get(ICC_OPTION))
            .map(String::as_str);
        if net.driver.as_deref() != Some("bridge") || icc != Some("false") {
            return Err(RuntimeError::FenceViolation(format!(
                "network {JOB_NETWORK} exists but is not a bridge with {ICC_OPTION}=false \
                 (driver {:?}, {ICC_OPTION} {icc:?}): jobs would reach each other; \
                 remove it and gpuq creates its own",
                net.driver
            )));
        }
        net.id
            .ok_or_else(|| RuntimeError::Docker(format!("network {JOB_NETWORK} has no id")))
    }

    /// The bridge interface of the job network on this host (its `bridge.name` option, else
    /// `br-` and the first 12 characters of its id, as dockerd names it), and whether it has
    /// IPv6; `None` while the network does not exist.
    pub async fn job_network_bridge(&self) -> Result<Option<(String, bool)>, RuntimeError> {
        let Some(net) = self
            .job_networks()
            .await?
            .into_iter()
            .min_by(|a, b| a.id.cmp(&b.id))
        else {
            return Ok(None);
        };
        let named = net
            .options
            .as_ref()
            .and_then(|o| o.get("com.docker.network.bridge.name"))
            .cloned();
        let id = net.id.unwrap_or_default();
        let bridge = named.unwrap_or_else(|| format!("br-{}", id.get(..12).unwrap_or(&id)));
        Ok(Some((bridge, net.enable_ipv6.unwrap_or(false))))
    }

    /// Networks named exactly [`JOB_NETWORK`] (dockerd's name filter matches substrings).
    async fn job_networks(&self) -> Result<Vec<bollard::models::Network>, RuntimeError> {
        let filters = HashMap::from([("name", vec![JOB_NETWORK])]);
        let options = ListNetworksOptionsBuilder::new().filters(&filters).build();
        let all = self
            .inner
            .list_networks(Some(options))
            .await
            .map_err(map_err)?;
        Ok(all
            .into_iter()
            .filter(|n| n.name.as_deref() == Some(JOB_NETWORK))
            .collect())
    }

    /// What dockerd recorded for the container, in our terms.
    pub async fn inspect(&self, id: &str) -> Result<ContainerFacts, RuntimeError> {
        let resp = self
            .inner
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .map_err(map_err)?;
        Ok(facts(resp))
    }

    /// The container's IPv4 address on its network (the job network), where gpuq's session proxy
    /// reaches it from the host; `None` when it has none (no network, not running).
    pub async fn container_ip(&self, id: &str) -> Result<Option<std::net::IpAddr>, RuntimeError> {
        Ok(self.inspect(id).await?.ip)
    }

    /// Starts a created container. [`RuntimeError::NetworkGone`] when its network was removed
    /// after the create (dockerd before 23 checks a network only at start).
    pub async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        let started = self
            .inner
            .start_container(id, None::<StartContainerOptions>)
            .await;
        started.map_err(|e| match map_err(e) {
            RuntimeError::NotFound(m) if is_network_gone(&m) => self.network_gone(m),
            other => other,
        })
    }

    /// Waits until the container is no longer running and returns its exit
    /// code; a non-zero exit is a result, not an error. Call after `start`:
    /// a never-started container counts as not running.
    pub async fn wait(&self, id: &str) -> Result<i64, RuntimeError> {
        let options = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let mut waits = self.inner.wait_container(id, Some(options));
        match waits.next().await {
            Some(Ok(resp)) => Ok(resp.status_code),
            // bollard reports non-zero exits as errors; undo that.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => Err(map_err(e)),
            None => Err(RuntimeError::Docker(format!(
                "wait on {id} ended without a status"
            ))),
        }
    }

    /// SIGTERM, then SIGKILL after `grace` (rounded up to whole seconds, as
    /// dockerd counts them). Stopping a stopped container is not an error.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let secs = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
        let t = i32::try_from(secs)
            .map_err(|_| RuntimeError::InvalidRequest(format!("grace {grace:?} too long")))?;
        let options = StopContainerOptionsBuilder::new().t(t).build();
        // The reply only comes after the kill, so allow for the grace period.
        let client = self
            .inner
            .clone()
            .with_timeout(Duration::from_secs(secs + REQUEST_TIMEOUT_S));
        // dockerd answers 304 for an already stopped container; bollard
        // counts that as success.
        client
            .stop_container(id, Some(options))
            .await
            .map_err(map_err)
    }

    /// Removes the container (forcibly, with its anonymous volumes).
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        self.inner
            .remove_container(id, Some(options))
            .await
            .map_err(map_err)
    }

    /// All gpuq-labelled containers, stopped ones included, optionally only
    /// those of one node: the input for reconciliation after a restart.
    /// Containers with unreadable labels are skipped with a warning.
    pub async fn list_managed(
        &self,
        node: Option<&str>,
    ) -> Result<Vec<ManagedContainer>, RuntimeError> {
        let mut labels = vec![format!("{LABEL_MANAGED}=true")];
        if let Some(node) = node {
            labels.push(format!("{LABEL_NODE}={node}"));
        }
        let filters = HashMap::from([("label".to_string(), labels)]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .inner
            .list_containers(Some(options))
            .await
            .map_err(map_err)?;
        Ok(list.into_iter().filter_map(managed).collect())
    }

    /// Log lines with dockerd's timestamps. To resume without duplicates, pass
    /// the whole second of the latest line seen as `since_unix` (docker's
    /// `since` is inclusive and per-second) and drop the lines of that second
    /// already kept; `at` is fixed-width, so string order is time order. The
    /// stream is not always in time order: stdout and stderr have separate
    /// copiers in dockerd. With `follow` the stream ends when the container
    /// stops.
    pub fn logs(
        &self,
        id: &str,
        since_unix: Option<i64>,
        follow: bool,
    ) -> impl Stream<Item = Result<LogLine, RuntimeError>> + Send + Unpin + 'static {
        let since = match i32::try_from(since_unix.unwrap_or(0)) {
            Ok(s) if s >= 0 => s,
            _ => {
                let e = RuntimeError::InvalidRequest(format!(
                    "since {since_unix:?} is outside docker's range"
                ));
                return stream::once(async move { Err(e) }).boxed();
            }
        };
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .follow(follow)
            .since(since)
            .build();
        self.inner
            .logs(id, Some(options))
            .flat_map(|item| {
                let lines = match item {
                    Ok(out) => log_lines(out),
                    Err(e) => vec![Err(map_err(e))],
                };
                stream::iter(lines)
            })
            .boxed()
    }

    /// dockerd's events of gpuq-labelled containers whose action is one of `actions` (`create`,
    /// `start`, `kill`, …) from `since_unix_nanos` on (dockerd replays the ones already past, so
    /// nothing is lost between subscribing and the stream's first read), as they happen. A
    /// `docker stop` shows as a kill with signal 15, then one with signal 9 if the grace ran out.
    /// Used by `gpuq bench external`; the stream never ends by itself.
    pub fn container_events(
        &self,
        since_unix_nanos: i64,
        actions: &[&str],
    ) -> impl Stream<Item = Result<ContainerEvent, RuntimeError>> + Send + Unpin + 'static {
        let since = format!(
            "{}.{:09}",
            since_unix_nanos.div_euclid(1_000_000_000),
            since_unix_nanos.rem_euclid(1_000_000_000)
        );
        let filters = HashMap::from([
            ("type", vec!["container".to_string()]),
            ("event", actions.iter().map(|a| a.to_string()).collect()),
            ("label", vec![format!("{LABEL_MANAGED}=true")]),
        ]);
        let options = EventsOptionsBuilder::new()
            .since(&since)
            .filters(&filters)
            .build();
        self.inner
            .events(Some(options))
            .map(|item| item.map(container_event).map_err(map_err))
            .boxed()
    }
}

/// One event of a gpuq container, as dockerd reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEvent {
    /// What happened: `create`, `start`, `kill`, …
    pub action: String,
    /// The job, from the container's `org.gpuq.job-id` label (`None` if absent or not a UUID).
    pub job_id: Option<uuid::Uuid>,
    /// The container's name (`gpuq-<job>-<attempt>`).
    pub name: String,
    /// For a kill, the signal dockerd sent (15 for SIGTERM, 9 for SIGKILL), if it said.
    pub signal: Option<i32>,
    /// dockerd's time of the event, nanoseconds since the Unix epoch.
    pub at_unix_nanos: i64,
}

fn container_event(msg: bollard::models::EventMessage) -> ContainerEvent {
    let attrs = msg.actor.and_then(|a| a.attributes).unwrap_or_default();
    ContainerEvent {
        action: msg.action.unwrap_or_default(),
        job_id: attrs.get(LABEL_JOB_ID).and_then(|j| j.parse().ok()),
        name: attrs.get("name").cloned().unwrap_or_default(),
        signal: attrs.get("signal").and_then(|s| s.parse().ok()),
        at_unix_nanos: msg
            .time_nano
            .or(msg.time.map(|s| s * 1_000_000_000))
            .unwrap_or_default(),
    }
}

/// Whether dockerd's 404 is about a network (`network <name or id> not found`), not the image or
/// the container.
fn is_network_gone(message: &str) -> bool {
    message.starts_with("network ") && message.ends_with(" not found")
}

/// Deterministic name, so a retried create of the same attempt conflicts
/// instead of launching a second copy.
pub fn container_name(req: &LaunchRequest) -> String {
    format!("gpuq-{}-{}", req.job_id, req.attempt)
}

/// What a dockerd says about itself, as `gpuq doctor` reports it.
#[derive(Debug, Clone, Default)]
pub struct DockerHostFacts {
    /// Engine version, e.g. `26.1.5`.
    pub server_version: String,
    /// Engine API version.
    pub api_version: String,
    /// `cgroupfs` or `systemd`.
    pub cgroup_driver: Option<String>,
    /// `1` or `2`.
    pub cgroup_version: Option<String>,
    /// Docker's root directory (images, containers).
    pub root_dir: Option<String>,
    /// Whether containers keep running while the daemon restarts (`live-restore`).
    pub live_restore: bool,
    /// Whether the daemon remaps containers' user namespaces (`userns-remap`).
    pub userns_remap: bool,
    /// Registered OCI runtimes (`runc`, `nvidia`, …).
    pub runtimes: Vec<String>,
    /// Where the daemon reads CDI specs from (empty when CDI is off).
    pub cdi_spec_dirs: Vec<String>,
}
