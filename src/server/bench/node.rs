//! The node the runner and VRAM benches drive: the real admission pass and runner of one
//! process, fenced launches against this machine's dockerd, on cards already registered.

use crate::server::admission::PassConfig;
use crate::server::node::{self, NodeTasks};
use crate::server::notifier::Notifier;
use crate::server::runner::RunnerConfig;
use crate::server::runtime::{Docker, LaunchMode};
use crate::server::Ctx;
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::time::Duration;
use uuid::Uuid;

/// Starts `node`'s scheduler and runner with `headroom_mib` kept free per card and `stop_grace`
/// between SIGTERM and SIGKILL. `bench` names the bench in the error when dockerd is unreachable.
pub(super) async fn start(
    pool: &PgPool,
    node: &str,
    headroom_mib: i64,
    stop_grace: Duration,
    bench: &str,
) -> Result<(Ctx, NodeTasks)> {
    let logs = std::env::temp_dir().join(format!("gpuq-bench-logs-{}", Uuid::new_v4()));
    let pass = PassConfig {
        headroom_mib,
        starvation_after: Duration::from_secs(3600),
        cpu_node: node.into(),
    };
    let notifier = Notifier::new(Duration::from_millis(2000));
    let ctx = Ctx::new(pool.clone(), pass.clone(), logs.clone(), notifier.clone());
    let docker = Docker::connect()
        .await
        .with_context(|| format!("the {bench} bench needs dockerd"))?;
    let cfg = RunnerConfig {
        node: node.into(),
        never_mount: vec![logs.clone()],
        logs_dir: logs,
        log_max_bytes: 1 << 20,
        stop_grace,
        mode: LaunchMode::Fenced,
        job_uids: Default::default(),
        secrets: Default::default(),
    };
    let local = node::start_runner(pool.clone(), notifier, pass, docker, cfg).await?;
    Ok((ctx, local))
}
