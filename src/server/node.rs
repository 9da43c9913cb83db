//! One node's tasks, built by one function ([`start`]) for `gpuq serve`, the tests and the
//! benchmarks alike: the notifier's LISTEN connection, the heartbeat, the scheduler, the runner
//! (connect, re-adopt, then launch) with its image puller and image collector, the card observer and what consumes its snapshots (the
//! inventory sync, the usage sampler and, on a node with a runner, the VRAM sampler and its
//! policing and idle reclaim), the start estimates, log retention, the metrics snapshot and the notification
//! delivery worker. The top of the domain: it only assembles.

use crate::server::admission::{estimate, scheduler, PassConfig};
use crate::server::gpu::observer::{self, Cards};
use crate::server::gpu::{self, GpuInventory};
use crate::server::metrics::Metrics;
use crate::server::nodes::{Lease, Registered};
use crate::server::notifier::Notifier;
use crate::server::runner::image_gc::{self, Keeper};
use crate::server::runner::pull::Puller;
use crate::server::runner::{DockerHealth, Runner, RunnerConfig};
use crate::server::runtime::{ensure_sim_devices, Docker};
use crate::server::usage::Sampling;
use crate::server::vram::VramConfig;
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What a node's card tasks are made of.
pub struct CardTasks {
    /// This node.
    pub node: String,
    /// Its cards.
    pub inventory: Arc<dyn GpuInventory>,
    /// Time between two writes of the inventory (`--gpu-refresh-s`).
    pub refresh_every: Duration,
    /// The usage sampler's period and retention.
    pub sampling: Sampling,
    /// The VRAM sampler, on a node with a runner; `None` elsewhere.
    pub vram: Option<VramConfig>,
    /// Where host processes are read (`/proc`).
    pub proc_root: PathBuf,
}

/// A task to spawn.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

impl CardTasks {
    /// The observer's tick: the shorter period of the inventory sync and the usage sampler, which
    /// take its newest snapshot. The VRAM sampler asks for a reading at each of its rounds, and
    /// each reading restarts the tick, so with rounds more often than the tick the cards are read
    /// once per round and never more.
    pub fn tick(&self) -> Duration {
        self.refresh_every.min(self.sampling.every)
    }
}

/// Takes the first reading and writes it (an error when the driver answers nothing), then returns
/// the observer's handle and the tasks, which run until `stop` turns true.
pub async fn start_cards(
    pool: &PgPool,
    tasks: CardTasks,
    stop: &watch::Receiver<bool>,
) -> Result<(Cards, Vec<Task>)> {
    let every = tasks.tick();
    let source = observer::Source {
        pool: pool.clone(),
        inventory: tasks.inventory,
        node: tasks.node.clone(),
        proc_root: tasks.proc_root,
    };
    let (observer, cards) = observer::start(source, every).await;
    gpu::sync::refresh(pool, &tasks.node, &cards.latest())
        .await
        .context("first GPU inventory refresh")?;
    let mut run: Vec<Task> = vec![
        Box::pin(observer.run(stop.clone())),
        Box::pin(crate::server::usage::sampler::run(
            pool.clone(),
            cards.clone(),
            tasks.node.clone(),
            tasks.sampling,
            stop.clone(),
        )),
        Box::pin(gpu::sync::run(
            pool.clone(),
            cards.clone(),
            tasks.node,
            tasks.refresh_every,
            stop.clone(),
        )),
    ];
    if let Some(cfg) = tasks.vram {
        // Idle reclaim runs where jobs run, beside VRAM policing (docs/admission.md#idle-cards).
        run.push(Box::pin(crate::server::idle::run(
            pool.clone(),
            cards.clone(),
            cfg.node.clone(),
            stop.clone(),
        )));
        run.push(Box::pin(crate::server::vram::run(
            pool.clone(),
            cards.clone(),
            cfg,
            stop.clone(),
        )));
    }
    Ok((cards, run))
}

/// How the runner reaches dockerd.
pub enum DockerAt {
    /// A connection already made (the tests, the benchmarks).
    Connected(Docker),
    /// This socket, or the local default; retried every second while dockerd does not answer.
    Socket(Option<String>),
}

/// A node's runner.
pub struct RunnerSetup {
    /// Its dockerd.
    pub docker: DockerAt,
    /// How it launches.
    pub cfg: RunnerConfig,
    /// Docker's state as the probes show it.
    pub health: Arc<DockerHealth>,
    /// The node's lease (`gpuq serve`): the runner claims nothing once it is lost.
    pub lease: Option<Lease>,
}

/// Everything one node runs besides its HTTP listener.
pub struct NodeSetup {
    /// The database.
    pub pool: PgPool,
    /// This process's notifier; [`start`] runs it.
    pub notifier: Notifier,
    /// The admission pass's settings.
    pub pass: PassConfig,
    /// This node's registration and heartbeat period (`gpuq serve`); `None` for the tests.
    pub heartbeat: Option<(Registered, Duration)>,
    /// The runner, on a node that runs jobs. Its scheduler starts once it has re-adopted what
    /// Docker still runs; without a runner the scheduler starts at once.
    pub runner: Option<RunnerSetup>,
    /// The card observer and its consumers.
    pub cards: Option<CardTasks>,
    /// The logs folder whose old logs are removed (`gpuq serve`).
    pub retention: Option<PathBuf>,
    /// The metrics snapshot, its node and period (`gpuq serve`).
    pub metrics: Option<(Metrics, String, Duration)>,
    /// The notification delivery worker (`gpuq serve`).
    pub notify: Option<crate::server::notify::NotifySetup>,
}

/// A node's running tasks.
pub struct NodeTasks {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    ready: watch::Receiver<Option<bool>>,
    /// The card observer's handle, when it runs.
    pub cards: Option<Cards>,
}

impl NodeTasks {
    /// Waits until the runner has re-adopted what Docker runs and the scheduler runs; an error
    /// when the runner stopped before (or there is none).
    pub async fn ready(&mut self) -> Result<()> {
        let ready = self
            .ready
            .wait_for(Option::is_some)
            .await
            .map(|r| *r == Some(true));
        match ready {
            Ok(true) => Ok(()),
            _ => anyhow::bail!("the runner did not start"),
        }
    }

    /// Stops every task and waits until each has (containers already running are left alone).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Starts a node's tasks. The card tasks take their first reading before this returns (an error
/// when the driver answers nothing); subscriptions are taken before the notifier runs, so nothing
/// said at start-up is missed.
pub async fn start(setup: NodeSetup) -> Result<NodeTasks> {
    let NodeSetup {
        pool,
        notifier,
        pass,
        heartbeat,
        runner,
        cards,
        retention,
        metrics,
        notify,
    } = setup;
    let (stop, rx) = watch::channel(false);
    let (ready_tx, ready) = watch::channel(None);
    let mut tasks = JoinSet::new();
    let cards = match cards {
        Some(c) => {
            let (handle, run) = start_cards(&pool, c, &rx).await?;
            run.into_iter().for_each(|t| {
                tasks.spawn(t);
            });
            Some(handle)
        }
        None => None,
    };
    if let Some((node, every)) = heartbeat {
        tasks.spawn(crate::server::nodes::heartbeat(
            pool.clone(),
            node,
            every,
            rx.clone(),
        ));
    }
    // Every node refreshes the start estimates; a node finding them fresh leaves them be.
    tasks.spawn(estimate::run(
        pool.clone(),
        pass.clone(),
        estimate::EstimateConfig::default(),
        rx.clone(),
    ));
    let sched = scheduler::run(pool.clone(), pass, notifier.subscribe(), rx.clone());
    match runner {
        Some(r) => {
            if let Some(c) = &cards {
                prepare_sim_devices(c)?;
            }
            let notes = notifier.subscribe();
            let pull_notes = notifier.subscribe();
            tasks.spawn(run_runner(
                pool.clone(),
                r,
                notifier.clone(),
                (notes, pull_notes),
                sched,
                ready_tx,
                rx.clone(),
            ));
        }
        None => {
            let _ = ready_tx.send(Some(false));
            tasks.spawn(sched);
        }
    }
    if let Some(logs) = retention {
        tasks.spawn(crate::server::jobs::retention::run(
            pool.clone(),
            logs,
            (Duration::from_secs(3600), Duration::from_secs(10)),
            notifier.subscribe(),
            rx.clone(),
        ));
    }
    if let Some((m, node, every)) = metrics {
        crate::server::metrics::snapshot::refresh(&pool, &m, &node).await;
        tasks.spawn(crate::server::metrics::snapshot::run(
            pool.clone(),
            m,
            node,
            every,
            rx.clone(),
        ));
    }
    if let Some(n) = notify {
        tasks.spawn(crate::server::notify::deliver::run(
            n,
            notifier.subscribe(),
            rx.clone(),
        ));
    }
    tasks.spawn(notifier.run(pool, rx));
    Ok(NodeTasks {
        stop,
        tasks,
        ready,
        cards,
    })
}

/// A node that only runs jobs (the tests' nodes, the benchmarks): a scheduler and a runner on an
/// already connected dockerd, without heartbeat, card tasks, retention or metrics. Returns once
/// the runner has re-adopted what Docker runs.
pub async fn start_runner(
    pool: PgPool,
    notifier: Notifier,
    pass: PassConfig,
    docker: Docker,
    cfg: RunnerConfig,
) -> Result<NodeTasks> {
    let mut tasks = start(NodeSetup {
        pool,
        notifier,
        pass,
        heartbeat: None,
        runner: Some(RunnerSetup {
            docker: DockerAt::Connected(docker),
            cfg,
            health: Default::default(),
            lease: None,
        }),
        cards: None,
        retention: None,
        metrics: None,
        notify: None,
    })
    .await?;
    tasks.ready().await?;
    Ok(tasks)
}

/// The runner: connect (retrying while Docker is unreachable), start the node's puller, re-adopt
/// what Docker still runs, and only then start admitting, then launch admitted jobs until stopped.
async fn run_runner(
    pool: PgPool,
    setup: RunnerSetup,
    notifier: Notifier,
    (notes, pull_notes): (
        crate::server::notifier::Subscription,
        crate::server::notifier::Subscription,
    ),
    scheduler: impl Future<Output = ()> + Send + 'static,
    ready: watch::Sender<Option<bool>>,
    mut stop: watch::Receiver<bool>,
) {
    let RunnerSetup {
        docker,
        cfg,
        health,
        lease,
    } = setup;
    let docker = match docker {
        DockerAt::Connected(d) => d,
        DockerAt::Socket(socket) => {
            health.report(Some(
                "connecting to Docker and re-adopting its containers".into(),
            ));
            loop {
                match Docker::connect_to(socket.as_deref()).await {
                    Ok(d) => break d,
                    Err(e) => {
                        let problem = e.to_string();
                        if health.problem().as_deref() != Some(problem.as_str()) {
                            tracing::warn!(error = %problem, "Docker unreachable: this node starts nothing until it answers");
                        }
                        health.report(Some(problem));
                    }
                }
                tokio::select! {
                    _ = stop.changed() => {
                        let _ = ready.send(Some(false));
                        return;
                    }
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    // Images of queued jobs are pulled from now on: before any card is held for them.
    // Images gpuq pulled and no job uses any more are removed by the collector, never while the
    // puller looks at them.
    let keeper = Keeper::default();
    let puller = Puller::new(
        pool.clone(),
        docker.clone(),
        cfg.node.clone(),
        cfg.secrets.clone(),
    )
    .sharing(keeper.clone());
    let puller = tokio::spawn(puller.run(pull_notes, stop.clone()));
    let collector = tokio::spawn(image_gc::run(
        pool.clone(),
        docker.clone(),
        cfg.node.clone(),
        keeper,
        stop.clone(),
    ));
    let runner = match lease {
        Some(lease) => Runner::leased(pool, docker, cfg, health, notifier, lease),
        None => Runner::new(pool, docker, cfg, health, notifier),
    };
    if !runner.start_up(&mut stop).await {
        let _ = ready.send(Some(false));
        puller.abort();
        collector.abort();
        return;
    }
    let scheduler = tokio::spawn(scheduler);
    let _ = ready.send(Some(true));
    runner.run(notes, stop).await;
    let _ = scheduler.await;
    let _ = puller.await;
    let _ = collector.await;
}

/// Simulated cards get their device nodes (`/dev/gpuq-sim<N>`) before a job is fenced to one.
fn prepare_sim_devices(cards: &Cards) -> Result<()> {
    if cards.kind() != gpu::InventoryKind::Simulated {
        return Ok(());
    }
    let snapshot = cards.latest();
    let count = snapshot
        .cards()?
        .iter()
        .map(|c| c.index as usize + 1)
        .max()
        .unwrap_or(0);
    ensure_sim_devices(count).context("creating the simulated cards' device nodes")?;
    Ok(())
}
