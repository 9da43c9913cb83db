//! Why a job waits, as data for the API and as words for its owner.

use crate::model::{budget_used_up, Budget, BudgetScope, BudgetUse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Pass, Shape};

/// Names a card the way users recognise it, without the live counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardRef {
    /// Stable identity for tooling.
    pub uuid: Uuid,
    /// Host the card is on.
    pub node: String,
    /// Device index on that host, as `nvidia-smi` shows it.
    pub index: u32,
    /// Marketing name, so users see which model was too small.
    pub model: String,
}

/// The card that came closest to fitting, so users can judge the gap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BestCard {
    /// The card.
    pub card: CardRef,
    /// Its free VRAM at the job's turn.
    pub free_mib: i64,
}

/// Per-card need across the models a job can use; per-model manifests make
/// a single number misleading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeedRange {
    /// Smallest per-card need over the online models the job runs on.
    pub min_mib: i64,
    /// Largest per-card need over those models.
    pub max_mib: i64,
}

/// Structured reason a job was not admitted; stable enough to store and
/// to branch on, with `message()` for humans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitReason {
    /// No online card is of a model the job's workload can run on.
    NoEligibleCard,
    /// Single-card job: no usable card has enough free VRAM.
    InsufficientVram {
        /// Need on the best card's model (the smallest need if none).
        need_mib: i64,
        /// Only idle cards count for exclusive jobs.
        exclusive: bool,
        /// The usable card with the smallest shortfall, if any.
        best: Option<BestCard>,
    },
    /// Multi-card job: no node has enough qualifying cards at once.
    NotEnoughCards {
        /// Cards wanted on one node.
        gpu_count: u32,
        /// Per-card need over the eligible models.
        need: NeedRange,
        /// Only idle cards count for exclusive jobs.
        exclusive: bool,
        /// Node with the most qualifying cards, if any has one.
        best_node: Option<String>,
        /// How many qualifying cards that node has.
        best_count: u32,
    },
    /// The job would fit, but on cards held for an earlier starving job.
    HeldForOlderJob {
        /// The job holding the cards.
        holder: Uuid,
    },
    /// The job waited past the starvation limit and now holds cards, so
    /// later jobs cannot keep taking them.
    HoldingCards {
        /// Why it still does not fit.
        waiting: Box<WaitReason>,
        /// Cards held for it, all on one node.
        held: Vec<CardRef>,
    },
    /// Backfill: the job would fit, but on cards kept for a job ahead of it from the moment that
    /// job can start, and its timeout runs past that moment.
    ReservedForHead {
        /// The job the cards are kept for.
        head: Uuid,
        /// When that job can start at the latest as things stand, ms since the epoch.
        start_by_ms: i64,
        /// The longest timeout, ms, that ends a job started now before that moment (0 or less:
        /// none does).
        max_timeout_ms: i64,
    },
    /// A launch-policy cap holds the job back before planning: its owner's running jobs, or the
    /// jobs without GPUs on the node that runs them.
    OverCap {
        /// The policy field (`max_running_per_user`, `max_cpu_jobs_per_node`).
        cap: String,
        /// Its value.
        limit: u32,
    },
    /// Its owner's account is disabled: held until an admin enables it again.
    OwnerDisabled,
    /// Its image is on none of the nodes it could run on yet: it is being pulled (or waits for a
    /// retry), and no card is held meanwhile.
    Pulling {
        /// The full image reference.
        image: String,
        /// The node whose pull has come furthest.
        node: String,
        /// Bytes fetched there.
        bytes_done: i64,
        /// Bytes to fetch there, once the registry said.
        bytes_total: Option<i64>,
        /// Why it waits besides the bytes (`registry unreachable, retried at …`), if it does.
        note: Option<String>,
    },
    /// Its image cannot be had on any node it could run on: the pass fails it with `reason`.
    ImageUnavailable {
        /// Why, naming the image.
        reason: String,
    },
    /// It depends on a job that has not ended the way it waits for yet.
    Dependency {
        /// The parent job it waits for (the first, in the order they were given).
        parent: Uuid,
        /// The parent's status now.
        status: String,
    },
    /// Its array already has `limit` elements admitted, starting or running.
    ArrayLimit {
        /// The array's running limit (`%N`).
        limit: u32,
    },
    /// A dependency can no longer hold: the pass cancels it with `reason`.
    DependencyBroken {
        /// Why, naming the parent and how it ended.
        reason: String,
    },
    /// Its owner is past a hard budget (their own or their team's): it waits until the period
    /// resets or an admin raises the budget.
    BudgetExhausted {
        /// A team's budget or the owner's own.
        scope: BudgetScope,
        /// The team's name or the owner's.
        name: String,
        /// The budget.
        budget: Budget,
        /// GPU-hours used this period.
        used_gpu_hours: f64,
        /// When the period ends and the budget starts again.
        resets_at: DateTime<Utc>,
    },
}

// The GPU-hours in `BudgetExhausted` are finite (read from Postgres sums and checked budgets), so
// equality is total.
impl Eq for WaitReason {}

impl WaitReason {
    /// Plain words for the job's owner (CLI, web UI, notifications).
    pub fn message(&self) -> String {
        match self {
            WaitReason::NoEligibleCard => {
                "no card of a model this workload runs on is online".to_string()
            }
            WaitReason::InsufficientVram {
                need_mib,
                exclusive,
                best,
            } => {
                let card = if *exclusive {
                    "idle card (exclusive use)"
                } else {
                    "card"
                };
                match best {
                    Some(b) => format!(
                        "needs {need_mib} MiB on 1 {card}; best free: {} MiB on GPU {} ({}, node {})",
                        b.free_mib, b.card.index, b.card.model, b.card.node
                    ),
                    None if *exclusive => format!(
                        "needs {need_mib} MiB on 1 {card}; no card of a suitable model is idle"
                    ),
                    None => format!(
                        "needs {need_mib} MiB on 1 {card}; every card of a suitable model is held by an exclusive job"
                    ),
                }
            }
            WaitReason::NotEnoughCards {
                gpu_count,
                need,
                exclusive,
                best_node,
                best_count,
            } => {
                let cards = if *exclusive {
                    "idle cards (exclusive use)"
                } else {
                    "cards"
                };
                let each = if need.min_mib == need.max_mib {
                    format!("{} MiB each", need.min_mib)
                } else {
                    format!("{}-{} MiB each (by model)", need.min_mib, need.max_mib)
                };
                let best = match best_node {
                    Some(node) if *best_count > 0 => {
                        let s = if *best_count == 1 { "card" } else { "cards" };
                        format!("{best_count} such {s} on node {node}")
                    }
                    _ => "no such card on any node".to_string(),
                };
                format!("needs {gpu_count} {cards} with {each} on one node; best: {best}")
            }
            WaitReason::HeldForOlderJob { holder } => {
                format!("cards held for an older waiting job ({holder})")
            }
            WaitReason::HoldingCards { waiting, held } => {
                let gpus: Vec<String> = held.iter().map(|c| c.index.to_string()).collect();
                let node = held.first().map(|c| c.node.as_str()).unwrap_or_default();
                format!(
                    "{}; waited past the starvation limit, so it holds GPU {} on node {node}",
                    waiting.message(),
                    gpus.join(",")
                )
            }
            WaitReason::ReservedForHead {
                head,
                start_by_ms,
                max_timeout_ms,
            } => {
                let at = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(*start_by_ms)
                    .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
                    .unwrap_or_else(|| "later".to_string());
                let mut text =
                    format!("its cards are kept for job {head}, which can start by {at}");
                if *max_timeout_ms > 0 {
                    text.push_str(&format!(
                        "; a job with a timeout of at most {} could start now",
                        span(*max_timeout_ms)
                    ));
                }
                text
            }
            WaitReason::OverCap { cap, limit } if cap == "max_cpu_jobs_per_node" => format!(
                "{limit} jobs without GPUs already run on this node, the most the launch policy \
                 allows ({cap})"
            ),
            WaitReason::OverCap { cap, limit } => format!(
                "its owner already has {limit} jobs running, the most the launch policy allows \
                 ({cap})"
            ),
            WaitReason::OwnerDisabled => "held: its owner's account is disabled (user_disabled); \
                                          it runs once an admin enables the account again"
                .to_string(),
            WaitReason::Pulling {
                image,
                node,
                bytes_done,
                bytes_total,
                note,
            } => {
                let mut text = format!("pulling image {image} on node {node}");
                if let Some(total) = bytes_total.filter(|t| *t > 0) {
                    text.push_str(&format!(": {}", of_total(*bytes_done, total)));
                }
                if let Some(note) = note {
                    text.push_str(&format!(" ({note})"));
                }
                text
            }
            WaitReason::ImageUnavailable { reason } => reason.clone(),
            WaitReason::Dependency { parent, status } => {
                format!("waiting for job {parent} ({status})")
            }
            WaitReason::ArrayLimit { limit } => format!(
                "its array already has {limit} jobs admitted or running, its running limit (%{limit})"
            ),
            WaitReason::DependencyBroken { reason } => reason.clone(),
            WaitReason::BudgetExhausted {
                scope,
                name,
                budget,
                used_gpu_hours,
                resets_at,
            } => budget_used_up(*scope, name, *budget, *used_gpu_hours, *resets_at),
        }
    }

    /// The reason of a job held by the used-up hard budget `u`.
    pub fn budget_exhausted(u: &BudgetUse) -> WaitReason {
        WaitReason::BudgetExhausted {
            scope: u.scope,
            name: u.name.clone(),
            budget: u.budget,
            used_gpu_hours: u.used_gpu_hours,
            resets_at: u.resets_at,
        }
    }

    /// Cards this job holds against later jobs (empty unless starving), so
    /// callers need not match on the variant.
    pub fn held_cards(&self) -> &[CardRef] {
        match self {
            WaitReason::HoldingCards { held, .. } => held,
            _ => &[],
        }
    }
}

/// A duration as people read it: `1h 05m`, `12m`, `40s`.
fn span(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        _ if s >= 3600 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ if s >= 60 => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// A download's progress as people read it, in the total's unit: `3.2 of 9.8 GB` (decimal, as
/// registries and `docker pull` count), in MB below a tenth of a gigabyte.
fn of_total(done: i64, total: i64) -> String {
    let (unit, scale) = if total >= 100_000_000 {
        ("GB", 1e9)
    } else {
        ("MB", 1e6)
    };
    let (d, t) = (done.max(0) as f64 / scale, total as f64 / scale);
    format!("{d:.1} of {t:.1} {unit}")
}

/// Explains why `s` does not fit at this point of the pass. Only called for
/// shapes that just failed (or failed earlier, which stays true).
pub(super) fn explain(pass: &Pass<'_>, s: &Shape) -> WaitReason {
    let g = s.gpu_count;
    let mut range: Option<NeedRange> = None;
    // Usable card with the least shortfall (largest free - need).
    let mut best: Option<(i64, usize)> = None;
    let mut best_node: Option<(usize, usize)> = None;
    for (n, span) in pass.nodes.iter().enumerate() {
        if !s.allows(n) {
            continue;
        }
        let mut count = 0usize;
        let mut holder = None;
        for si in span.start..span.end {
            let c = &pass.slots[si];
            let need = s.needs[c.model];
            if need < 0 || !c.online {
                continue;
            }
            range = Some(match range {
                None => NeedRange {
                    min_mib: need,
                    max_mib: need,
                },
                Some(r) => NeedRange {
                    min_mib: r.min_mib.min(need),
                    max_mib: r.max_mib.max(need),
                },
            });
            if c.held || (s.exclusive && c.busy) {
                continue;
            }
            let gap = c.free.saturating_sub(need);
            if best.is_none_or(|(b, _)| gap > b) {
                best = Some((gap, si));
            }
            if gap >= 0 {
                count += 1;
                holder = holder.or(c.blocked_by);
            }
        }
        if count >= g {
            // Enough cards ignoring holds, yet it failed: holds are the cause.
            if let Some(holder) = holder {
                return WaitReason::HeldForOlderJob { holder };
            }
        }
        if best_node.is_none_or(|(c, _)| count > c) {
            best_node = Some((count, n));
        }
    }
    let Some(range) = range else {
        return WaitReason::NoEligibleCard;
    };
    if g == 1 {
        let (need_mib, best) = match best {
            Some((_, si)) => {
                let c = &pass.slots[si];
                let card = pass.card_ref(si);
                (
                    s.needs[c.model],
                    Some(BestCard {
                        card,
                        free_mib: c.free,
                    }),
                )
            }
            None => (range.min_mib, None),
        };
        return WaitReason::InsufficientVram {
            need_mib,
            exclusive: s.exclusive,
            best,
        };
    }
    let (count, n) = best_node.unwrap_or((0, 0));
    let best_node = (count > 0)
        .then(|| pass.nodes.get(n))
        .flatten()
        .map(|span| pass.input.cards[pass.slots[span.start].src].node.clone());
    WaitReason::NotEnoughCards {
        gpu_count: u32::try_from(g).unwrap_or(u32::MAX),
        need: range,
        exclusive: s.exclusive,
        best_node,
        best_count: u32::try_from(count).unwrap_or(u32::MAX),
    }
}
