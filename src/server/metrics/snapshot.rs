//! The in-memory copy of the figures that live in Postgres, refreshed by a periodic task and
//! rendered by every scrape without a database round trip.

use super::Metrics;
use crate::model::JobStatus;
use crate::server::db::gpus;
use anyhow::{Context, Result};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};
use sqlx::PgPool;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

const MIB: f64 = 1024.0 * 1024.0;
const CARD_LABELS: &[&str] = &["node", "gpu", "model"];

/// One card of this node, as the ledger and the inventory last said.
#[derive(Debug, Clone)]
pub struct CardFigures {
    /// Node name.
    pub node: String,
    /// NVML's id, `GPU-…`.
    pub gpu: String,
    /// Model name.
    pub model: String,
    /// Physical memory, MiB.
    pub total_mib: i64,
    /// Committed by the ledger (live reservations), MiB.
    pub committed_mib: i64,
    /// Used as the inventory last observed; `None` when it could not tell.
    pub used_mib: Option<i64>,
    /// Used by processes outside gpuq's containers, MiB.
    pub foreign_mib: i64,
    /// What gpuq's jobs holding the card were last observed to use there, MiB; `None` when none
    /// of them has been observed.
    pub jobs_used_mib: Option<i64>,
    /// Jobs on the card above their commitment at the last reading.
    pub jobs_over: i64,
}

/// What a scrape renders from memory.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// This process's node.
    pub node: String,
    /// This node's cards.
    pub cards: Vec<CardFigures>,
    /// Jobs per status (every status, zero included), over the whole database.
    pub jobs: Vec<(JobStatus, i64)>,
    /// Jobs gpuq stopped for VRAM overuse, over the whole database.
    pub vram_stops: i64,
    /// Idle flags raised (`idle_flagged` events), over the whole database.
    pub idle_flags: i64,
    /// Jobs gpuq stopped idle, over the whole database.
    pub idle_stops: i64,
    /// When the figures were read (Unix seconds); `None` before the first refresh.
    pub taken_at: Option<f64>,
    /// Refreshes that failed since start.
    pub refresh_errors: u64,
    /// Every registered node: its name, whether it is not lost, and its heartbeat's age (seconds).
    pub nodes: Vec<(String, bool, i64)>,
}

impl Snapshot {
    /// Before the first refresh: the node is up, nothing else is known.
    pub fn empty(node: &str) -> Self {
        Snapshot {
            node: node.to_owned(),
            cards: Vec::new(),
            jobs: Vec::new(),
            vram_stops: 0,
            idle_flags: 0,
            idle_stops: 0,
            taken_at: None,
            refresh_errors: 0,
            nodes: Vec::new(),
        }
    }
}

/// Reads the snapshot's figures from the database.
pub async fn read(pool: &PgPool, node: &str) -> Result<Snapshot> {
    let observed: Vec<(uuid::Uuid, i64, i64)> = sqlx::query_as(
        "SELECT v.gpu_uuid, sum(v.used_mib)::bigint, \
                count(*) FILTER (WHERE v.used_mib > v.committed_mib) \
         FROM job_vram v JOIN reservations r ON r.job_id = v.job_id AND r.gpu_uuid = v.gpu_uuid \
                                             AND r.released_at IS NULL \
         GROUP BY v.gpu_uuid",
    )
    .fetch_all(pool)
    .await
    .context("reading observed VRAM for metrics")?;
    let vram_stops: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE stop_reason LIKE 'vram_overuse%' AND status = 'failed'",
    )
    .fetch_one(pool)
    .await
    .context("counting VRAM stops for metrics")?;
    let (idle_flags, idle_stops) = crate::server::db::idle::counts(pool)
        .await
        .context("counting idle flags and stops for metrics")?;
    let cards = gpus::list(pool)
        .await
        .context("reading cards for metrics")?
        .into_iter()
        .filter(|g| g.node == node && g.present)
        .map(|g| CardFigures {
            node: g.node,
            gpu: crate::model::gpu_id(&g.uuid),
            model: g.model,
            total_mib: g.total_mib,
            committed_mib: g.reserved_mib,
            used_mib: g.used_mib,
            foreign_mib: g.external_mib,
            jobs_used_mib: observed.iter().find(|o| o.0 == g.uuid).map(|o| o.1),
            jobs_over: observed.iter().find(|o| o.0 == g.uuid).map_or(0, |o| o.2),
        })
        .collect();
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM jobs GROUP BY status")
            .fetch_all(pool)
            .await
            .context("counting jobs for metrics")?;
    let jobs = JobStatus::ALL
        .iter()
        .map(|s| {
            let n = counts
                .iter()
                .find(|(name, _)| name == s.as_str())
                .map_or(0, |(_, n)| *n);
            (*s, n)
        })
        .collect();
    let nodes = crate::server::db::nodes::list(pool)
        .await
        .context("reading nodes for metrics")?
        .into_iter()
        .map(|n| {
            let up = n.state != crate::model::NodeState::Lost;
            (n.name, up, n.heartbeat_age_s)
        })
        .collect();
    Ok(Snapshot {
        node: node.to_owned(),
        cards,
        jobs,
        vram_stops,
        idle_flags,
        idle_stops,
        taken_at: Some(chrono::Utc::now().timestamp_millis() as f64 / 1000.0),
        refresh_errors: 0,
        nodes,
    })
}

/// Refreshes `metrics` from the database every `period` until `stop` turns true. A failed read
/// keeps the last snapshot (its timestamp says how old it is) and counts the failure.
pub async fn run(
    pool: PgPool,
    metrics: Metrics,
    node: String,
    period: Duration,
    stop: watch::Receiver<bool>,
) {
    crate::server::periodic::every(period, stop, || refresh(&pool, &metrics, &node)).await
}

/// Reads the figures into `metrics` once. `gpuq serve` does this before it listens, so the first
/// scrape already carries them. A failed read keeps the last snapshot and counts the failure.
pub async fn refresh(pool: &PgPool, metrics: &Metrics, node: &str) {
    match read(pool, node).await {
        Ok(s) => metrics.set_snapshot(s),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "metrics refresh failed");
            metrics.refresh_failed();
        }
    }
}

/// Renders the snapshot as gauges at every scrape.
pub(super) struct SnapshotCollector {
    snapshot: Arc<RwLock<Snapshot>>,
    templates: Vec<GaugeVec>,
}

struct Family {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

const FAMILIES: &[Family] = &[
    Family {
        name: "gpuq_gpu_memory_total_bytes",
        help: "Physical memory of the card, as the inventory (NVML or the simulation) reports it.",
        labels: CARD_LABELS,
    },
    Family {
        name: "gpuq_gpu_memory_committed_bytes",
        help: "Memory the ledger has committed on the card to admitted, starting and running jobs (their reservations).",
        labels: CARD_LABELS,
    },
    Family {
        name: "gpuq_gpu_memory_used_bytes",
        help: "Memory in use on the card as the inventory last observed it (NVML's used memory; absent when unknown).",
        labels: CARD_LABELS,
    },
    Family {
        name: "gpuq_gpu_memory_foreign_bytes",
        help: "Memory used on the card by processes outside gpuq's containers (NVML per-process memory minus the processes of gpuq's own containers; on simulated cards what the simulation was told). Admission subtracts it from what a card offers.",
        labels: CARD_LABELS,
    },
    Family {
        name: "gpuq_gpu_memory_jobs_used_bytes",
        help: "Memory gpuq's jobs holding the card were last observed to use on it (their processes, mapped to jobs by cgroup; on simulated cards what the simulation was told); absent before any reading.",
        labels: CARD_LABELS,
    },
    Family {
        name: "gpuq_gpu_jobs_over_commitment",
        help: "Jobs holding the card that used more than their commitment at the last reading.",
        labels: CARD_LABELS,
    },
    Family {
        name: "gpuq_vram_overuse_stops",
        help: "Jobs gpuq stopped because they used more VRAM than they committed on a card that ran short (whole database).",
        labels: &[],
    },
    Family {
        name: "gpuq_jobs",
        help: "Jobs per status in the whole database (every node's jobs).",
        labels: &["status"],
    },
    Family {
        name: "gpuq_node_up",
        help: "1 for every registered node that heartbeats (up or drained), 0 for a lost one; this process's own node is 1 before the first read.",
        labels: &["node"],
    },
    Family {
        name: "gpuq_node_heartbeat_age_seconds",
        help: "Seconds since each registered node's last heartbeat, in database time.",
        labels: &["node"],
    },
    Family {
        name: "gpuq_metrics_snapshot_timestamp_seconds",
        help: "When the database figures in this scrape were read (Unix time); absent before the first read.",
        labels: &[],
    },
    Family {
        name: "gpuq_metrics_refresh_errors",
        help: "Failed reads of the database figures since the process started (the last good figures stay).",
        labels: &[],
    },
    Family {
        name: "gpuq_idle_flags",
        help: "Times a running job was flagged idle: no process of it above the launch policy's idle_sm_percent, or none at all, for idle_after_min (whole database).",
        labels: &[],
    },
    Family {
        name: "gpuq_idle_stops",
        help: "Jobs gpuq stopped because their cards stayed idle under idle_action: stop (whole database).",
        labels: &[],
    },
];

fn gauges() -> prometheus::Result<Vec<GaugeVec>> {
    FAMILIES
        .iter()
        .map(|f| GaugeVec::new(Opts::new(f.name, f.help), f.labels))
        .collect()
}

impl SnapshotCollector {
    pub(super) fn new(snapshot: Arc<RwLock<Snapshot>>) -> prometheus::Result<Self> {
        Ok(SnapshotCollector {
            snapshot,
            templates: gauges()?,
        })
    }
}

impl Collector for SnapshotCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.templates.iter().flat_map(|g| g.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = match self.snapshot.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let Ok(g) = gauges() else {
            return Vec::new();
        };
        let [total, committed, used, foreign, jobs_used, over, stops, jobs, up, age, taken, errors, idle_flags, idle_stops] =
            &g[..]
        else {
            return Vec::new();
        };
        for c in &s.cards {
            let l = [c.node.as_str(), c.gpu.as_str(), c.model.as_str()];
            total.with_label_values(&l).set(c.total_mib as f64 * MIB);
            committed
                .with_label_values(&l)
                .set(c.committed_mib as f64 * MIB);
            if let Some(u) = c.used_mib {
                used.with_label_values(&l).set(u as f64 * MIB);
            }
            foreign
                .with_label_values(&l)
                .set(c.foreign_mib as f64 * MIB);
            if let Some(u) = c.jobs_used_mib {
                jobs_used.with_label_values(&l).set(u as f64 * MIB);
            }
            over.with_label_values(&l).set(c.jobs_over as f64);
        }
        stops
            .with_label_values::<&str>(&[])
            .set(s.vram_stops as f64);
        for (status, n) in &s.jobs {
            jobs.with_label_values(&[status.as_str()]).set(*n as f64);
        }
        // This process runs, whatever the last read said about its node.
        up.with_label_values(&[s.node.as_str()]).set(1.0);
        for (name, is_up, age_s) in &s.nodes {
            if name != &s.node {
                up.with_label_values(&[name.as_str()])
                    .set(if *is_up { 1.0 } else { 0.0 });
            }
            age.with_label_values(&[name.as_str()]).set(*age_s as f64);
        }
        if let Some(t) = s.taken_at {
            taken.with_label_values::<&str>(&[]).set(t);
        }
        errors
            .with_label_values::<&str>(&[])
            .set(s.refresh_errors as f64);
        idle_flags
            .with_label_values::<&str>(&[])
            .set(s.idle_flags as f64);
        idle_stops
            .with_label_values::<&str>(&[])
            .set(s.idle_stops as f64);
        g.iter().flat_map(|v| v.collect()).collect()
    }
}
