//! Usage over a time range as the usage page, the REST API and the CSV export see it.
//!
//! Unknown figures stay `None` all the way to the screen: a simulated card has no measured use,
//! and a chart that drew it as zero would claim an idle card.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Everything the usage page shows for one range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct UsageReport {
    /// Start of the range (inclusive).
    pub from: DateTime<Utc>,
    /// End of the range (exclusive).
    pub to: DateTime<Utc>,
    /// Width of one averaged point of the card series, in seconds.
    pub bucket_s: i64,
    /// How long samples are kept, in hours (a longer range is refused).
    pub retention_h: i64,
    /// One series per card that has samples in the range, by node and index.
    pub cards: Vec<CardSeries>,
    /// How long jobs admitted in the range waited in the queue.
    pub wait: WaitStats,
    /// Run time in the range per owner, most GPU-hours first.
    pub by_user: Vec<UsageTotal>,
    /// Run time in the range per workload type (`(custom VRAM)` for explicit VRAM requests).
    pub by_workload: Vec<UsageTotal>,
    /// GPU-hours reclaimed from idle jobs per owner, for the jobs stopped idle in the range
    /// (docs/admission.md#idle-cards), most first.
    #[serde(default)]
    pub reclaimed_by_user: Vec<ReclaimedTotal>,
}

/// GPU-hours reclaimed from one owner's idle jobs: for each job gpuq stopped idle, the share of
/// the cards it held × the time from its stop to its deadline (start + `timeout_s`), which it
/// could otherwise have held idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ReclaimedTotal {
    /// Owner login name.
    pub key: String,
    /// Jobs stopped idle in the range.
    pub jobs: i64,
    /// GPU-hours reclaimed.
    pub gpu_hours: f64,
}

/// One card's memory over the range: averaged points and figures over every raw sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct CardSeries {
    /// NVML-style id (`GPU-…`).
    pub uuid: String,
    /// Host.
    pub node: String,
    /// Device index on the host.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// Physical memory.
    pub total_mib: i64,
    /// Raw samples in the range.
    pub samples: i64,
    /// Mean reserved over the range.
    pub avg_reserved_mib: i64,
    /// Highest reserved in one sample.
    pub peak_reserved_mib: i64,
    /// Mean observed use, when any sample knew it.
    pub avg_used_mib: Option<i64>,
    /// Highest observed use, when any sample knew it.
    pub peak_used_mib: Option<i64>,
    /// Mean foreign use, when any sample knew it.
    pub avg_external_mib: Option<i64>,
    /// Mean busy percentage, when the driver reported it.
    pub avg_utilization_pct: Option<i64>,
    /// Points averaged over `bucket_s`, oldest first.
    pub points: Vec<CardPoint>,
}

/// One averaged point of a card series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct CardPoint {
    /// Start of the bucket.
    pub at: DateTime<Utc>,
    /// Mean reserved.
    pub reserved_mib: i64,
    /// Mean observed use (unknown when no sample of the bucket knew it).
    pub used_mib: Option<i64>,
    /// Mean foreign use (unknown when no sample of the bucket knew it).
    pub external_mib: Option<i64>,
    /// Mean busy percentage (unknown when not reported).
    pub utilization_pct: Option<i64>,
}

/// Queue waits (admitted − submitted) of the jobs admitted in the range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct WaitStats {
    /// Jobs admitted in the range.
    pub jobs: i64,
    /// Median wait in seconds (none when no job was admitted).
    pub p50_s: Option<f64>,
    /// 95th percentile wait in seconds.
    pub p95_s: Option<f64>,
    /// Longest wait in seconds.
    pub max_s: Option<f64>,
    /// Counts per wait bucket, shortest first; together they count every job.
    pub buckets: Vec<WaitBucket>,
}

/// One bar of the wait histogram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct WaitBucket {
    /// Human label (`< 10 s`, `≥ 1 h`).
    pub label: String,
    /// Waits in this bucket are shorter than this many seconds (none for the last bucket).
    pub below_s: Option<i64>,
    /// Jobs in the bucket.
    pub jobs: i64,
}

/// Run time of one owner or workload type within the range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct UsageTotal {
    /// Owner login name or workload type.
    pub key: String,
    /// Jobs that ran during the range.
    pub jobs: i64,
    /// Run hours × cards.
    pub gpu_hours: f64,
    /// Run hours × reserved GiB (over all the job's cards).
    pub vram_gib_hours: f64,
}

/// The usage page's data: the report and the chart options built from it on the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageView {
    /// The figures (also under every chart as a table).
    pub report: UsageReport,
    /// ECharts options (JSON) for the charts, so the browser bundle carries no chart code.
    pub charts: UsageCharts,
}

/// ECharts option documents, one per chart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageCharts {
    /// Per card: VRAM reserved, used and foreign over time, in the order of `report.cards`.
    pub cards: Vec<String>,
    /// The wait histogram.
    pub wait: String,
    /// GPU-hours and VRAM-hours per owner.
    pub by_user: String,
    /// GPU-hours and VRAM-hours per workload type.
    pub by_workload: String,
}

/// Label of jobs that asked for VRAM directly instead of naming a workload type.
pub const CUSTOM_VRAM: &str = "(custom VRAM)";
