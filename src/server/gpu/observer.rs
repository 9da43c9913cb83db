//! The card observer: the one task of a node that reads its cards (NVML, or the simulated cards),
//! once per tick, and publishes what it saw as a [`Snapshot`] on a `watch` channel.
//!
//! Its consumers never read the cards themselves: the inventory sync ([`super::sync`]) and the
//! usage sampler take the newest snapshot on their own timers; the VRAM sampler, whose rounds need
//! a reading of their own moment, asks for a fresh one ([`Cards::fresh`]), which restarts the
//! observer's tick, so on a node with a runner the cards are read once per VRAM round and not
//! again for the other two. NVML accounting (read when a job has ended) is asked of it too.
//!
//! Each process on a card is put to its job by one function, [`JobOwners::job_of`]: the container
//! in the process's `/proc/<pid>/cgroup`, matched against the containers the database records for
//! the jobs holding cards on this node. A process of no such job is foreign.

use super::{container_of_pid, AccountingPeak, GpuInfo, GpuInventory, InventoryKind, SkippedCard};
use crate::server::db::vram::{self, HeldCard};
use anyhow::{anyhow, Context, Result};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use uuid::Uuid;

/// One process on one card, with the job that owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenProcess {
    /// The card.
    pub gpu: Uuid,
    /// Host-namespace PID.
    pub pid: u32,
    /// Memory it uses on this card (MiB, rounded up); `None` when NVML withholds it.
    pub used_mib: Option<i64>,
    /// Listed as a graphics process (else compute). A process in both lists appears twice.
    pub graphics: bool,
    /// Its job, by [`JobOwners::job_of`]; `None` for a foreign process.
    pub job: Option<Uuid>,
}

/// What the observer saw at one reading.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Readings are numbered from 1 in the order they were taken.
    pub seq: u64,
    /// When the reading began.
    pub taken: Instant,
    /// The back-end read.
    pub kind: InventoryKind,
    /// The whole cards, each with its foreign memory (the memory of processes that are no job's
    /// holding that card); the error when the driver answered nothing.
    pub cards: Result<Vec<GpuInfo>, String>,
    /// Devices seen but not scheduled (MIG).
    pub skipped: Vec<SkippedCard>,
    /// The processes on the cards (none on simulated cards), each put to its job.
    pub processes: Vec<SeenProcess>,
    /// Why the processes could not be put to jobs (the database did not answer); they then all
    /// count as foreign, which makes admission offer less, never more.
    pub owners_unknown: Option<String>,
    /// Per card read, its processes' recent SM utilisation samples; `None` where they could not
    /// be read (simulated cards, a driver that does not support them). A card absent from the map
    /// was not read: nothing is known of it either.
    pub sm_samples: HashMap<Uuid, Option<Vec<super::SmSample>>>,
}

impl Snapshot {
    /// The cards, or the driver's failure (with context) when it answered nothing.
    pub fn cards(&self) -> Result<&[GpuInfo]> {
        self.cards
            .as_deref()
            .map_err(|e| anyhow!("{e}").context("reading the GPU inventory"))
    }
}

/// The one answer to "which job owns this host process?". Its container is read from
/// `/proc/<pid>/cgroup` and must be the container the database records for a job holding cards
/// on this node.
///
/// Chosen over asking Docker for the PIDs of gpuq-labelled containers (`docker top` each one):
/// it names the job, not only "one of ours", which is what VRAM policing needs; it looks up
/// exactly the PIDs NVML listed, when it listed them (a process started after a Docker listing
/// was foreign until the next one); it needs no answer from dockerd (with Docker down, every job's
/// memory counted as foreign); it trusts the runner's record, not a label anyone who may create
/// containers can set; and a container whose job already gave its cards back (a cancelled job not
/// yet stopped) is foreign, so its memory is not hidden from admission after its reservation
/// ended. It needs gpuq to see the host's `/proc`, as NVML's host PIDs do.
#[derive(Debug, Clone, Default)]
pub struct JobOwners {
    proc_root: PathBuf,
    by_container: HashMap<String, Uuid>,
    holds: HashSet<(Uuid, Uuid)>,
}

impl JobOwners {
    /// From the jobs holding cards on a node (`db::vram::held_on`), looking processes up under
    /// `proc_root` (normally `/proc`).
    pub fn from_held(held: &[HeldCard], proc_root: PathBuf) -> Self {
        JobOwners {
            proc_root,
            by_container: held
                .iter()
                .filter_map(|h| Some((h.container_id.as_deref()?.to_owned(), h.job_id)))
                .collect(),
            holds: held.iter().map(|h| (h.job_id, h.gpu_uuid)).collect(),
        }
    }

    /// The jobs holding cards on `node` now.
    pub async fn load(pool: &PgPool, node: &str, proc_root: PathBuf) -> Result<Self> {
        let held = vram::held_on(pool, node)
            .await
            .context("reading the jobs holding this node's cards")?;
        Ok(Self::from_held(&held, proc_root))
    }

    /// The job that owns host process `pid`; `None` when the process is gone, in no container,
    /// or in a container that is no job's holding cards here.
    pub fn job_of(&self, pid: u32) -> Option<Uuid> {
        if self.by_container.is_empty() {
            return None;
        }
        let container = container_of_pid(&self.proc_root, pid)?;
        self.by_container.get(&container).copied()
    }

    /// Whether `job` holds `gpu`: its memory there is counted by its reservation.
    pub fn holds(&self, job: Uuid, gpu: Uuid) -> bool {
        self.holds.contains(&(job, gpu))
    }
}

/// What the observer reads: this node's cards, and the database for who owns their processes.
#[derive(Clone)]
pub struct Source {
    /// The database (the jobs holding this node's cards).
    pub pool: PgPool,
    /// This node's cards.
    pub inventory: Arc<dyn GpuInventory>,
    /// This node's name.
    pub node: String,
    /// Where host processes are read (`/proc`; a test may point elsewhere).
    pub proc_root: PathBuf,
}

impl Source {
    /// One reading: the cards in one pass, then each process put to its job. The only call of
    /// [`GpuInventory::read`] in `gpuq serve`; one-shot users (tests, benchmarks) call it too.
    pub async fn read(&self) -> Snapshot {
        let taken = Instant::now();
        let kind = self.inventory.kind();
        let inv = Arc::clone(&self.inventory);
        let read = match tokio::task::spawn_blocking(move || inv.read()).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(format!("the inventory task failed: {e}")),
        };
        let reading = match read {
            Ok(r) => r,
            Err(e) => {
                return Snapshot {
                    seq: 0,
                    taken,
                    kind,
                    cards: Err(e),
                    skipped: Vec::new(),
                    processes: Vec::new(),
                    owners_unknown: None,
                    sm_samples: HashMap::new(),
                }
            }
        };
        let listed = reading.processes();
        let (owners, owners_unknown) = self.owners(!listed.is_empty()).await;
        let jobs: HashMap<u32, Option<Uuid>> = listed
            .iter()
            .map(|p| (p.pid, owners.job_of(p.pid)))
            .collect();
        let job_of = |pid: u32| jobs.get(&pid).copied().flatten();
        let cards =
            reading.cards_with(|p| job_of(p.pid).is_some_and(|job| owners.holds(job, p.gpu)));
        let sm_samples = reading
            .cards
            .iter()
            .map(|c| (c.info.uuid, c.sm_samples.clone()))
            .collect();
        let processes = listed
            .into_iter()
            .map(|p| SeenProcess {
                gpu: p.gpu,
                pid: p.pid,
                used_mib: p.used_mib,
                graphics: p.graphics,
                job: job_of(p.pid),
            })
            .collect();
        Snapshot {
            seq: 0,
            taken,
            kind,
            cards: Ok(cards),
            skipped: reading.skipped,
            processes,
            owners_unknown,
            sm_samples,
        }
    }

    /// The owners of this node's processes (asked of the database only when there are processes
    /// to put to jobs), or none and why not.
    async fn owners(&self, needed: bool) -> (JobOwners, Option<String>) {
        if !needed {
            return (JobOwners::default(), None);
        }
        match JobOwners::load(&self.pool, &self.node, self.proc_root.clone()).await {
            Ok(o) => (o, None),
            Err(e) => {
                let why = format!("{e:#}");
                tracing::warn!(error = %why, "the processes on the cards cannot be put to jobs; all count as foreign until they can");
                (JobOwners::default(), Some(why))
            }
        }
    }

    /// The accounting peaks the driver kept for `pids`.
    async fn accounting_peaks(&self, pids: Vec<u32>) -> Vec<AccountingPeak> {
        let inv = Arc::clone(&self.inventory);
        tokio::task::spawn_blocking(move || inv.accounting_peaks(&pids))
            .await
            .unwrap_or_default()
    }
}

/// What a consumer asks of the observer.
enum Ask {
    /// A reading taken now.
    Fresh(oneshot::Sender<Arc<Snapshot>>),
    /// NVML accounting's records of these PIDs.
    Accounting(Vec<u32>, oneshot::Sender<Vec<AccountingPeak>>),
}

/// A consumer's handle on the observer: the newest snapshot, and asking it for more.
#[derive(Clone)]
pub struct Cards {
    kind: InventoryKind,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    asks: mpsc::Sender<Ask>,
}

impl Cards {
    /// The back-end the observer reads.
    pub fn kind(&self) -> InventoryKind {
        self.kind
    }

    /// The newest snapshot (at most one tick old).
    pub fn latest(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshots.borrow())
    }

    /// Every snapshot as it is published.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshots.clone()
    }

    /// A reading taken after this call (the observer reads now, and its next tick is one period
    /// after this reading).
    pub async fn fresh(&self) -> Result<Arc<Snapshot>> {
        let (tx, rx) = oneshot::channel();
        self.asks
            .send(Ask::Fresh(tx))
            .await
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// NVML accounting's peaks of `pids` (empty where the driver keeps none).
    pub async fn accounting_peaks(&self, pids: Vec<u32>) -> Result<Vec<AccountingPeak>> {
        let (tx, rx) = oneshot::channel();
        self.asks
            .send(Ask::Accounting(pids, tx))
            .await
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }
}

fn stopped() -> anyhow::Error {
    anyhow!("the card observer has stopped")
}

/// The observer task, made by [`start`] and run by [`Observer::run`].
pub struct Observer {
    source: Source,
    every: Duration,
    publish: watch::Sender<Arc<Snapshot>>,
    asks: mpsc::Receiver<Ask>,
    seq: u64,
}

/// Takes the first reading (so the handle's [`Cards::latest`] is a real one from the start) and
/// returns the observer, to be run, and a handle for its consumers. `every` is the longest time
/// between two readings.
pub async fn start(source: Source, every: Duration) -> (Observer, Cards) {
    let mut first = source.read().await;
    first.seq = 1;
    let (publish, snapshots) = watch::channel(Arc::new(first));
    let (asks_tx, asks) = mpsc::channel(16);
    let cards = Cards {
        kind: source.inventory.kind(),
        snapshots,
        asks: asks_tx,
    };
    let observer = Observer {
        source,
        every,
        publish,
        asks,
        seq: 1,
    };
    (observer, cards)
}

/// [`start`], with the observer running until every handle is dropped (tests, benchmarks).
pub async fn spawn(source: Source, every: Duration) -> Cards {
    let (observer, cards) = start(source, every).await;
    let (keep, stop) = watch::channel(false);
    tokio::spawn(async move {
        observer.run(stop).await;
        drop(keep);
    });
    cards
}

impl Observer {
    /// Reads and publishes; returns what it published.
    async fn take(&mut self) -> Arc<Snapshot> {
        let mut snapshot = self.source.read().await;
        self.seq += 1;
        snapshot.seq = self.seq;
        let snapshot = Arc::new(snapshot);
        self.publish.send_replace(Arc::clone(&snapshot));
        snapshot
    }

    /// Reads every `every`, and when asked, until `stop` turns true or every handle is gone.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut next = Instant::now() + self.every;
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                ask = self.asks.recv() => match ask {
                    None => break,
                    Some(Ask::Fresh(reply)) => {
                        let snapshot = self.take().await;
                        next = Instant::now() + self.every;
                        let _ = reply.send(snapshot);
                    }
                    Some(Ask::Accounting(pids, reply)) => {
                        let _ = reply.send(self.source.accounting_peaks(pids).await);
                    }
                },
                _ = tokio::time::sleep_until(next) => {
                    self.take().await;
                    next = Instant::now() + self.every;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "observer_tests.rs"]
mod tests;
