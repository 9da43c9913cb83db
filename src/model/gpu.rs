//! Cards and the manifest as the UI, the REST API and the CLI see them.

use super::vocab::vocabulary;
use super::JobStatus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

vocabulary! {
    /// Whether a card takes work. `online`, `draining` and `offline` are an admin's decision and
    /// hold until an admin changes them; `missing` is the inventory's: the node no longer sees the
    /// card, and when it sees it again the admin's state applies again.
    pub enum GpuState {
        /// Takes new jobs.
        Online = "online",
        /// Runs its jobs out and takes no new ones.
        Draining = "draining",
        /// Taken out by an admin.
        Offline = "offline",
        /// Not seen by its node's inventory.
        Missing = "missing",
        /// Its node stopped heartbeating (or was forgotten): shown only, never stored.
        Lost = "lost",
    }
}

impl GpuState {
    /// The states an admin may set.
    pub const SETTABLE: [GpuState; 3] = [GpuState::Online, GpuState::Draining, GpuState::Offline];
}

/// A job holding part of a card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, sqlx::FromRow))]
pub struct GpuHolder {
    /// Job id.
    pub id: Uuid,
    /// Job name.
    pub name: String,
    /// Owner's login name.
    pub owner: String,
    /// VRAM reserved on this card.
    pub vram_mib: i64,
    /// The job's status (`admitted`, `starting`, `running`, or ended and not yet released).
    pub status: JobStatus,
    /// How long it has been running, in seconds (as of the request).
    #[serde(default)]
    pub running_s: Option<i64>,
    /// VRAM its processes hold on this card, as last observed; `None` when not observed.
    #[serde(default)]
    pub used_mib: Option<i64>,
    /// It stayed above its commitment on this card (see `AssignedGpu::over_commitment`).
    #[serde(default)]
    pub over_commitment: bool,
}

/// A device a node sees but does not schedule (a MIG-enabled card or a MIG device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct SkippedGpuView {
    /// Node.
    pub node: String,
    /// Driver index.
    pub index: u32,
    /// The identifier the driver gave (`GPU-…` or `MIG-…`).
    pub id: String,
    /// Model name, when readable.
    pub model: Option<String>,
    /// Why it is not scheduled.
    pub reason: String,
}

/// `95` → "1 min 35 s", `7300` → "2 h 1 min".
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// One physical card and what holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct GpuView {
    /// NVML-style id (`GPU-…`).
    pub uuid: String,
    /// Host.
    pub node: String,
    /// Device index on the host.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// `online`, `draining`, `offline` (an admin's), `missing` (the inventory no longer sees it),
    /// or `lost` (its node stopped heartbeating).
    pub state: GpuState,
    /// Physical memory.
    pub total_mib: i64,
    /// Committed to gpuq jobs.
    pub reserved_mib: i64,
    /// Used by processes gpuq does not manage.
    pub external_mib: i64,
    /// Last observed use, when known.
    pub used_mib: Option<i64>,
    /// What a new job could get now (total − headroom − reserved − external).
    pub free_mib: i64,
    /// A simulated card (no NVIDIA driver).
    pub simulated: bool,
    /// Jobs holding it.
    pub jobs: Vec<GpuHolder>,
}

/// `GET /api/v1/gpus`: every card and the devices the nodes do not schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct GpuList {
    /// Every card gpuq schedules (or did), with what holds it.
    pub gpus: Vec<GpuView>,
    /// Devices the nodes see but do not schedule (a MIG-enabled card, a MIG device).
    #[serde(default)]
    pub skipped: Vec<SkippedGpuView>,
}

/// A workload type and its VRAM need per GPU model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct WorkloadView {
    /// Name used in job specs.
    pub name: String,
    /// What it is.
    pub description: String,
    /// MiB per card, by model name. A model not listed cannot run it.
    pub vram_mib: BTreeMap<String, i64>,
}

/// The whole manifest and the models present, for the editor grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ManifestView {
    /// Workload types by name.
    pub workloads: Vec<WorkloadView>,
    /// Models of the cards gpuq knows.
    pub models_present: Vec<String>,
}

/// Renders a card id the way NVML and Docker name it.
pub fn gpu_id(uuid: &Uuid) -> String {
    format!("GPU-{uuid}")
}

/// Parses `GPU-<uuid>` (or a bare uuid).
pub fn parse_gpu_id(text: &str) -> Option<Uuid> {
    Uuid::parse_str(text.strip_prefix("GPU-").unwrap_or(text)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_say_them() {
        assert_eq!(human_duration(-3), "0 s");
        assert_eq!(human_duration(59), "59 s");
        assert_eq!(human_duration(95), "1 min 35 s");
        assert_eq!(human_duration(7300), "2 h 1 min");
    }

    #[test]
    fn durations_change_unit_at_the_minute_and_the_hour() {
        assert_eq!(human_duration(0), "0 s");
        assert_eq!(human_duration(60), "1 min 0 s");
        assert_eq!(human_duration(3599), "59 min 59 s");
        assert_eq!(human_duration(3600), "1 h 0 min");
        // Hours do not roll over into days; seconds are dropped once hours show.
        assert_eq!(human_duration(3 * 86400 + 59), "72 h 0 min");
        assert_eq!(human_duration(i64::MIN), "0 s");
        assert_eq!(human_duration(i64::MAX), "2562047788015215 h 30 min");
    }
}
