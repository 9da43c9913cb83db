//! Prometheus metrics: what `/metrics` serves.
//!
//! A scrape never touches the database. Figures that live in Postgres (cards, the ledger, job
//! counts) are copied into an in-memory [`Snapshot`] by a periodic task ([`snapshot::run`]); a
//! scrape renders that copy, the timing histograms, and the process metrics read from `/proc`.
//!
//! The timing histograms are process-wide, like the process metrics: they are recorded where the
//! timed thing happens (the admission pass, the runner's start), which has no handle to pass
//! around, and every [`Metrics`] registry of the process serves the same ones.

pub mod snapshot;

pub use snapshot::Snapshot;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry, TextEncoder,
};
use std::sync::{Arc, LazyLock, RwLock};

/// The content type of the Prometheus text format written by [`Metrics::render`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    // Start-up only: the options are constants of this file.
    #[allow(clippy::expect_used)]
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("valid histogram options")
}

/// Submit → admission, seconds, observed once per admitted job by the pass that admits it.
pub static ADMISSION_WAIT: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "gpuq_admission_wait_seconds",
        "Time jobs waited in the queue, from submit to admission.",
        &[
            0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0,
        ],
    )
});

/// One admission pass, lock to commit, seconds.
pub static ADMISSION_PASS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "gpuq_admission_pass_seconds",
        "Duration of admission passes run by this process, from taking the lock to commit.",
        &[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
        ],
    )
});

/// Submit → container running, seconds, observed by the runner that started it.
pub static CONTAINER_START: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "gpuq_container_start_seconds",
        "Time from submit to the job's container running, for containers this process started.",
        &[
            0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 86400.0,
        ],
    )
});

/// Images this process's collector removed from its node, by why (`unused`: past
/// `image_keep_days`; `disk`: over `image_disk_max_gib`).
pub static IMAGES_REMOVED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    // Start-up only: the options are constants of this file.
    #[allow(clippy::expect_used)]
    IntCounterVec::new(
        Opts::new(
            "gpuq_images_removed_total",
            "Images gpuq pulled that this node's image collector removed, by reason.",
        ),
        &["reason"],
    )
    .expect("valid counter options")
});

/// Bytes of the images this process's collector removed (dockerd's size of each image).
pub static IMAGE_BYTES_REMOVED: LazyLock<IntCounter> = LazyLock::new(|| {
    // Start-up only: the options are constants of this file.
    #[allow(clippy::expect_used)]
    IntCounter::new(
        "gpuq_image_bytes_removed_total",
        "Size of the images this node's image collector removed, as dockerd reported each.",
    )
    .expect("valid counter options")
});

/// Counts an image the collector removed, for `reason`, of `bytes`.
pub fn count_image_removed(reason: &str, bytes: u64) {
    IMAGES_REMOVED.with_label_values(&[reason]).inc();
    IMAGE_BYTES_REMOVED.inc_by(bytes);
}

/// Records an admission pass's duration.
pub fn observe_pass(d: std::time::Duration) {
    ADMISSION_PASS.observe(d.as_secs_f64());
}

/// Records how long admitted jobs waited (seconds each).
pub fn observe_admission_waits(waits: &[f64]) {
    for w in waits {
        ADMISSION_WAIT.observe(w.max(0.0));
    }
}

/// Records the submit → running time (seconds, as Postgres recorded both) of a job this process
/// has just started.
pub fn observe_container_start(secs: f64) {
    CONTAINER_START.observe(secs.max(0.0));
}

/// One process's metrics registry: the snapshot of Postgres figures, the timing histograms and the
/// process metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    snapshot: Arc<RwLock<Snapshot>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A registry for the node `node`, with an empty snapshot until the first refresh.
    pub fn new(node: &str) -> prometheus::Result<Self> {
        let registry = Registry::new();
        let snapshot = Arc::new(RwLock::new(Snapshot::empty(node)));
        registry.register(Box::new(snapshot::SnapshotCollector::new(Arc::clone(
            &snapshot,
        ))?))?;
        for h in [&ADMISSION_WAIT, &ADMISSION_PASS, &CONTAINER_START] {
            registry.register(Box::new(Histogram::clone(h)))?;
        }
        // Both reasons are shown from the start, at 0, so a rate over them is defined.
        for reason in ["unused", "disk"] {
            IMAGES_REMOVED.with_label_values(&[reason]);
        }
        registry.register(Box::new(IntCounterVec::clone(&IMAGES_REMOVED)))?;
        registry.register(Box::new(IntCounter::clone(&IMAGE_BYTES_REMOVED)))?;
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Metrics { registry, snapshot })
    }

    /// Replaces the snapshot (the periodic task's work); the count of failed refreshes carries on.
    pub fn set_snapshot(&self, mut s: Snapshot) {
        let mut guard = match self.snapshot.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        s.refresh_errors = guard.refresh_errors;
        *guard = s;
    }

    /// Counts a failed refresh (the old snapshot stays, and says how old it is).
    pub fn refresh_failed(&self) {
        let mut guard = match self.snapshot.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        guard.refresh_errors += 1;
    }

    /// Every metric in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "encoding metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
