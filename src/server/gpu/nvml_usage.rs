//! What NVML says each process uses: the running processes on each card now, and accounting's
//! per-process peak, which outlives the process. The ground for per-job observed VRAM.

use super::nvml::{field, mib_ceil, NvmlInventory};
use super::{parse_nvml_uuid, GpuError, GpuInventory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Device;
use std::collections::HashSet;
use uuid::Uuid;

/// How far back each reading asks NVML for process utilisation samples, in microseconds. Longer
/// than any gap between two readings a consumer may see (a consumer that missed a snapshot still
/// sees the samples it held in the next one); samples seen twice are harmless, as consumers go by
/// each sample's own time.
pub const SM_LOOKBACK_US: u64 = 20_000_000;

/// One process utilisation sample (`nvmlProcessUtilizationSample_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmSample {
    /// Host-namespace PID.
    pub pid: u32,
    /// When the driver took it: microseconds since the Unix epoch (NVML's CPU timestamp).
    pub at_us: u64,
    /// SM (3D and compute) utilisation, percent.
    pub sm_percent: u32,
}

/// The samples of the last [`SM_LOOKBACK_US`] on one device: `Some(empty)` when NVML has none
/// that recent (`NVML_ERROR_NOT_FOUND`: no process was busy), `None` when they cannot be read
/// (not supported, or a failure): unknown, never idle.
pub(super) fn sm_samples_of(device: &Device<'_>, position: u32) -> Option<Vec<SmSample>> {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    match device.process_utilization_stats(now_us.saturating_sub(SM_LOOKBACK_US)) {
        Ok(samples) => Some(
            samples
                .into_iter()
                .map(|s| SmSample {
                    pid: s.pid,
                    at_us: s.timestamp,
                    sm_percent: s.sm_util,
                })
                .collect(),
        ),
        Err(NvmlError::NotFound) => Some(Vec::new()),
        Err(e) => {
            tracing::debug!(position, error = %e, "NVML process utilisation unavailable");
            None
        }
    }
}

/// One process on one card, as NVML lists it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardProcess {
    /// The card (NVML's `GPU-…` UUID without the prefix).
    pub gpu: Uuid,
    /// Host-namespace PID.
    pub pid: u32,
    /// Memory it uses on this card (MiB, rounded up); `None` when NVML withholds it.
    pub used_mib: Option<i64>,
    /// The same in bytes, as NVML gave it, so that sums are rounded once.
    pub used_bytes: Option<u64>,
    /// Listed as a graphics process (else compute). A process in both lists appears twice.
    pub graphics: bool,
}

/// One process's record in NVML accounting (kept by the driver after the process exits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountingPeak {
    /// The card.
    pub gpu: Uuid,
    /// Host-namespace PID.
    pub pid: u32,
    /// Most memory it held on this card over its life (MiB, rounded up); `None` when withheld.
    pub peak_mib: Option<i64>,
    /// Still running when read (then the peak may still grow).
    pub running: bool,
}

impl NvmlInventory {
    /// Every process on every whole card now (compute and graphics), from one
    /// [`GpuInventory::read`]. A card whose lists cannot be read is left out (logged), so its
    /// processes are unknown rather than absent.
    pub fn processes(&self) -> Result<Vec<CardProcess>, GpuError> {
        Ok(self.read()?.processes())
    }

    /// NVML accounting's records of `pids` on every card where accounting is on: the peak
    /// memory of each, readable after the process exited. A card without accounting (off, or
    /// not supported) gives no records: the peaks there are unknown, never zero.
    pub fn accounting_peaks(&self, pids: &[u32]) -> Result<Vec<AccountingPeak>, GpuError> {
        let wanted: HashSet<u32> = pids.iter().copied().collect();
        let mut out = Vec::new();
        for (position, device, gpu) in self.whole_cards()? {
            match device.is_accounting_enabled() {
                Ok(true) => {}
                Ok(false) | Err(NvmlError::NotSupported) => continue,
                Err(e) => {
                    tracing::debug!(position, error = %e, "NVML accounting mode unreadable");
                    continue;
                }
            }
            let Some(recorded) = field(position, "accounting pids", device.accounting_pids())
            else {
                continue;
            };
            let mut seen = HashSet::new();
            for pid in recorded {
                if !wanted.contains(&pid) || !seen.insert(pid) {
                    continue;
                }
                match device.accounting_stats_for(pid) {
                    Ok(stats) => out.push(AccountingPeak {
                        gpu,
                        pid,
                        peak_mib: stats.max_memory_usage.map(mib_ceil),
                        running: stats.is_running,
                    }),
                    Err(e) => {
                        tracing::debug!(position, pid, error = %e, "NVML accounting stats unavailable")
                    }
                }
            }
        }
        Ok(out)
    }

    /// The devices with a `GPU-` UUID (MIG devices and unreadable ones left out).
    fn whole_cards(&self) -> Result<Vec<(u32, Device<'_>, Uuid)>, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| GpuError::Nvml(format!("cannot count devices: {e}")))?;
        Ok((0..count)
            .filter_map(|position| {
                let device = self.device(position)?;
                let uuid = field(position, "uuid", device.uuid())?;
                Some((position, device, parse_nvml_uuid(&uuid)?))
            })
            .collect())
    }
}
