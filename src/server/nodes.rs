//! Nodes: each `gpuq serve` registers its node and heartbeats under an epoch lease; admins list,
//! drain, undrain and forget nodes. A node is lost when its heartbeat is older than its lost time,
//! measured in database time, so no host's clock matters.

use crate::model::{AppError, AuditKind, NodeState, NodeView};
use crate::server::auth::CurrentUser;
use crate::server::db::{events, nodes};
use crate::server::error::OrInternal;
use serde_json::json;
use sqlx::PgPool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub use crate::server::db::nodes::Registration;

/// Whether this process still holds its node's lease. Shared by the heartbeat (which loses it when
/// the database says another epoch now holds the node) and the runner (which claims nothing new
/// without it). Cloning shares the flag.
/// The epoch, when there is one, also fences the runner's claims in the database itself: a claim
/// under an epoch the node no longer holds changes nothing, even in the moment between a frozen
/// process waking and its heartbeat being refused.
#[derive(Debug, Clone)]
pub struct Lease {
    held: Arc<AtomicBool>,
    epoch: Option<i64>,
}

impl Lease {
    /// A lease that is held with no epoch behind it (a runner without heartbeats, as in the
    /// benchmarks and tests).
    pub fn held() -> Self {
        Lease {
            held: Arc::new(AtomicBool::new(true)),
            epoch: None,
        }
    }

    /// The lease of a process that has just registered under `epoch`.
    pub fn of_epoch(epoch: i64) -> Self {
        Lease {
            epoch: Some(epoch),
            ..Lease::held()
        }
    }

    /// The epoch the lease was taken under, if any.
    pub fn epoch(&self) -> Option<i64> {
        self.epoch
    }

    /// Whether the lease is still held.
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    /// Marks the lease lost, for good: only a restart (a new registration) takes a new one.
    pub fn lose(&self) {
        self.held.store(false, Ordering::SeqCst);
    }
}

/// A registered node: the epoch its process holds and the lease flag the runner reads.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The node's name.
    pub name: String,
    /// The epoch this process holds.
    pub epoch: i64,
    /// The lease, held until a heartbeat is refused.
    pub lease: Lease,
}

/// Registers this process's node and takes a new lease (a fresh epoch).
pub async fn register(pool: &PgPool, reg: &Registration) -> Result<Registered, AppError> {
    let epoch = nodes::register(pool, reg)
        .await
        .or_internal("registering the node")?;
    tracing::info!(node = %reg.name, epoch, "node registered");
    Ok(Registered {
        name: reg.name.clone(),
        epoch,
        lease: Lease::of_epoch(epoch),
    })
}

/// One heartbeat. Returns false, and loses the lease, when another epoch holds the node; a
/// database error leaves the lease as it was (the next heartbeat tries again).
pub async fn beat(pool: &PgPool, node: &Registered) -> bool {
    match nodes::heartbeat(pool, &node.name, node.epoch).await {
        Ok(true) => true,
        Ok(false) => {
            tracing::error!(
                node = %node.name,
                epoch = node.epoch,
                "this process lost its node's lease (another process registered the name, or an \
                 admin forgot the node): it starts no new jobs; restart it to register again"
            );
            node.lease.lose();
            false
        }
        Err(e) => {
            tracing::warn!(node = %node.name, error = %e, "heartbeat failed; retrying");
            true
        }
    }
}

/// Heartbeats every `every` until `stop` turns true or the lease is lost.
pub async fn heartbeat(
    pool: PgPool,
    node: Registered,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if !beat(&pool, &node).await {
            return;
        }
    }
}

/// Every node, for signed-in users.
pub async fn list(pool: &PgPool) -> Result<Vec<NodeView>, AppError> {
    nodes::list(pool).await.or_internal("reading nodes")
}

/// Sets a node's admin state from `state` (`up` or `drained`), audited (admins; the edge checks
/// the role). A drained node runs its jobs out and takes no new ones.
pub async fn set_state(
    pool: &PgPool,
    user: &CurrentUser,
    name: &str,
    state: &str,
) -> Result<(), AppError> {
    let wanted: NodeState = state
        .parse()
        .map_err(|e: String| AppError::invalid("state", e))?;
    let kind = match wanted {
        NodeState::Up => AuditKind::NodeUndrain,
        NodeState::Drained => AuditKind::NodeDrain,
        NodeState::Lost => return Err(AppError::invalid(
            "state",
            "`lost` is not set: a node is lost when it stops heartbeating; give `up` or `drained`",
        )),
    };
    let mut tx = pool.begin().await.or_internal("beginning a node edit")?;
    if !nodes::set_state(&mut *tx, name, wanted)
        .await
        .or_internal("setting a node's state")?
    {
        return Err(AppError::NotFound(format!("no node `{name}`")));
    }
    events::commit_audited(
        tx,
        &user.username,
        kind,
        name,
        json!({ "state": wanted.as_str() }),
    )
    .await
    .or_internal("recording a node edit")?;
    Ok(())
}

/// Forgets a lost node (admins; the edge checks the role): its admitted, starting and running jobs
/// end `failed` with reason `node_lost`, their cards are released, its lease is taken away and its
/// cards offer nothing until it registers again. Refused (409) while the node is up or drained.
/// Returns how many jobs ended.
pub async fn forget(pool: &PgPool, user: &CurrentUser, name: &str) -> Result<usize, AppError> {
    let mut tx = pool.begin().await.or_internal("beginning a node forget")?;
    let node = nodes::get_for_update(&mut tx, name)
        .await
        .or_internal("reading a node")?
        .ok_or_else(|| AppError::NotFound(format!("no node `{name}`")))?;
    if node.state != NodeState::Lost {
        return Err(AppError::Conflict(format!(
            "node `{name}` is {} (its last heartbeat {} s ago, lost after {} s): only a lost node \
             can be forgotten",
            node.state, node.heartbeat_age_s, node.lost_after_s
        )));
    }
    let ended = nodes::forget(&mut tx, name, &user.username)
        .await
        .or_internal("forgetting a node")?;
    events::commit_audited(
        tx,
        &user.username,
        AuditKind::NodeForget,
        name,
        json!({ "jobs_failed": ended, "heartbeat_age_s": node.heartbeat_age_s }),
    )
    .await
    .or_internal("recording a node forget")?;
    tracing::warn!(node = %name, by = %user.username, jobs = ended.len(), "node forgotten");
    Ok(ended.len())
}
