//! A node's card tasks, started together by `gpuq serve` and by the tests' nodes: the card
//! observer ([`crate::server::gpu::observer`]) and what consumes its snapshots, the inventory sync,
//! the usage sampler and, on a node with a runner, the VRAM sampler and its policing.

use crate::server::gpu::observer::{self, Cards};
use crate::server::gpu::{self, GpuInventory};
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
pub async fn start(
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
        run.push(Box::pin(crate::server::vram::run(
            pool.clone(),
            cards.clone(),
            cfg,
            stop.clone(),
        )));
    }
    Ok((cards, run))
}
