//! Real cards observed through NVML (`libnvidia-ml.so.1`, loaded at run time
//! by nvml-wrapper via libloading, so the binary starts on driver-less hosts).

use super::{
    CardProcess, GpuError, GpuInfo, GpuInventory, InventoryKind, OurProcesses, ReadCard, Reading,
    SkippedCard,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Mutex;
use uuid::Uuid;

pub(super) const MIB: u64 = 1024 * 1024;

/// The library NVML is loaded from unless `--nvml-lib` names another: the dynamic loader finds it.
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";

/// `nvmlDeviceGetMigMode`'s "enabled" (`NVML_DEVICE_MIG_ENABLE`).
const MIG_ENABLED: u32 = 1;

/// Inventory backed by the NVIDIA driver; holds the initialised library for
/// the life of the process because NVML init is comparatively expensive.
pub struct NvmlInventory {
    pub(super) nvml: Nvml,
    /// The library loaded (as given: a name the loader searches, or a path), named in errors.
    lib: String,
    /// Cards seen by the last snapshot but not offered to admission (MIG), so they can be shown.
    skipped: Mutex<Vec<SkippedCard>>,
}

/// What reading one NVML device gave.
enum Read {
    /// A whole card that admission may use, with its processes.
    Card(ReadCard),
    /// A card gpuq sees but does not schedule (MIG), and why.
    Skipped(SkippedCard),
    /// Nothing usable (logged where it failed).
    Unreadable,
}

impl std::fmt::Debug for NvmlInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlInventory").finish_non_exhaustive()
    }
}

impl NvmlInventory {
    /// Loads and initialises NVML once from `lib` (default [`DEFAULT_NVML_LIB`]); returns
    /// `LibraryMissing`, naming the library, when it cannot be loaded so start-up can explain the
    /// remedy.
    pub fn new(lib: Option<&Path>) -> Result<Self, GpuError> {
        let lib_os: &OsStr = lib.map_or(OsStr::new(DEFAULT_NVML_LIB), Path::as_os_str);
        let name = lib_os.to_string_lossy().into_owned();
        match Nvml::builder().lib_path(lib_os).init() {
            Ok(nvml) => Ok(NvmlInventory {
                nvml,
                lib: name,
                skipped: Mutex::default(),
            }),
            Err(e) => Err(init_error(&name, e)),
        }
    }

    /// The library this inventory loaded, as it was named.
    pub fn library(&self) -> &str {
        &self.lib
    }

    /// Opens the device at `position`, logging why not.
    pub(super) fn device(&self, position: u32) -> Option<Device<'_>> {
        self.nvml
            .device_by_index(position)
            .map_err(|e| tracing::warn!(position, error = %e, "skipping GPU: NVML cannot open it"))
            .ok()
    }

    /// Reads one device. A card without a UUID or total memory is useless for admission; a MIG
    /// card (or MIG device) is seen but skipped: gpuq places jobs on whole cards only.
    fn read_device(&self, position: u32) -> Read {
        let Some(device) = self.device(position) else {
            return Read::Unreadable;
        };
        let raw_uuid = match device.uuid() {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(position, error = %e, "skipping GPU: NVML cannot read its UUID");
                return Read::Unreadable;
            }
        };
        if let Some(reason) = mig_reason(&device, &raw_uuid) {
            return Read::Skipped(SkippedCard {
                index: field(position, "index", device.index()).unwrap_or(position),
                id: raw_uuid,
                model: field(position, "name", device.name()),
                reason: reason.into(),
            });
        }
        let Some(uuid) = parse_nvml_uuid(&raw_uuid) else {
            tracing::warn!(position, uuid = %raw_uuid, "skipping GPU: UUID is not GPU-<uuid>");
            return Read::Unreadable;
        };
        let memory = match device.memory_info() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(position, %uuid, error = %e, "skipping GPU: NVML cannot read its memory");
                return Read::Unreadable;
            }
        };
        let index = field(position, "index", device.index()).unwrap_or(position);
        let model = field(position, "name", device.name()).unwrap_or_else(|| "unknown".into());
        let utilization_pct =
            field(position, "utilization", device.utilization_rates()).map(|u| u.gpu);
        let (processes, processes_known) = processes_of(&device, position, uuid);
        let sm_samples = super::nvml_usage::sm_samples_of(&device, position);
        Read::Card(ReadCard {
            info: GpuInfo {
                uuid,
                index,
                model,
                total_mib: mib_floor(memory.total),
                used_mib: Some(mib_ceil(memory.used)),
                external_mib: None,
                utilization_pct,
                simulated: false,
            },
            processes,
            processes_known,
            sm_samples,
        })
    }

    /// Keeps the skipped cards of this snapshot, and says so in the log when the set changes
    /// (not on every refresh).
    fn note_skipped(&self, now: Vec<SkippedCard>) {
        let mut kept = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        if *kept != now {
            for card in now.iter().filter(|c| !kept.contains(c)) {
                tracing::warn!(
                    index = card.index,
                    id = %card.id,
                    model = card.model.as_deref().unwrap_or("unknown"),
                    reason = %card.reason,
                    "GPU seen but not scheduled"
                );
            }
            *kept = now;
        }
    }
}

/// Why a device is a MIG card or MIG device gpuq does not schedule; `None` for a whole card.
/// A card that cannot report its MIG mode (`NotSupported` on pre-Ampere cards) is a whole card.
fn mig_reason(device: &Device<'_>, raw_uuid: &str) -> Option<&'static str> {
    if raw_uuid.trim().starts_with("MIG-") {
        return Some("MIG device: gpuq schedules whole cards only");
    }
    match device.mig_mode() {
        Ok(mode) if mode.current == MIG_ENABLED => {
            Some("MIG mode enabled: gpuq schedules whole cards only")
        }
        Ok(_) | Err(NvmlError::NotSupported) => None,
        Err(e) => {
            tracing::debug!(uuid = raw_uuid, error = %e, "NVML MIG mode unavailable; taken as a whole card");
            None
        }
    }
}

/// The processes in one device's compute and graphics lists, and whether both lists were read
/// (a refused list leaves its processes unknown, and so the card's foreign memory).
fn processes_of(device: &Device<'_>, position: u32, gpu: Uuid) -> (Vec<CardProcess>, bool) {
    let lists = [
        (
            false,
            "compute processes",
            device.running_compute_processes(),
        ),
        (
            true,
            "graphics processes",
            device.running_graphics_processes(),
        ),
    ];
    let mut out = Vec::new();
    let mut known = true;
    for (graphics, what, list) in lists {
        let Some(list) = field(position, what, list) else {
            known = false;
            continue;
        };
        out.extend(list.iter().map(|p: &ProcessInfo| {
            let used_bytes = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            };
            CardProcess {
                gpu,
                pid: p.pid,
                used_mib: used_bytes.map(mib_ceil),
                used_bytes,
                graphics,
            }
        }));
    }
    (out, known)
}

/// Turns an optional per-field NVML failure into `None`, logged at debug,
/// so one unsupported query never hides the rest of the card.
pub(super) fn field<T>(position: u32, what: &str, r: Result<T, NvmlError>) -> Option<T> {
    r.map_err(|e| tracing::debug!(position, field = what, error = %e, "NVML field unavailable"))
        .ok()
}

/// Maps init failures to `LibraryMissing` when the library itself is absent,
/// which is the common, operator-fixable case; both name the library `lib`.
fn init_error(lib: &str, e: NvmlError) -> GpuError {
    let path = lib.to_string();
    match e {
        NvmlError::LibloadingError(inner) => GpuError::LibraryMissing {
            path,
            reason: inner.to_string(),
        },
        NvmlError::LibraryNotFound => GpuError::LibraryMissing {
            path,
            reason: e.to_string(),
        },
        other => GpuError::Nvml(format!("initialising {lib} failed: {other}")),
    }
}

/// Parses NVML's `GPU-xxxxxxxx-…` form; `None` for anything else (e.g. MIG
/// `MIG-…` identifiers), which callers skip rather than misidentify.
pub fn parse_nvml_uuid(raw: &str) -> Option<Uuid> {
    Uuid::parse_str(raw.trim().strip_prefix("GPU-")?).ok()
}

/// Sums memory of processes that are not gpuq's (MiB, rounded up), so that
/// admission can account for load it did not place.
///
/// `procs` is the concatenation of NVML's compute and graphics lists; a PID in
/// both is counted once (largest figure) because NVML reports the process's
/// total in each. If any foreign process's usage is unavailable (`None`), the
/// total is unknown and `None` is returned rather than an undercount.
pub fn external_mib_from_processes(
    procs: &[(u32, Option<u64>)],
    ours: &OurProcesses,
) -> Option<i64> {
    let mut foreign: HashMap<u32, u64> = HashMap::new();
    for &(pid, bytes) in procs {
        if ours.pids.contains(&pid) {
            continue;
        }
        let bytes = bytes?;
        let slot = foreign.entry(pid).or_insert(0);
        *slot = (*slot).max(bytes);
    }
    let total = foreign.values().fold(0u64, |acc, b| acc.saturating_add(*b));
    Some(mib_ceil(total))
}

/// Total memory rounds down so we never offer memory the card lacks.
pub(super) fn mib_floor(bytes: u64) -> i64 {
    i64::try_from(bytes / MIB).unwrap_or(i64::MAX)
}

/// Used memory rounds up so partial MiB in use are never ignored.
pub(super) fn mib_ceil(bytes: u64) -> i64 {
    i64::try_from(bytes.div_ceil(MIB)).unwrap_or(i64::MAX)
}

impl GpuInventory for NvmlInventory {
    fn kind(&self) -> InventoryKind {
        InventoryKind::Nvml
    }

    fn read(&self) -> Result<Reading, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| GpuError::Nvml(format!("cannot count devices: {e}")))?;
        let mut reading = Reading::default();
        for position in 0..count {
            match self.read_device(position) {
                Read::Card(card) => reading.cards.push(card),
                Read::Skipped(card) => reading.skipped.push(card),
                Read::Unreadable => {}
            }
        }
        self.note_skipped(reading.skipped.clone());
        Ok(reading)
    }

    fn skipped(&self) -> Vec<SkippedCard> {
        self.skipped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn accounting_peaks(&self, pids: &[u32]) -> Vec<super::AccountingPeak> {
        NvmlInventory::accounting_peaks(self, pids).unwrap_or_else(|e| {
            tracing::debug!(error = %e, "NVML accounting unreadable");
            Vec::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(pids: &[u32]) -> OurProcesses {
        pids.iter().copied().collect()
    }

    #[test]
    fn external_sums_foreign_only_rounding_up() {
        let procs = [
            (10, Some(100 * MIB)),
            (20, Some(MIB + 1)),
            (30, Some(5 * MIB)),
        ];
        assert_eq!(external_mib_from_processes(&procs, &ours(&[30])), Some(102));
    }

    #[test]
    fn external_empty_or_all_ours_is_zero_not_unknown() {
        assert_eq!(external_mib_from_processes(&[], &ours(&[])), Some(0));
        let procs = [(1, Some(MIB)), (2, None)];
        assert_eq!(external_mib_from_processes(&procs, &ours(&[1, 2])), Some(0));
    }

    #[test]
    fn external_unknown_when_foreign_usage_unavailable() {
        let procs = [(10, Some(MIB)), (20, None)];
        assert_eq!(external_mib_from_processes(&procs, &ours(&[])), None);
    }

    #[test]
    fn external_counts_pid_in_both_lists_once() {
        let procs = [(10, Some(4 * MIB)), (10, Some(4 * MIB)), (11, Some(MIB))];
        assert_eq!(external_mib_from_processes(&procs, &ours(&[])), Some(5));
    }

    #[test]
    fn nvml_uuid_parsing() {
        let u = parse_nvml_uuid("GPU-6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f");
        assert_eq!(
            u.map(|u| u.to_string()).as_deref(),
            Some("6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f")
        );
        assert_eq!(
            parse_nvml_uuid("MIG-6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f"),
            None
        );
        assert_eq!(
            parse_nvml_uuid("6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f"),
            None
        );
        assert_eq!(parse_nvml_uuid("GPU-nonsense"), None);
    }

    #[test]
    fn mib_rounding() {
        assert_eq!(mib_floor(2 * MIB - 1), 1);
        assert_eq!(mib_ceil(MIB + 1), 2);
        assert_eq!(mib_ceil(0), 0);
    }
}
