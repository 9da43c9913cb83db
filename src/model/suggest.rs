//! The learning manifest: what finished jobs were observed to use, per workload type (or raw
//! image) and GPU model, and the need gpuq suggests from it.

use serde::{Deserialize, Serialize};

/// The margin added to the observed p95, in percent.
pub const SUGGESTION_MARGIN_PERCENT: i64 = 10;
/// Suggestions are rounded up to a multiple of this many MiB.
pub const SUGGESTION_ROUND_MIB: i64 = 256;
/// The fewest (job, card) records a suggestion is made from; with fewer, p95 is one run's luck.
pub const SUGGESTION_MIN_SAMPLES: i64 = 3;

/// The observed peaks of finished jobs on one GPU model: each (job, card) record counts once,
/// its peak being the larger of the sampler's peak and NVML accounting's peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, sqlx::FromRow))]
pub struct PeakStats {
    /// Number of (job, card) records.
    pub n: i64,
    /// Median peak, MiB (an observed value: `percentile_disc(0.5)`).
    pub p50_mib: i64,
    /// 95th percentile peak, MiB (an observed value: `percentile_disc(0.95)`).
    pub p95_mib: i64,
    /// Largest peak, MiB.
    pub max_mib: i64,
}

/// The observed peaks of one group of (job, card) records and the need gpuq suggests from them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Observed {
    /// The observed peaks.
    pub stats: PeakStats,
    /// The suggested need, MiB; `None` when there are too few records (see `note`).
    pub suggested_mib: Option<i64>,
    /// Why there is no suggestion, when there is none.
    pub note: Option<String>,
}

impl From<PeakStats> for Observed {
    /// The stats with their suggestion ([`suggest`]) or the reason there is none.
    fn from(stats: PeakStats) -> Self {
        let (suggested_mib, note) = match suggest(&stats) {
            Ok(mib) => (Some(mib), None),
            Err(why) => (None, Some(why)),
        };
        Observed {
            stats,
            suggested_mib,
            note,
        }
    }
}

/// One workload type × GPU model: what is declared, what was observed, what gpuq suggests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct WorkloadSuggestion {
    /// Workload type.
    pub workload: String,
    /// GPU model (`gpus.model` of the cards the jobs ran on).
    pub gpu_model: String,
    /// The manifest's figure for this pair, MiB; `None` when the manifest has none.
    pub declared_mib: Option<i64>,
    /// What was observed and the need suggested from it.
    #[serde(flatten)]
    pub observed: Observed,
}

/// Jobs declared with a raw `min_vram_mib` (no workload type), per image × GPU model: a hint to
/// create a workload type for that image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ImageSuggestion {
    /// Image reference the jobs ran.
    pub image: String,
    /// GPU model.
    pub gpu_model: String,
    /// The largest `min_vram_mib` these jobs declared, MiB.
    pub declared_max_mib: i64,
    /// What was observed and the need suggested from it.
    #[serde(flatten)]
    pub observed: Observed,
}

/// `GET /api/v1/manifest/suggestions`: the learning manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ManifestSuggestions {
    /// The margin added to p95, percent.
    pub margin_percent: i64,
    /// Suggestions are rounded up to a multiple of this, MiB.
    pub round_mib: i64,
    /// The fewest records a suggestion is made from.
    pub min_samples: i64,
    /// Per workload type × GPU model, by workload then model.
    pub workloads: Vec<WorkloadSuggestion>,
    /// Raw-declared jobs per image × GPU model, by image then model.
    pub images: Vec<ImageSuggestion>,
}

impl ManifestSuggestions {
    /// The entry for this workload type and model, if any finished job was observed.
    pub fn for_pair(&self, workload: &str, gpu_model: &str) -> Option<&WorkloadSuggestion> {
        self.workloads
            .iter()
            .find(|s| s.workload == workload && s.gpu_model == gpu_model)
    }
}

/// The suggested need for these stats: p95 plus the margin (10 %), rounded up to a multiple of
/// 256 MiB; with fewer than 3 records, no suggestion and the reason.
pub fn suggest(stats: &PeakStats) -> Result<i64, String> {
    if stats.n < SUGGESTION_MIN_SAMPLES {
        return Err(format!(
            "only {} finished job record(s) on this model; a suggestion needs at least {}",
            stats.n, SUGGESTION_MIN_SAMPLES
        ));
    }
    let with_margin = ceil_div(
        stats.p95_mib.max(0) * (100 + SUGGESTION_MARGIN_PERCENT),
        100,
    );
    let rounded = ceil_div(with_margin, SUGGESTION_ROUND_MIB) * SUGGESTION_ROUND_MIB;
    Ok(rounded.max(SUGGESTION_ROUND_MIB))
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(n: i64, p95_mib: i64) -> PeakStats {
        PeakStats {
            n,
            p50_mib: p95_mib,
            p95_mib,
            max_mib: p95_mib,
        }
    }

    #[test]
    fn p95_plus_ten_percent_rounded_up_to_256() {
        // 7000 × 1.1 = 7700 → 7936 (31 × 256).
        assert_eq!(suggest(&stats(3, 7000)), Ok(7936));
        // 6982 × 1.1 = 7680.2 → 7936; exactly 7680 (6981.8…) cannot happen in whole MiB.
        assert_eq!(suggest(&stats(5, 6982)), Ok(7936));
        // 6981 × 1.1 = 7679.1 → 7680 (30 × 256): a multiple stays as it is.
        assert_eq!(suggest(&stats(5, 6981)), Ok(7680));
        // Tiny peaks still suggest at least 256 MiB.
        assert_eq!(suggest(&stats(3, 0)), Ok(256));
        assert_eq!(suggest(&stats(3, 10)), Ok(256));
    }

    #[test]
    fn fewer_than_three_records_give_no_suggestion() {
        let why = suggest(&stats(2, 7000)).unwrap_err();
        assert!(why.contains("only 2"), "{why}");
        assert!(why.contains("at least 3"), "{why}");
    }
}
