//! The node's puller: while jobs wait in the queue, their images are fetched onto this node, once
//! per image however many jobs name it, and what the node has is recorded in `node_images`, which
//! the admission pass reads before it holds any card (see `admission::images`).
//!
//! It looks again on every wake (a submit, a pass, a pull's end), on a missed note and on the
//! backstop; each pull runs as its own task and wakes the schedulers when it ends. A registry that
//! does not answer is tried again after a growing pause, [`RETRIES`] times in all, and never in a
//! tight loop: between tries the row says when the next one is due.

use super::image_gc::Keeper;
use crate::model::{image_ref, LaunchPolicy, LiveEvent, PullPolicy};
use crate::server::db::images::{self, ImageState, NodeImage};
use crate::server::db::lifecycle::Actor;
use crate::server::db::{events, jobs, settings};
use crate::server::notifier::{Note, Subscription};
use crate::server::registries::{self, OpenError, SecretsKey};
use crate::server::runtime::{Docker, PullAuth, PullError, PullProgress};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Pulls of one image tried before a registry that does not answer fails its jobs.
pub const RETRIES: i32 = 4;
/// The pause after the first unanswered pull; each later one doubles it (1, 2, 4 s).
const FIRST_PAUSE: Duration = Duration::from_secs(1);
/// The most often a pull's progress is written.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// Who the puller is in job events.
fn actor(node: &str) -> String {
    format!("puller@{node}")
}

/// One node's puller.
pub struct Puller {
    pool: PgPool,
    docker: Docker,
    node: String,
    /// The key stored registry passwords are opened with.
    secrets: SecretsKey,
    /// Images being pulled by this process now (one task each).
    pulling: HashSet<String>,
    tasks: JoinSet<String>,
    /// Shared with the node's image collector (`image_gc`).
    keeper: Keeper,
}

impl Puller {
    /// A puller of `node`'s images through `docker`, opening registry credentials with `secrets`.
    pub fn new(pool: PgPool, docker: Docker, node: String, secrets: SecretsKey) -> Puller {
        Puller {
            pool,
            docker,
            node,
            secrets,
            pulling: HashSet::new(),
            tasks: JoinSet::new(),
            keeper: Keeper::default(),
        }
    }

    /// The puller shares `keeper` with the node's image collector: it looks at the node's images
    /// only while the collector removes none, and tells it when a pull ended.
    pub fn sharing(mut self, keeper: Keeper) -> Puller {
        self.keeper = keeper;
        self
    }

    /// Enters the node among those that pull (so the pass waits for its images), then looks at
    /// the queue on every note until `stop` turns true. Pulls in flight are dropped on stop.
    pub async fn run(mut self, mut notes: Subscription, mut stop: watch::Receiver<bool>) {
        loop {
            match images::register_puller(&self.pool, &self.node).await {
                Ok(()) => break,
                Err(e) => tracing::warn!(error = %e, "could not enter this node among the pullers"),
            }
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        loop {
            let keeper = self.keeper.clone();
            let held = keeper.hold().await;
            let round = self.round().await;
            drop(held);
            if let Err(e) = round {
                tracing::warn!(error = %e, "the puller's round failed; it looks again on the next note");
            }
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    Some(done) = self.tasks.join_next() => {
                        if let Ok(image) = done {
                            self.pulling.remove(&image);
                        }
                        self.keeper.pulled();
                        break;
                    }
                    note = notes.recv() => match note {
                        Note::Wake | Note::Missed | Note::Backstop => break,
                        Note::Event(_) => {}
                    },
                }
            }
        }
    }

    /// One look at the queue: every image a queued job that could run here names, and not here
    /// yet, is pulled (or found, or refused).
    async fn round(&mut self) -> sqlx::Result<()> {
        let policy = settings::launch_policy(&self.pool).await?;
        let queued = images::queued(&self.pool).await?;
        if queued.is_empty() {
            return Ok(());
        }
        let cards = images::cards_on(&self.pool, &self.node).await?;
        // Image → the newest queued job naming it.
        let mut wanted: HashMap<String, DateTime<Utc>> = HashMap::new();
        for job in &queued {
            if job.gpu_count > 0 && i64::from(job.gpu_count) > cards {
                continue;
            }
            let refused = match image_ref::normalise(&job.image) {
                Ok(_) if !policy.image_allowed(&job.image) => Some(format!(
                    "image {} is no longer allowed by the launch policy",
                    job.image
                )),
                Ok(full) => {
                    let newest = wanted.entry(full).or_insert(job.created_at);
                    *newest = (*newest).max(job.created_at);
                    None
                }
                Err(e) => Some(format!("image {} cannot be pulled: {e}", job.image)),
            };
            if let Some(reason) = refused {
                self.fail(job.id, &reason).await?;
            }
        }
        let rows: HashMap<String, NodeImage> = images::on_node(&self.pool, &self.node)
            .await?
            .into_iter()
            .map(|r| (r.image_ref.clone(), r))
            .collect();
        let now = Utc::now();
        for (image, newest) in wanted {
            if self.pulling.contains(&image) {
                continue;
            }
            let row = rows.get(&image);
            if let Some(attempts) = self.next_attempt(&policy, row, newest, now) {
                self.start(image, attempts, policy.pull).await?;
            }
        }
        Ok(())
    }

    /// Whether to look for (and maybe pull) an image now, and which attempt that is: `None`
    /// while what the row says still holds for every job that wants the image.
    fn next_attempt(
        &self,
        policy: &LaunchPolicy,
        row: Option<&NodeImage>,
        newest: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Option<i32> {
        let Some(row) = row else { return Some(1) };
        match row.state() {
            Some(ImageState::Present) => {
                let stale = policy.pull == PullPolicy::Always
                    && row.resolved_at.is_none_or(|at| at < newest);
                stale.then_some(1)
            }
            Some(ImageState::Retrying) => row
                .retry_at
                .is_none_or(|at| at <= now)
                .then_some(row.attempts + 1),
            // A failure judged the jobs queued before it; a newer job gets a fresh try.
            Some(ImageState::Failed) => (row.updated_at < newest).then_some(1),
            // A pull this process does not run: left by a process that stopped mid-pull.
            Some(ImageState::Pulling) | None => Some(1),
        }
    }

    /// Looks for the image here and pulls it if the policy says so, in a task of its own.
    async fn start(&mut self, image: String, attempts: i32, pull: PullPolicy) -> sqlx::Result<()> {
        let local = match pull {
            PullPolicy::Always => None,
            _ => match self.docker.local_image(&image).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(%image, error = %e, "could not inspect an image; looking again later");
                    return Ok(());
                }
            },
        };
        if let Some(found) = local {
            images::set_present(&self.pool, &self.node, &image, &found.digest, None).await?;
            return events::wake(&self.pool, "image present").await;
        }
        if pull == PullPolicy::Never {
            let why = format!(
                "image {image} is not present on node {} and the launch policy says pull: never \
                 (local images only)",
                self.node
            );
            images::set_failed(&self.pool, &self.node, &image, &why).await?;
            return events::wake(&self.pool, "image missing").await;
        }
        let started = images::set_pulling(&self.pool, &self.node, &image, attempts).await?;
        events::wake(&self.pool, "image pulling").await?;
        tracing::info!(%image, attempt = attempts, "pulling an image for queued jobs");
        self.pulling.insert(image.clone());
        let (pool, docker, node) = (self.pool.clone(), self.docker.clone(), self.node.clone());
        let secrets = self.secrets.clone();
        self.tasks.spawn(async move {
            let outcome = match credentials(&pool, &secrets, &image).await {
                Ok(auth) => pull_one(&pool, &docker, &node, &image, auth.as_ref())
                    .await
                    .map_err(|e| with_credentials_said(e, &image, auth.as_ref())),
                Err(e) => Err(e),
            };
            if let Err(e) = record(&pool, &docker, &node, &image, attempts, started, outcome).await
            {
                tracing::warn!(%image, error = %e, "could not record a pull's end; it is tried again");
            }
            image
        });
        Ok(())
    }

    async fn fail(&self, job: uuid::Uuid, reason: &str) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
        if jobs::fail_queued(&mut tx, job, Actor::Runner, &actor(&self.node), reason).await? {
            tracing::warn!(%job, %reason, "a queued job failed before its image was pulled");
        }
        tx.commit().await
    }
}

/// The stored credentials of `image`'s registry, opened, if it has any. Credentials that do not
/// open fail the pull with a reason naming the registry (never retried: a key does not change by
/// itself); a database out of reach is tried again like a registry that does not answer.
async fn credentials(
    pool: &PgPool,
    secrets: &SecretsKey,
    image: &str,
) -> Result<Option<PullAuth>, PullError> {
    match registries::for_image(pool, secrets, image).await {
        Ok(found) => Ok(found.map(|a| PullAuth {
            server: a.host,
            username: a.username,
            password: a.password,
        })),
        Err(e @ OpenError::Database { .. }) => Err(PullError::Unreachable(e.to_string())),
        Err(e) => {
            tracing::warn!(%image, error = %e, "stored registry credentials cannot be used");
            Err(PullError::Refused(e.to_string()))
        }
    }
}

/// A refusal says whether credentials were sent, and whose (never the password).
fn with_credentials_said(e: PullError, image: &str, auth: Option<&PullAuth>) -> PullError {
    match (e, auth) {
        (PullError::Unauthorized(m), Some(a)) => PullError::Unauthorized(format!(
            "{m} (sent the stored credentials of registry {}, user {})",
            a.server, a.username
        )),
        (PullError::Unauthorized(m), None) => PullError::Unauthorized(format!(
            "{m} (no credentials are stored for registry {}; an admin adds them with \
             `gpuq registry login`)",
            crate::model::registry_of_image(image).unwrap_or_default()
        )),
        (other, _) => other,
    }
}

/// Pulls `image` (with `auth`, when its registry has credentials), writing its progress at most
/// every [`PROGRESS_EVERY`].
async fn pull_one(
    pool: &PgPool,
    docker: &Docker,
    node: &str,
    image: &str,
    auth: Option<&PullAuth>,
) -> Result<(), PullError> {
    let (tx, mut rx) = watch::channel(PullProgress::default());
    let pull = docker.pull(image, &tx, auth);
    tokio::pin!(pull);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    loop {
        tokio::select! {
            outcome = &mut pull => return outcome,
            _ = tick.tick() => {
                if rx.has_changed().unwrap_or(false) {
                    let p = *rx.borrow_and_update();
                    match images::set_progress(pool, node, image, p.bytes_done, p.bytes_total).await {
                        Ok(()) => announce_progress(pool, image).await,
                        Err(e) => tracing::debug!(error = %e, "could not record a pull's progress"),
                    }
                }
            }
        }
    }
}

/// Tells the live streams that the queued jobs naming `image` have moved on in their wait (their
/// pages read the bytes in the wait reason again). Best effort: a missed one is made good by the
/// next, half a second later.
async fn announce_progress(pool: &PgPool, image: &str) {
    let queued = match images::queued(pool).await {
        Ok(q) => q,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the queue to announce a pull's progress");
            return;
        }
    };
    for job in queued {
        if image_ref::normalise(&job.image).is_ok_and(|full| full == image) {
            if let Err(e) = events::announce(pool, &LiveEvent::pulling(job.id)).await {
                tracing::debug!(error = %e, "could not announce a pull's progress");
                return;
            }
        }
    }
}

/// Writes how a pull ended and wakes the schedulers: present (with its digest), to be tried
/// again after a pause, or failed with a reason that names the image.
async fn record(
    pool: &PgPool,
    docker: &Docker,
    node: &str,
    image: &str,
    attempts: i32,
    started: DateTime<Utc>,
    outcome: Result<(), PullError>,
) -> sqlx::Result<()> {
    match outcome {
        Ok(()) => match docker.local_image(image).await {
            Ok(Some(found)) => {
                tracing::info!(%image, digest = %found.digest, "pulled an image");
                images::set_present(pool, node, image, &found.digest, Some(started)).await?;
            }
            Ok(None) => {
                let why = format!("image {image} was pulled but is not on node {node}");
                images::set_failed(pool, node, image, &why).await?;
            }
            Err(e) => {
                let why = format!("Docker unreachable after pulling {image}: {e}");
                retry_or_fail(pool, node, image, attempts, &why).await?;
            }
        },
        Err(PullError::Unreachable(m)) => {
            let why = format!("the registry of image {image} is unreachable: {m}");
            retry_or_fail(pool, node, image, attempts, &why).await?;
        }
        Err(PullError::NotFound(m)) => {
            let why = format!("image {image} was not found in its registry: {m}");
            images::set_failed(pool, node, image, &why).await?;
        }
        Err(PullError::Unauthorized(m)) => {
            let why = format!("unauthorized: the registry refused to hand out image {image}: {m}");
            images::set_failed(pool, node, image, &why).await?;
        }
        Err(PullError::Refused(m)) => {
            let why = format!("image {image} could not be pulled: {m}");
            images::set_failed(pool, node, image, &why).await?;
        }
    }
    events::wake(pool, "image pulled").await
}

async fn retry_or_fail(
    pool: &PgPool,
    node: &str,
    image: &str,
    attempts: i32,
    why: &str,
) -> sqlx::Result<()> {
    if attempts >= RETRIES {
        let why = format!("{why} (tried {attempts} times)");
        return images::set_failed(pool, node, image, &why).await;
    }
    let pause = FIRST_PAUSE * 2u32.saturating_pow(attempts.saturating_sub(1) as u32);
    let at = Utc::now() + chrono::Duration::from_std(pause).unwrap_or(chrono::Duration::zero());
    tracing::warn!(%image, attempt = attempts, ?pause, "registry unreachable; trying again later");
    images::set_retrying(pool, node, image, why, at).await
}
