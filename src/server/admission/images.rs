//! Which nodes have a queued job's image: the pass places a job only on a node whose puller
//! found its image there, so no card is held while an image is pulled.

use super::planner::WaitReason;
use crate::model::{image_ref, PullPolicy};
use crate::server::db::gpus::GpuRow;
use crate::server::db::images::{self, ImageState, NodeImage};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a pass knows about images on nodes.
pub(super) struct ImageGate {
    /// Nodes that pull their images; placement on any other node is not gated (its image is
    /// checked at launch, as before pulling existed).
    pullers: HashSet<String>,
    rows: HashMap<(String, String), NodeImage>,
    /// Cards per node: a job is pulled for, and waits on, the nodes with enough of them.
    cards: BTreeMap<String, usize>,
    pull: PullPolicy,
    cpu_node: String,
}

/// Where a queued job may go, as far as its image decides.
pub(super) enum Gate {
    /// Wherever the planner finds room.
    Any,
    /// Only on these nodes.
    Only(Vec<String>),
    /// Nowhere yet: it waits, its cards unheld.
    Wait(WaitReason),
    /// Nowhere ever: it fails with this reason.
    Fail(String),
}

impl ImageGate {
    /// Reads the pullers and their images inside the pass's transaction.
    pub(super) async fn read(
        tx: &mut Transaction<'_, Postgres>,
        cards: &[GpuRow],
        pull: PullPolicy,
        cpu_node: &str,
    ) -> Result<ImageGate> {
        let pullers = images::pullers(&mut **tx)
            .await
            .context("reading the nodes that pull images")?;
        let rows = if pullers.is_empty() {
            Vec::new()
        } else {
            images::all(&mut **tx)
                .await
                .context("reading the images on nodes")?
        };
        let mut per_node = BTreeMap::new();
        for c in cards {
            *per_node.entry(c.node.clone()).or_insert(0) += 1;
        }
        Ok(ImageGate {
            pullers: pullers.into_iter().collect(),
            rows: rows
                .into_iter()
                .map(|r| ((r.node.clone(), r.image_ref.clone()), r))
                .collect(),
            cards: per_node,
            pull,
            cpu_node: cpu_node.to_owned(),
        })
    }

    /// Where a job of `image` on `gpu_count` cards, queued at `queued_at`, may go now.
    pub(super) fn gate(&self, image: &str, gpu_count: i32, queued_at: DateTime<Utc>) -> Gate {
        if self.pullers.is_empty() {
            return Gate::Any;
        }
        let full = match image_ref::normalise(image) {
            Ok(f) => f,
            Err(e) => return Gate::Fail(format!("image {image} cannot be pulled: {e}")),
        };
        let candidates: Vec<&String> = if gpu_count <= 0 {
            vec![&self.cpu_node]
        } else {
            self.cards
                .iter()
                .filter(|(_, n)| **n >= gpu_count as usize)
                .map(|(node, _)| node)
                .collect()
        };
        if candidates.is_empty() {
            return Gate::Any;
        }
        let (mut ready, mut waiting, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for node in candidates.iter().copied() {
            if !self.pullers.contains(node) {
                ready.push(node.clone());
                continue;
            }
            let row = self.rows.get(&(node.clone(), full.clone()));
            match row.map(|r| (r, r.state())) {
                Some((r, Some(ImageState::Present))) if self.fresh(r, queued_at) => {
                    ready.push(node.clone())
                }
                Some((r, Some(ImageState::Failed))) if r.updated_at >= queued_at => failed.push(r),
                _ => waiting.push((node, row)),
            }
        }
        if ready.len() == candidates.len() {
            return Gate::Any;
        }
        if !ready.is_empty() {
            return Gate::Only(ready);
        }
        let furthest = waiting
            .iter()
            .max_by_key(|(_, r)| r.map_or(-1, |r| r.bytes_done));
        match furthest {
            Some((node, row)) => Gate::Wait(pulling(&full, node, *row)),
            None => {
                let r = failed.first();
                let why = r.and_then(|r| r.error.clone()).unwrap_or_else(|| {
                    format!("image {full} cannot be had on any node it could run on")
                });
                let node = r.map(|r| r.node.as_str()).unwrap_or_default();
                Gate::Fail(format!("{why} (node {node})"))
            }
        }
    }

    /// Whether a present image serves a job queued at `queued_at`: under `always` only an image
    /// whose tag was resolved after the job was queued does.
    fn fresh(&self, row: &NodeImage, queued_at: DateTime<Utc>) -> bool {
        self.pull != PullPolicy::Always || row.resolved_at.is_some_and(|at| at >= queued_at)
    }
}

fn pulling(image: &str, node: &str, row: Option<&NodeImage>) -> WaitReason {
    let note = match row.map(|r| (r, r.state())) {
        None => Some("the node has not begun the pull yet".to_string()),
        Some((r, Some(ImageState::Retrying))) => Some(format!(
            "{}; trying again at {}",
            r.error.as_deref().unwrap_or("registry unreachable"),
            r.retry_at
                .map(|t| t.format("%H:%M:%S UTC").to_string())
                .unwrap_or_else(|| "the next round".into())
        )),
        Some((_, Some(ImageState::Pulling))) => None,
        Some(_) => Some("the node looks again".to_string()),
    };
    WaitReason::Pulling {
        image: image.to_owned(),
        node: node.to_owned(),
        bytes_done: row.map_or(0, |r| r.bytes_done),
        bytes_total: row.and_then(|r| r.bytes_total),
        note,
    }
}
