//! Real cards observed through NVML (`libnvidia-ml.so.1`, loaded at run time
//! by nvml-wrapper via libloading, so the binary starts on driver-less hosts).

use super::{GpuError, GpuInfo, GpuInventory, InventoryKind, OurProcesses};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};
use std::collections::HashMap;
use uuid::Uuid;

const MIB: u64 = 1024 * 1024;

/// Inventory backed by the NVIDIA driver; holds the initialised library for
/// the life of the process because NVML init is comparatively expensive.
pub struct NvmlInventory {
    nvml: Nvml,
}

impl std::fmt::Debug for NvmlInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlInventory").finish_non_exhaustive()
    }
}

impl NvmlInventory {
    /// Loads and initialises NVML once; returns `LibraryMissing` when the
    /// shared library is absent so start-up can explain the remedy.
    pub fn new() -> Result<Self, GpuError> {
        match Nvml::init() {
            Ok(nvml) => Ok(NvmlInventory { nvml }),
            Err(e) => Err(init_error(e)),
        }
    }

    /// Reads one device; `None` when it cannot be identified or sized, because
    /// a card without a UUID or total memory is useless for admission.
    fn read_device(&self, position: u32, ours: &OurProcesses) -> Option<GpuInfo> {
        let device = match self.nvml.device_by_index(position) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(position, error = %e, "skipping GPU: NVML cannot open it");
                return None;
            }
        };
        let raw_uuid = match device.uuid() {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(position, error = %e, "skipping GPU: NVML cannot read its UUID");
                return None;
            }
        };
        let Some(uuid) = parse_nvml_uuid(&raw_uuid) else {
            tracing::warn!(position, uuid = %raw_uuid, "skipping GPU: UUID is not GPU-<uuid> (MIG?)");
            return None;
        };
        let memory = match device.memory_info() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(position, %uuid, error = %e, "skipping GPU: NVML cannot read its memory");
                return None;
            }
        };
        let index = field(position, "index", device.index()).unwrap_or(position);
        let model = field(position, "name", device.name()).unwrap_or_else(|| "unknown".into());
        let utilization_pct =
            field(position, "utilization", device.utilization_rates()).map(|u| u.gpu);
        Some(GpuInfo {
            uuid,
            index,
            model,
            total_mib: mib_floor(memory.total),
            used_mib: Some(mib_ceil(memory.used)),
            external_mib: external_mib(&device, position, ours),
            utilization_pct,
            simulated: false,
        })
    }
}

/// Foreign memory on one device; unknown if either process list is unreadable.
fn external_mib(device: &Device<'_>, position: u32, ours: &OurProcesses) -> Option<i64> {
    let compute = field(
        position,
        "compute processes",
        device.running_compute_processes(),
    )?;
    let graphics = field(
        position,
        "graphics processes",
        device.running_graphics_processes(),
    )?;
    let procs: Vec<(u32, Option<u64>)> = compute
        .iter()
        .chain(graphics.iter())
        .map(|p: &ProcessInfo| {
            let bytes = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            };
            (p.pid, bytes)
        })
        .collect();
    let result = external_mib_from_processes(&procs, ours);
    if result.is_none() {
        tracing::debug!(
            position,
            "GPU external memory unknown: NVML withheld a foreign process's usage"
        );
    }
    result
}

/// Turns an optional per-field NVML failure into `None`, logged at debug,
/// so one unsupported query never hides the rest of the card.
fn field<T>(position: u32, what: &str, r: Result<T, NvmlError>) -> Option<T> {
    r.map_err(|e| tracing::debug!(position, field = what, error = %e, "NVML field unavailable"))
        .ok()
}

/// Maps init failures to `LibraryMissing` when the library itself is absent,
/// which is the common, operator-fixable case.
fn init_error(e: NvmlError) -> GpuError {
    match e {
        NvmlError::LibloadingError(inner) => GpuError::LibraryMissing(inner.to_string()),
        NvmlError::LibraryNotFound => GpuError::LibraryMissing(e.to_string()),
        other => GpuError::Nvml(format!("initialisation failed: {other}")),
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
fn mib_floor(bytes: u64) -> i64 {
    i64::try_from(bytes / MIB).unwrap_or(i64::MAX)
}

/// Used memory rounds up so partial MiB in use are never ignored.
fn mib_ceil(bytes: u64) -> i64 {
    i64::try_from(bytes.div_ceil(MIB)).unwrap_or(i64::MAX)
}

impl GpuInventory for NvmlInventory {
    fn kind(&self) -> InventoryKind {
        InventoryKind::Nvml
    }

    fn snapshot(&self, ours: &OurProcesses) -> Result<Vec<GpuInfo>, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| GpuError::Nvml(format!("cannot count devices: {e}")))?;
        Ok((0..count)
            .filter_map(|position| self.read_device(position, ours))
            .collect())
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
