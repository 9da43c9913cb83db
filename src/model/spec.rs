//! The job spec a user submits (`POST /api/v1/jobs`), parsed once at the
//! edge into a [`JobSpec`] that is valid by construction.
//!
//! "Parse, don't validate": the only ways to obtain a [`JobSpec`] are
//! [`JobSpec::from_json`], [`JobSpec::parse`] and deserializing one (which
//! re-runs the same checks), so code that holds a `JobSpec` never has to
//! re-check it. Refusals are a single [`SpecError`] naming the offending
//! field in words a user can act on.

mod command;
mod env;
mod fields;
mod image;
mod json;
mod volume;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use fields::{parse_gpu_count, parse_name, parse_port, parse_priority, parse_timeout, parse_vram};

pub use command::{quote_argv, split_command, SplitError};
pub use env::FRAMEWORK_HINT_KEYS;
pub use volume::{Volume, FORBIDDEN_HOST};

/// Largest per-card memory need a user may state, in MiB (1 TiB): far above
/// any real card, low enough that arithmetic on it cannot overflow.
pub const MAX_VRAM_MB: u32 = 1_048_576;
/// Priority range: wide enough for "urgent" and "background". (A job that waited too long is
/// not given a bonus: it holds the cards it waits for, see the starvation setting.)
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -100..=100;

/// Why a job spec was refused, in a form both the API and the UI can show
/// next to the offending input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// Path of the offending input (`gpu_count`, `env.FOO`, `volumes[2]`,
    /// or `body` for the request as a whole) so a form can highlight it.
    pub field: String,
    /// Plain-words explanation meant for the person who wrote the spec.
    pub message: String,
}

impl SpecError {
    /// Lets every check build an error in one short expression.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// `field` holds `count` `items` where at most `max` are allowed (`Ok` when within).
    pub fn at_most(field: &str, items: &str, count: usize, max: usize) -> Result<(), Self> {
        if count <= max {
            return Ok(());
        }
        Err(Self::new(
            field,
            format!("{field} has {count} {items}, but at most {max} are allowed"),
        ))
    }
}

/// Deployment-dependent bounds. They are parameters rather than constants
/// because they depend on the cluster (largest node, admin policy) and the
/// front end must apply the same ones the server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpecLimits {
    /// Card count of the largest node: a job asking for more could never run.
    pub max_gpu_count: u32,
    /// Longest run time an admin allows, so no job can hold GPUs forever.
    pub max_timeout_s: u64,
    /// Run time for jobs that do not say, so forgotten jobs still end.
    pub default_timeout_s: u64,
    /// Bound on request size, checked before any parsing work is done.
    pub max_payload_bytes: usize,
    /// Bound on environment variables, to keep specs small and reviewable.
    pub max_env: usize,
    /// Bound on bind mounts, each of which the server must vet.
    pub max_volumes: usize,
    /// Bound on argv length, well under the kernel's own limit.
    pub max_command_args: usize,
}

impl Default for SpecLimits {
    /// A single 8-GPU node with week-long jobs allowed and a day by default.
    fn default() -> Self {
        Self {
            max_gpu_count: 8,
            max_timeout_s: 7 * 24 * 3600,
            default_timeout_s: 24 * 3600,
            max_payload_bytes: 256 * 1024,
            max_env: 64,
            max_volumes: 16,
            max_command_args: 1024,
        }
    }
}

/// Limits used when a stored or transmitted `JobSpec` is deserialized: only
/// the rules that hold whatever the deployment are re-checked there, since
/// the deployment limits may have changed since the spec was admitted.
const STRUCTURAL_LIMITS: SpecLimits = SpecLimits {
    max_gpu_count: u32::MAX,
    max_timeout_s: u64::MAX,
    default_timeout_s: 1,
    max_payload_bytes: usize::MAX,
    max_env: usize::MAX,
    max_volumes: usize::MAX,
    max_command_args: usize::MAX,
};

/// The command as a client may write it: an exact argv, or one line that is
/// split like a shell would split it (no shell is ever run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum RawCommand {
    /// Exact argv; preferred, since nothing is reinterpreted.
    Argv(Vec<String>),
    /// Convenience for humans typing a command line.
    Line(String),
}

/// The wire format exactly as a client sent it: untrusted, unchecked.
///
/// Numbers are `i64` so that out-of-range values (negative GPU counts, huge
/// timeouts) reach [`JobSpec::parse`] and get the same range message as any
/// other bad value. For request bodies prefer [`JobSpec::from_json`], which
/// also names the field when the JSON itself has the wrong shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawJobSpec {
    /// Container image reference.
    pub image: String,
    /// Program to run inside the container.
    pub command: RawCommand,
    /// Cards wanted; absent means 1, 0 means a CPU-only job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<i64>,
    /// Memory needed on each card, in MiB, when no workload type fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_vram_mb: Option<i64>,
    /// Extra environment variables for the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Bind mounts written `host:container[:ro|:rw]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<String>>,
    /// Named workload type whose memory profile the server knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// Display name; absent means derived from the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Run-time limit in seconds; absent means the server default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<i64>,
    /// Scheduling priority; absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Whether the job must not share its cards with other jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,
    /// Put the job back in the queue when its node is lost (absent: false; the job then waits for
    /// its node, since a GPU job run twice costs more than a late one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_on_node_loss: Option<bool>,
    /// The one HTTP port (1–65535) the job serves, which makes it an interactive session: gpuq
    /// proxies it (HTTP and WebSocket) at the job's own session origin. Absent: a batch job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
}

/// How much GPU memory a job needs, resolved so the scheduler cannot see a
/// GPU job without a memory need, or a CPU job with one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VramNeed {
    /// Looked up in the server's workload profiles at admission time.
    Workload(String),
    /// Explicit MiB needed on each card.
    PerCard(u32),
    /// CPU-only job (`gpu_count` is 0).
    None,
}

/// A job spec that passed every check; see the module docs for why it can
/// only be obtained by parsing.
///
/// Its JSON form is the canonical [`RawJobSpec`] (every default filled in),
/// so it can be stored, sent to the front end, or resubmitted as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    image: String,
    command: Vec<String>,
    gpu_count: u32,
    vram: VramNeed,
    env: BTreeMap<String, String>,
    volumes: Vec<Volume>,
    name: String,
    timeout_s: u64,
    priority: i32,
    exclusive: bool,
    requeue_on_node_loss: bool,
    port: Option<u16>,
}

impl JobSpec {
    /// Entry point for request bodies: bounds the size before parsing and
    /// names the field when the JSON has the wrong shape (unknown field,
    /// wrong type, non-integer number), which serde alone cannot do.
    ///
    /// ```
    /// use gpuq::model::spec::{JobSpec, SpecLimits, VramNeed};
    ///
    /// let limits = SpecLimits::default();
    /// let body = r#"{"image": "ghcr.io/org/train:1", "command": "python train.py --lr 0.1",
    ///               "workload": "llm-7b"}"#;
    /// let spec = JobSpec::from_json(body, &limits).unwrap();
    /// assert_eq!(spec.command(), ["python", "train.py", "--lr", "0.1"]);
    /// assert_eq!(spec.vram(), &VramNeed::Workload("llm-7b".into()));
    ///
    /// let err = JobSpec::from_json(r#"{"image": "app", "command": "x", "gpus": 2}"#, &limits);
    /// assert_eq!(err.unwrap_err().field, "gpus");
    /// ```
    pub fn from_json(text: &str, limits: &SpecLimits) -> Result<Self, SpecError> {
        let raw = json::raw_from_json(text, limits)?;
        Self::parse(raw, limits)
    }

    /// Entry point for specs that were already deserialized (or built in
    /// code); applies every rule and fills in the defaults.
    pub fn parse(raw: RawJobSpec, limits: &SpecLimits) -> Result<Self, SpecError> {
        let default_name = image::parse_image(&raw.image)?;
        let command = command::parse_command(raw.command, limits.max_command_args)?;
        let gpu_count = parse_gpu_count(raw.gpu_count, limits)?;
        let vram = parse_vram(gpu_count, raw.workload, raw.min_vram_mb)?;
        let exclusive = raw.exclusive.unwrap_or(false);
        if exclusive && gpu_count == 0 {
            return Err(SpecError::new(
                "exclusive",
                "exclusive only applies to GPU jobs, and this job asks for 0 GPUs",
            ));
        }
        let env = env::parse_env(raw.env.unwrap_or_default(), limits.max_env)?;
        let volumes = volume::parse_volumes(raw.volumes.unwrap_or_default(), limits.max_volumes)?;
        let name = parse_name(raw.name, default_name)?;
        let timeout_s = parse_timeout(raw.timeout_s, limits)?;
        let priority = parse_priority(raw.priority)?;
        let port = parse_port(raw.port)?;
        Ok(Self {
            image: raw.image,
            command,
            gpu_count,
            vram,
            env,
            volumes,
            name,
            timeout_s,
            priority,
            exclusive,
            requeue_on_node_loss: raw.requeue_on_node_loss.unwrap_or(false),
            port,
        })
    }

    /// Canonical wire form with every default spelled out, so resubmitting
    /// a job keeps its settings even if server defaults change;
    /// `parse(to_raw(s)) == s`.
    pub fn to_raw(&self) -> RawJobSpec {
        let (workload, min_vram_mb) = match &self.vram {
            VramNeed::Workload(w) => (Some(w.clone()), None),
            VramNeed::PerCard(mb) => (None, Some(i64::from(*mb))),
            VramNeed::None => (None, None),
        };
        RawJobSpec {
            image: self.image.clone(),
            command: RawCommand::Argv(self.command.clone()),
            gpu_count: Some(i64::from(self.gpu_count)),
            min_vram_mb,
            env: (!self.env.is_empty()).then(|| self.env.clone()),
            volumes: (!self.volumes.is_empty())
                .then(|| self.volumes.iter().map(Volume::to_string).collect()),
            workload,
            name: Some(self.name.clone()),
            // Parsed from an i64, so it always fits.
            timeout_s: Some(i64::try_from(self.timeout_s).unwrap_or(i64::MAX)),
            priority: Some(i64::from(self.priority)),
            exclusive: self.exclusive.then_some(true),
            requeue_on_node_loss: self.requeue_on_node_loss.then_some(true),
            port: self.port.map(i64::from),
        }
    }

    /// Image to pull; a plausible Docker reference.
    pub fn image(&self) -> &str {
        &self.image
    }
    /// Exact argv to exec; never empty, program name never empty.
    pub fn command(&self) -> &[String] {
        &self.command
    }
    /// Cards to allocate; 0 for CPU-only jobs.
    pub fn gpu_count(&self) -> u32 {
        self.gpu_count
    }
    /// Per-card memory need; `VramNeed::None` exactly when `gpu_count` is 0.
    pub fn vram(&self) -> &VramNeed {
        &self.vram
    }
    /// User variables, none of which can steer GPU isolation.
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }
    /// Bind mounts, lexically safe and with distinct container paths.
    pub fn volumes(&self) -> &[Volume] {
        &self.volumes
    }
    /// Display name, never blank.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Run-time limit the runner enforces.
    pub fn timeout_s(&self) -> u64 {
        self.timeout_s
    }
    /// Scheduling priority within [`PRIORITY_RANGE`].
    pub fn priority(&self) -> i32 {
        self.priority
    }
    /// Whether the cards must not be shared; only ever true for GPU jobs.
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }
    /// Whether the job goes back to the queue when its node is lost.
    pub fn requeue_on_node_loss(&self) -> bool {
        self.requeue_on_node_loss
    }
    /// The HTTP port of an interactive session (`None`: a batch job).
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl Serialize for JobSpec {
    /// Serializes as the canonical raw spec: one wire format, not two.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_raw().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JobSpec {
    /// Re-checks the deployment-independent rules so that a `JobSpec`
    /// obtained from storage or the network is as trustworthy as a parsed
    /// one. Deployment limits are not re-applied: re-parse with
    /// `JobSpec::parse(spec.to_raw(), &limits)` to enforce current ones.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawJobSpec::deserialize(deserializer)?;
        Self::parse(raw, &STRUCTURAL_LIMITS).map_err(serde::de::Error::custom)
    }
}
