//! The node's image collector: images gpuq pulled onto this node go once no job has used them
//! for the launch policy's `image_keep_days`, least recently used first, and the least recently
//! used go whenever the images gpuq pulled take more than `image_disk_max_gib`.
//!
//! Never removed: an image gpuq did not pull (an admin loaded it by hand: its `node_images` row
//! says `pulled_by_gpuq = false`, or it has no row at all), one a queued job names (it may be
//! placed here) or a job admitted, starting or running on this node names (by reference or by
//! being the same image), and one any container on the node, running or stopped, is made from.
//!
//! A removal takes the image's row away first, in one transaction under the admission pass's
//! lock after reading which images active jobs name, so no pass places a job on an image being
//! removed; then it asks dockerd (`docker rmi` without force, which refuses while a container
//! uses the image: the row is then put back). The collector and the node's puller share a lock
//! ([`Keeper`]), so the puller never finds an image the collector is about to remove and records
//! it as one an admin loaded. A later job naming a removed image has it pulled again, its cards
//! unheld meanwhile, as for any image the node lacks.
//!
//! It runs once when the node starts, after each pull the puller finishes, and every
//! [`COLLECT_EVERY`].

use crate::model::image_ref;
use crate::server::db::image_gc::{self, Pulled};
use crate::server::db::settings;
use crate::server::runtime::{Docker, ImageFacts};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex, MutexGuard, Notify};

/// The longest time between two collections.
pub const COLLECT_EVERY: Duration = Duration::from_secs(300);

/// What the node's puller and collector share: a lock each holds while it looks at and changes
/// the node's images, and a bell the puller rings after each pull.
#[derive(Clone, Default)]
pub struct Keeper {
    lock: Arc<Mutex<()>>,
    pulled: Arc<Notify>,
}

impl Keeper {
    /// Holds the node's images still until the guard is dropped.
    pub async fn hold(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    /// A pull ended: the collector looks again (the disk bound may be passed now).
    pub fn pulled(&self) {
        self.pulled.notify_one();
    }
}

/// Why an image was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// No job used it for `image_keep_days`.
    Unused,
    /// The images gpuq pulled took more than `image_disk_max_gib`.
    Disk,
}

impl Why {
    /// The reason's name in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Unused => "unused",
            Why::Disk => "disk",
        }
    }
}

/// An image the collector removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Its full reference.
    pub image_ref: String,
    /// Why.
    pub why: Why,
    /// Its size as dockerd reported it.
    pub bytes: u64,
}

/// One image gpuq pulled, weighed.
#[derive(Debug, Clone)]
struct Candidate {
    image_ref: String,
    last_use: DateTime<Utc>,
    facts: ImageFacts,
    /// Named by an active job, or made into a container: never removed.
    kept: bool,
}

/// Runs the collector of `node` until `stop` turns true.
pub async fn run(
    pool: PgPool,
    docker: Docker,
    node: String,
    keeper: Keeper,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(COLLECT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
            _ = keeper.pulled.notified() => {}
        }
        if let Err(e) = collect(&pool, &docker, &node, &keeper, Utc::now()).await {
            tracing::warn!(
                error = format!("{e:#}"),
                "the image collector's round failed; it looks again later"
            );
        }
    }
}

/// One collection on `node` as of `now`: removes what the launch policy says should go, and
/// returns what it removed.
pub async fn collect(
    pool: &PgPool,
    docker: &Docker,
    node: &str,
    keeper: &Keeper,
    now: DateTime<Utc>,
) -> Result<Vec<Removed>> {
    let _held = keeper.hold().await;
    let policy = settings::launch_policy(pool)
        .await
        .context("reading the launch policy")?;
    let keep = (policy.image_keep_days > 0)
        .then(|| chrono::Duration::days(i64::from(policy.image_keep_days)));
    let max_bytes = policy.image_disk_max_bytes();
    if keep.is_none() && max_bytes.is_none() {
        return Ok(Vec::new());
    }
    let rows = image_gc::pulled_on(pool, node)
        .await
        .context("reading the images gpuq pulled")?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let (weighed, gone) = weigh(docker, rows).await?;
    if !gone.is_empty() {
        // Removed behind gpuq's back: forget them, so that a job naming one has it pulled again
        // instead of being placed here and failing at launch.
        let forgotten = image_gc::forget(pool, node, &gone).await?;
        for row in forgotten {
            tracing::info!(image = %row.image_ref, %node, "an image gpuq pulled is no longer on the node; forgotten");
        }
    }
    if weighed.is_empty() {
        return Ok(Vec::new());
    }
    let in_use = docker
        .image_ids_in_use()
        .await
        .context("listing the node's containers")?;
    // A first look without the admission lock: most rounds remove nothing, and then never hold
    // up a pass. Only when something would go, the active jobs are read again under the lock (a
    // job may have come since) and the rows to remove are taken away, in one transaction.
    let mut ids = HashMap::new();
    let mut candidates = weighed;
    let named = image_gc::named_by_active_jobs(pool, node).await?;
    keep_named(docker, &named, &in_use, &mut candidates, &mut ids).await?;
    if choose(&candidates, now, keep, max_bytes).is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = pool.begin().await?;
    crate::server::admission::pass::lock(&mut tx).await?;
    let named = image_gc::named_by_active_jobs(&mut *tx, node).await?;
    keep_named(docker, &named, &in_use, &mut candidates, &mut ids).await?;
    let chosen = choose(&candidates, now, keep, max_bytes);
    if chosen.is_empty() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let refs: Vec<String> = chosen
        .iter()
        .map(|(i, _)| candidates[*i].image_ref.clone())
        .collect();
    let forgotten = image_gc::forget(&mut *tx, node, &refs).await?;
    tx.commit().await?;
    let by_ref: HashMap<&str, &image_gc::Forgotten> = forgotten
        .iter()
        .map(|f| (f.image_ref.as_str(), f))
        .collect();
    let mut removed = Vec::new();
    for (i, why) in chosen {
        let c = &candidates[i];
        let Some(row) = by_ref.get(c.image_ref.as_str()) else {
            continue;
        };
        match docker.remove_image(&c.image_ref).await {
            Ok(()) => {
                tracing::info!(
                    image = %c.image_ref,
                    %node,
                    reason = why.as_str(),
                    last_use = %c.last_use,
                    bytes = c.facts.size,
                    "removed an image gpuq pulled"
                );
                crate::server::metrics::count_image_removed(why.as_str(), c.facts.size);
                removed.push(Removed {
                    image_ref: c.image_ref.clone(),
                    why,
                    bytes: c.facts.size,
                });
            }
            Err(e) => {
                tracing::warn!(image = %c.image_ref, %node, error = %e, "could not remove an image gpuq pulled; it stays");
                image_gc::restore(pool, node, row).await?;
            }
        }
    }
    Ok(removed)
}

/// Each pulled image's facts from dockerd; the references dockerd no longer has come back apart.
async fn weigh(docker: &Docker, rows: Vec<Pulled>) -> Result<(Vec<Candidate>, Vec<String>)> {
    let (mut weighed, mut gone) = (Vec::new(), Vec::new());
    for row in rows {
        match docker.image_facts(&row.image_ref).await {
            Ok(Some(facts)) => weighed.push(Candidate {
                image_ref: row.image_ref,
                last_use: row.last_use,
                facts,
                kept: false,
            }),
            Ok(None) => gone.push(row.image_ref),
            Err(e) => return Err(e).context(format!("inspecting image {}", row.image_ref)),
        }
    }
    Ok((weighed, gone))
}

/// Marks kept every candidate that an active job names (by reference or by being the same image)
/// or that a container is made from.
async fn keep_named(
    docker: &Docker,
    named: &[String],
    in_use: &HashSet<String>,
    candidates: &mut [Candidate],
    ids: &mut HashMap<String, String>,
) -> Result<()> {
    named_image_ids(docker, named, candidates, ids).await?;
    let named: HashSet<String> = named
        .iter()
        .filter_map(|i| image_ref::normalise(i).ok())
        .collect();
    let named_ids: HashSet<&String> = named.iter().filter_map(|r| ids.get(r)).collect();
    for c in candidates.iter_mut() {
        c.kept = named.contains(&c.image_ref)
            || named_ids.contains(&c.facts.id)
            || in_use.contains(&c.facts.id);
    }
    Ok(())
}

/// Adds to `ids` the image id each of the active jobs' images has on this node, for those not
/// in it yet (a job pinned to a digest runs the same image as the tag gpuq pulled it by).
async fn named_image_ids(
    docker: &Docker,
    named: &[String],
    known: &[Candidate],
    ids: &mut HashMap<String, String>,
) -> Result<()> {
    for image in named {
        let Ok(full) = image_ref::normalise(image) else {
            continue;
        };
        if ids.contains_key(&full) {
            continue;
        }
        if let Some(c) = known.iter().find(|c| c.image_ref == full) {
            ids.insert(full, c.facts.id.clone());
            continue;
        }
        match docker.image_facts(&full).await {
            Ok(Some(facts)) => {
                ids.insert(full, facts.id);
            }
            Ok(None) => {}
            Err(e) => return Err(e).context(format!("inspecting image {full}")),
        }
    }
    Ok(())
}

/// Which candidates go, and why, in the order they go: those unused for longer than `keep`, least
/// recently used first; then, while the images left take more than `max_bytes` (each image id
/// counted once), the least recently used of the rest. A kept candidate never goes, but its size
/// counts.
fn choose(
    candidates: &[Candidate],
    now: DateTime<Utc>,
    keep: Option<chrono::Duration>,
    max_bytes: Option<u64>,
) -> Vec<(usize, Why)> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|a, b| {
        let (a, b) = (&candidates[*a], &candidates[*b]);
        (a.last_use, &a.image_ref).cmp(&(b.last_use, &b.image_ref))
    });
    let mut chosen: Vec<(usize, Why)> = Vec::new();
    if let Some(keep) = keep {
        for &i in &order {
            let c = &candidates[i];
            if !c.kept && c.last_use < now - keep {
                chosen.push((i, Why::Unused));
            }
        }
    }
    let Some(max) = max_bytes else {
        return chosen;
    };
    let mut left: Vec<usize> = order
        .iter()
        .copied()
        .filter(|i| !chosen.iter().any(|(j, _)| j == i))
        .collect();
    let total = |left: &[usize]| -> u64 {
        let mut sizes: HashMap<&str, u64> = HashMap::new();
        for &i in left {
            sizes.insert(&candidates[i].facts.id, candidates[i].facts.size);
        }
        sizes.values().sum()
    };
    while total(&left) > max {
        let Some(at) = left.iter().position(|&i| !candidates[i].kept) else {
            break;
        };
        chosen.push((left.remove(at), Why::Disk));
    }
    chosen
}

/// Records that `job` used its image on `node` now (at its launch and at its end), so the
/// collector counts `image_keep_days` from its last use.
pub async fn used(pool: &PgPool, node: &str, job: uuid::Uuid) {
    let touched = async {
        let Some(image) = image_gc::image_of(pool, job).await? else {
            return Ok(());
        };
        match image_ref::normalise(&image) {
            Ok(full) => image_gc::touch(pool, node, &full).await,
            Err(_) => Ok(()),
        }
    };
    if let Err(e) = touched.await {
        tracing::debug!(%job, error = %e, "could not record an image's use");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(days_ago: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap()
            - chrono::Duration::days(days_ago)
    }

    fn c(name: &str, days_ago: i64, id: &str, size: u64, kept: bool) -> Candidate {
        Candidate {
            image_ref: name.into(),
            last_use: at(days_ago),
            facts: ImageFacts {
                id: id.into(),
                size,
            },
            kept,
        }
    }

    fn names(cands: &[Candidate], chosen: &[(usize, Why)]) -> Vec<(String, Why)> {
        chosen
            .iter()
            .map(|(i, w)| (cands[*i].image_ref.clone(), *w))
            .collect()
    }

    #[test]
    fn images_unused_past_the_keep_go_oldest_first_and_kept_ones_stay() {
        let cands = vec![
            c("recent", 1, "a", 10, false),
            c("old", 20, "b", 10, false),
            c("older-but-kept", 30, "c", 10, true),
            c("oldest", 40, "d", 10, false),
        ];
        let chosen = choose(&cands, at(0), Some(chrono::Duration::days(14)), None);
        assert_eq!(
            names(&cands, &chosen),
            vec![("oldest".into(), Why::Unused), ("old".into(), Why::Unused)]
        );
        assert!(choose(&cands, at(0), None, None).is_empty());
    }

    #[test]
    fn past_the_disk_bound_the_least_recently_used_go_until_under() {
        let cands = vec![
            c("new", 1, "a", 100, false),
            c("mid", 2, "b", 100, false),
            c("kept", 5, "c", 100, true),
            c("old", 3, "d", 100, false),
        ];
        // 400 bytes, at most 250: the two least recently used that may go.
        let chosen = choose(&cands, at(0), None, Some(250));
        assert_eq!(
            names(&cands, &chosen),
            vec![("old".into(), Why::Disk), ("mid".into(), Why::Disk)]
        );
        // Under the bound: nothing.
        assert!(choose(&cands, at(0), None, Some(400)).is_empty());
        // Only kept ones left: it stops over the bound rather than remove them.
        let chosen = choose(&cands, at(0), None, Some(50));
        assert_eq!(chosen.len(), 3);
        assert!(chosen.iter().all(|(i, _)| !cands[*i].kept));
    }

    #[test]
    fn one_image_under_two_references_counts_once_and_frees_only_when_both_go() {
        let cands = vec![
            c("tag-a", 3, "same", 100, false),
            c("tag-b", 2, "same", 100, false),
            c("other", 1, "x", 100, false),
        ];
        // 200 bytes (the shared image once); at most 100: both references of it go.
        let chosen = choose(&cands, at(0), None, Some(100));
        assert_eq!(
            names(&cands, &chosen),
            vec![("tag-a".into(), Why::Disk), ("tag-b".into(), Why::Disk)]
        );
    }

    #[test]
    fn the_keep_and_the_bound_together_name_each_image_once() {
        let cands = vec![
            c("stale", 30, "a", 100, false),
            c("lru", 2, "b", 100, false),
            c("mru", 1, "c", 100, false),
        ];
        let chosen = choose(&cands, at(0), Some(chrono::Duration::days(14)), Some(100));
        assert_eq!(
            names(&cands, &chosen),
            vec![("stale".into(), Why::Unused), ("lru".into(), Why::Disk)]
        );
    }
}
