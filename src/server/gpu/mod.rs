//! GPU inventory: which physical cards this node has and how much of their
//! memory is taken, so that admission can decide whether a job fits.
//!
//! Two back-ends exist because gpuq must run both on real GPU nodes (NVML) and
//! on development or CI machines without any NVIDIA driver (simulation). In `gpuq serve` one
//! task per node reads them, the card observer ([`observer`]); the inventory sync ([`sync`]), the
//! usage sampler and VRAM policing consume its snapshots.

mod cgroup;
mod nvml;
mod nvml_usage;
pub mod observer;
mod sim;
pub mod sync;

#[cfg(test)]
mod tests;

pub use cgroup::{container_of, container_of_pid};
pub use nvml::{external_mib_from_processes, parse_nvml_uuid, NvmlInventory, DEFAULT_NVML_LIB};
pub use nvml_usage::{AccountingPeak, CardProcess, SmSample, SM_LOOKBACK_US};
pub use sim::{parse_sim_spec, sim_uuid, SimCard, SimInventory, SIM_UUID_NAMESPACE};

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// A card as the inventory sees it (defined with the repository that stores it).
pub use crate::server::db::gpus::GpuInfo;

/// A card the inventory sees but does not offer to admission (a MIG-enabled card or a MIG
/// device: gpuq places jobs on whole cards only), kept so it can be shown as such.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedCard {
    /// Driver index.
    pub index: u32,
    /// The identifier NVML gave (`GPU-…` or `MIG-…`).
    pub id: String,
    /// Marketing name, when readable.
    pub model: Option<String>,
    /// Why it is not scheduled.
    pub reason: String,
}

/// Which back-end produced the inventory, so the rest of gpuq can report it and
/// decide whether external memory comes from observation or from the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InventoryKind {
    /// Real cards observed through the NVIDIA driver.
    Nvml,
    /// Cards described by `--sim-gpus`; nothing is observed.
    Simulated,
}

impl fmt::Display for InventoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InventoryKind::Nvml => "nvml",
            InventoryKind::Simulated => "simulated",
        })
    }
}

/// PIDs (host PID namespace) of processes that belong to gpuq's containers, so
/// NVML can tell foreign memory from ours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OurProcesses {
    /// Host-namespace PIDs; NVML reports host PIDs, so container PIDs would not match.
    pub pids: HashSet<u32>,
}

impl FromIterator<u32> for OurProcesses {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        OurProcesses {
            pids: iter.into_iter().collect(),
        }
    }
}

/// One whole card as one reading saw it, with the processes on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCard {
    /// The card; its `external_mib` is `None` until someone who knows which processes are gpuq's
    /// works it out ([`ReadCard::external_mib`]).
    pub info: GpuInfo,
    /// The processes NVML listed on it (compute, then graphics; a process in both lists appears
    /// twice). Empty on simulated cards.
    pub processes: Vec<CardProcess>,
    /// Both process lists were read: only then can the foreign memory be known.
    pub processes_known: bool,
    /// The SM utilisation samples NVML kept of the processes on it over the last
    /// [`SM_LOOKBACK_US`] (only of processes that were busy, as NVML gives them); `None` when
    /// they could not be read (not supported, simulated cards): then nothing is known of them.
    pub sm_samples: Option<Vec<SmSample>>,
}

impl ReadCard {
    /// Memory of the processes on this card that are not gpuq's (`is_ours`), MiB rounded up;
    /// `None` when a list was refused or a foreign process's usage is withheld, and on cards
    /// whose processes are not seen at all (simulated).
    pub fn external_mib(&self, is_ours: impl Fn(&CardProcess) -> bool) -> Option<i64> {
        if !self.processes_known {
            return None;
        }
        let foreign: Vec<(u32, Option<u64>)> = self
            .processes
            .iter()
            .filter(|p| !is_ours(p))
            .map(|p| (p.pid, p.used_bytes))
            .collect();
        external_mib_from_processes(&foreign, &OurProcesses::default())
    }
}

/// Everything one pass over the devices saw: the whole cards, with their processes, and the
/// devices seen but not offered (MIG).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// The whole cards admission may use.
    pub cards: Vec<ReadCard>,
    /// Devices seen but not scheduled.
    pub skipped: Vec<SkippedCard>,
}

impl Reading {
    /// The cards, each with its foreign memory worked out by `is_ours`.
    pub fn cards_with(&self, is_ours: impl Fn(&CardProcess) -> bool) -> Vec<GpuInfo> {
        self.cards
            .iter()
            .map(|c| GpuInfo {
                external_mib: c.external_mib(&is_ours),
                ..c.info.clone()
            })
            .collect()
    }

    /// Every process on every card, in card order.
    pub fn processes(&self) -> Vec<CardProcess> {
        self.cards
            .iter()
            .flat_map(|c| c.processes.iter().cloned())
            .collect()
    }
}

/// Source of GPU observations; a trait so the scheduler is identical on real
/// and simulated nodes and tests can substitute their own.
///
/// In `gpuq serve` only the card observer ([`observer`]) calls it, once per tick. `read` may block
/// for a few milliseconds on NVML; call it from `tokio::task::spawn_blocking` in async code.
pub trait GpuInventory: Send + Sync {
    /// Lets callers report and branch on the back-end without downcasting.
    fn kind(&self) -> InventoryKind;
    /// Reads every card now, in one pass: size, use, busy, and the processes on each.
    fn read(&self) -> Result<Reading, GpuError>;
    /// The cards now (one [`GpuInventory::read`]); `ours` separates gpuq's memory from foreign
    /// use.
    fn snapshot(&self, ours: &OurProcesses) -> Result<Vec<GpuInfo>, GpuError> {
        Ok(self.read()?.cards_with(|p| ours.pids.contains(&p.pid)))
    }
    /// Cards the last reading saw but left out (MIG), so they can be shown as such.
    fn skipped(&self) -> Vec<SkippedCard> {
        Vec::new()
    }
    /// The accounting peaks the driver kept for these PIDs (also after they exited); empty where
    /// it keeps none.
    fn accounting_peaks(&self, _pids: &[u32]) -> Vec<AccountingPeak> {
        Vec::new()
    }
}

/// Failures are distinct variants so start-up can print actionable guidance
/// and the poller can tell a missing driver from a transient NVML fault.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The driver's shared library is absent; the fix is installing it, naming it, or simulating.
    #[error("NVIDIA driver library {path} could not be loaded: {reason}; install the driver, name the library with --nvml-lib PATH, or use --gpu-source sim --sim-gpus COUNTxMiB:MODEL[,...]")]
    LibraryMissing {
        /// The library looked for (a name the dynamic loader searches, or the `--nvml-lib` path).
        path: String,
        /// What the loader said.
        reason: String,
    },
    /// NVML was loaded but a call failed (driver not running, GPU lost, ...).
    #[error("NVML (libnvidia-ml) call failed: {0}")]
    Nvml(String),
    /// The `--sim-gpus` text is malformed; the message names the faulty group.
    #[error("invalid --sim-gpus spec: {0}")]
    InvalidSimSpec(String),
    /// Simulation was requested without saying which cards to simulate.
    #[error("--gpu-source sim needs --sim-gpus COUNTxMiB:MODEL[,...], e.g. --sim-gpus \"2x24576:NVIDIA GeForce RTX 3090\"")]
    MissingSimSpec,
    /// Auto mode found neither a driver nor a simulation spec.
    #[error("no GPUs available: {0}; install the NVIDIA driver, or simulate cards with --sim-gpus COUNTxMiB:MODEL[,...] (e.g. --sim-gpus \"2x24576:NVIDIA GeForce RTX 3090\")")]
    NoGpus(String),
    /// The `--gpu-source` value is not one of the known modes.
    #[error("unknown GPU mode {0:?}: expected \"auto\", \"nvml\" or \"sim\"")]
    InvalidMode(String),
}

/// How the operator asked gpuq to find its GPUs (`--gpu-source auto|nvml|sim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    /// Simulate if a spec is given, otherwise require NVML.
    #[default]
    Auto,
    /// Real cards only; a missing driver is a start-up error.
    Nvml,
    /// Simulated cards only, even on a node with a driver.
    Sim,
}

impl FromStr for GpuMode {
    type Err = GpuError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(GpuMode::Auto),
            "nvml" => Ok(GpuMode::Nvml),
            "sim" => Ok(GpuMode::Sim),
            _ => Err(GpuError::InvalidMode(s.to_string())),
        }
    }
}

impl fmt::Display for GpuMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuMode::Auto => "auto",
            GpuMode::Nvml => "nvml",
            GpuMode::Sim => "sim",
        })
    }
}

/// Builds the inventory chosen at start-up, failing loudly rather than running
/// a node that silently has no cards.
///
/// Rules:
/// * `Nvml`: load NVML; if that fails, `LibraryMissing` (or `Nvml`) with
///   guidance. Any `sim_spec` is ignored.
/// * `Sim`: `sim_spec` is required (`MissingSimSpec` otherwise) and parsed;
///   NVML is never touched.
/// * `Auto`: a `sim_spec` given → simulated (NVML is not tried). Otherwise NVML
///   is tried; if it cannot be loaded the reason is logged with `warn` and
///   `NoGpus` is returned, explaining how to install the driver or simulate.
///
/// `node` only seeds the stable UUIDs of simulated cards. NVML is loaded from the system's
/// [`DEFAULT_NVML_LIB`]; [`from_config_with_lib`] names another library.
pub fn from_config(
    mode: GpuMode,
    sim_spec: Option<&str>,
    node: &str,
) -> Result<Box<dyn GpuInventory>, GpuError> {
    from_config_with_lib(mode, sim_spec, node, None)
}

/// [`from_config`], loading NVML from `nvml_lib` (`--nvml-lib`) when given.
pub fn from_config_with_lib(
    mode: GpuMode,
    sim_spec: Option<&str>,
    node: &str,
    nvml_lib: Option<&Path>,
) -> Result<Box<dyn GpuInventory>, GpuError> {
    let sim_spec = sim_spec.filter(|s| !s.trim().is_empty());
    match (mode, sim_spec) {
        (GpuMode::Nvml, _) => Ok(Box::new(NvmlInventory::new(nvml_lib)?)),
        (GpuMode::Sim, None) => Err(GpuError::MissingSimSpec),
        (GpuMode::Sim | GpuMode::Auto, Some(spec)) => {
            Ok(Box::new(SimInventory::from_spec(spec, node)?))
        }
        (GpuMode::Auto, None) => match NvmlInventory::new(nvml_lib) {
            Ok(inv) => Ok(Box::new(inv)),
            Err(e) => {
                tracing::warn!(error = %e, "GPU mode auto: NVML unavailable and no --sim-gpus given");
                let reason = match e {
                    GpuError::LibraryMissing { path, reason } => {
                        format!("{path} could not be loaded ({reason})")
                    }
                    other => other.to_string(),
                };
                Err(GpuError::NoGpus(reason))
            }
        },
    }
}
