//! One admission pass: which queued jobs start now, on which cards, and why
//! the others wait.
//!
//! The planner is a pure function of its input so that the Postgres-backed
//! scheduler can run it inside a transaction, retry it, and test it without a
//! database. Time is plain milliseconds for the same reason.
//!
//! Within one pass capacity only ever shrinks (grants and blocks are added,
//! never removed), so a job "shape" that failed once fails for every later job
//! in the pass. The pass caches those failures, which keeps long queues cheap.

use crate::model::{queue_key, QueueKey, Standing};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod backfill;
mod never;
mod wait;

pub use backfill::{Backfill, Release, Reservation};
pub use never::never_fits;
pub use wait::{BestCard, CardRef, NeedRange, WaitReason};

/// A physical GPU as the database last saw it; the planner only reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Card {
    /// Stable identity, so grants survive renumbering of device indices.
    pub uuid: Uuid,
    /// Host name: a multi-GPU job must stay on one host.
    pub node: String,
    /// Device index on the node, used for tie-breaks and messages users read.
    pub index: u32,
    /// Marketing name; per-model needs are keyed by it.
    pub model: String,
    /// Physical memory of the card.
    pub total_mib: i64,
    /// Sum of live gpuq reservations on the card.
    pub reserved_mib: i64,
    /// Memory used by processes gpuq does not manage.
    pub external_mib: i64,
    /// False while draining or offline: such a card admits nothing.
    pub online: bool,
    /// An exclusive job owns the card, so nothing else may share it.
    pub exclusive_held: bool,
}

/// How much VRAM a job needs on each card it gets.
///
/// Negative amounts are treated as zero, because a grant can never be negative.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Need {
    /// From a workload type's manifest: MiB per card model. A model missing
    /// from the map is one the workload cannot run on.
    PerModel(BTreeMap<String, i64>),
    /// An explicit per-card minimum that holds on every model.
    Fixed(i64),
}

impl Need {
    /// Per-card need on `model`, or `None` where the job cannot run on it;
    /// the single place that interprets a manifest.
    pub fn for_model(&self, model: &str) -> Option<i64> {
        match self {
            Need::PerModel(map) => map.get(model).map(|&v| v.max(0)),
            Need::Fixed(v) => Some((*v).max(0)),
        }
    }
}

/// A job waiting for GPUs, as read from the queue table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedJob {
    /// Job identity; must be unique within one pass.
    pub id: Uuid,
    /// Submit order, the tie-break among equal priorities.
    pub seq: i64,
    /// Higher priorities are considered first.
    pub priority: i32,
    /// Its owner is past a soft budget: it goes after every other job of its priority (before
    /// `standing`).
    #[serde(default)]
    pub past_soft_budget: bool,
    /// Its owner's fair-share standing: among equal priorities, lower goes first (before `seq`).
    #[serde(default)]
    pub standing: Standing,
    /// Number of distinct cards, all on one node (>= 1; jobs needing no GPU
    /// never reach the planner and are admitted with no cards if they do).
    pub gpu_count: u32,
    /// VRAM wanted on each card.
    pub need: Need,
    /// Whole cards only: no co-tenants, and it takes all their free memory.
    pub exclusive: bool,
    /// Enqueue time, for the starvation guard.
    pub queued_at_ms: i64,
    /// The only nodes it may be placed on (those that have its image); `None`: any node.
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
}

impl QueuedJob {
    /// Its place in the queue order ([`queue_key`]: priority, whether its owner is past a soft
    /// budget, its owner's standing, submit order).
    pub fn queue_key(&self) -> QueueKey {
        queue_key(
            self.priority,
            self.past_soft_budget,
            self.standing,
            self.seq,
        )
    }
}

/// Everything one pass depends on; nothing else is consulted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanInput {
    /// All known cards, in any order.
    pub cards: Vec<Card>,
    /// All queued jobs, in any order: the planner sorts them itself.
    pub queue: Vec<QueuedJob>,
    /// VRAM kept back on every card for drivers and fragmentation.
    pub headroom_mib: i64,
    /// How long a job may wait before it starts holding cards for itself.
    pub starvation_after_ms: i64,
    /// The pass's notion of "now", so the result is reproducible.
    pub now_ms: i64,
    /// Backfill's bounds (see `planner::backfill`); `None`: no backfill.
    #[serde(default)]
    pub backfill: Option<Backfill>,
}

/// Outcome of a pass; every queued job appears exactly once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Jobs to start now, in admission order.
    pub admitted: Vec<Placement>,
    /// Jobs left queued, in queue order, each with its reason.
    pub waiting: Vec<Waiting>,
    /// Cards kept for heads of the queue (backfill), in queue order.
    #[serde(default)]
    pub reserved: Vec<Reservation>,
}

/// Cards granted to one admitted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The admitted job.
    pub job_id: Uuid,
    /// One grant per card, in card-index order.
    pub cards: Vec<CardGrant>,
}

/// A reservation to write for one card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardGrant {
    /// The card.
    pub uuid: Uuid,
    /// MiB to reserve: the job's need, or all free memory for exclusive jobs.
    pub vram_mib: i64,
}

/// A job that stays queued, with an explanation for its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The waiting job.
    pub job_id: Uuid,
    /// Why it waits; `message()` renders it for humans.
    pub reason: WaitReason,
}

/// Deterministic, fast hasher for shape keys (only looked up, never iterated).
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A card's mutable state during the pass, stored in (node, index, uuid) order.
struct Slot {
    src: usize,
    node: usize,
    model: usize,
    free: i64,
    cap_empty: i64,
    online: bool,
    held: bool,
    busy: bool,
    blocked_by: Option<Uuid>,
}

impl Slot {
    fn placeable(&self) -> bool {
        self.online && !self.held && self.blocked_by.is_none()
    }
}

/// Contiguous run of slots on one node, with a bound for quick rejection.
struct NodeSpan {
    start: usize,
    end: usize,
    max_free: i64,
}

/// What decides placement: per-model needs, card count, exclusivity.
struct Shape {
    /// Need per model index; -1 where the job cannot run on that model.
    needs: Vec<i64>,
    gpu_count: usize,
    exclusive: bool,
    min_need: Option<i64>,
    /// Per node span: whether the job may go there (`None`: everywhere).
    allowed: Option<Vec<bool>>,
    failed: bool,
    reason: Option<(u64, WaitReason)>,
    block: Option<(u64, Vec<usize>)>,
    /// Backfill: when a job of this shape started now has ended at the latest (`None`: unbounded).
    ends_by: Option<i64>,
    /// Backfill found no moment for it in this pass.
    unreservable: bool,
}

impl Shape {
    /// Whether the job may be placed on the node of span `n`.
    fn allows(&self, n: usize) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.get(n).copied().unwrap_or(false))
    }
}

/// The evolving state of one pass.
struct Pass<'a> {
    input: &'a PlanInput,
    slots: Vec<Slot>,
    nodes: Vec<NodeSpan>,
    models: Vec<&'a str>,
    max_free: i64,
    /// Bumped on every change of state; keys the wait-reason cache.
    gen: u64,
    /// Bumped only when free memory changes; keys the block-set cache.
    cap_gen: u64,
    buf: Vec<(i64, usize)>,
    pick: Vec<usize>,
    /// Backfill's kept cards and the cards' futures; `None` without backfill.
    bf: Option<backfill::Book<'a>>,
}

/// Free VRAM by the pass-wide formula, clamped so a card never goes negative.
fn free_of(total: i64, headroom: i64, reserved: i64, external: i64) -> i64 {
    total
        .saturating_sub(headroom)
        .saturating_sub(reserved)
        .saturating_sub(external)
        .max(0)
}

/// Plans one admission pass: in queue order (priority, then the owner's fair-share standing, then
/// submit order), best fit, skip-and-continue,
/// with starving jobs holding cards against later jobs. Pure and deterministic.
pub fn plan(input: &PlanInput) -> Plan {
    let q = &input.queue;
    let mut pass = Pass::new(input);
    let mut shapes: Vec<Shape> = Vec::new();
    let mut index: FxMap<Vec<i64>, usize> = FxMap::default();
    let mut groups: FxMap<&[String], i64> = FxMap::default();
    let mut key: Vec<i64> = Vec::new();

    // Resolve shapes in input order (sequential memory), then sort compact
    // keys rather than chasing job structs from the comparator.
    let mut order: Vec<(QueueKey, Uuid, usize, usize)> = Vec::with_capacity(q.len());
    for (qi, job) in q.iter().enumerate() {
        pass.shape_key(job, &mut key);
        // Jobs allowed on different nodes are different shapes: one failing says nothing of
        // the other.
        let next = groups.len() as i64 + 1;
        key.push(match &job.nodes {
            None => 0,
            Some(n) => *groups.entry(n.as_slice()).or_insert(next),
        });
        // Backfill: a job's bound decides which kept cards it may take, so it is part of its shape.
        let ends_by = pass.bf.as_ref().and_then(|b| b.ends_by(job.id));
        if pass.bf.is_some() {
            key.push(ends_by.unwrap_or(i64::MAX));
        }
        let si = match index.get(key.as_slice()) {
            Some(&si) => si,
            None => {
                shapes.push(pass.new_shape(&key, job.nodes.as_deref(), ends_by));
                index.insert(key.clone(), shapes.len() - 1);
                shapes.len() - 1
            }
        };
        order.push((job.queue_key(), job.id, qi, si));
    }
    order.sort_unstable();

    let mut out = Plan::default();
    for &(_, _, qi, si) in &order {
        let job = &q[qi];
        if job.gpu_count == 0 {
            out.admitted.push(Placement {
                job_id: job.id,
                cards: Vec::new(),
            });
            continue;
        }
        let shape = &mut shapes[si];
        if !shape.failed {
            if pass.try_place(shape, true) {
                let placement = pass.commit(shape, job.id);
                pass.backfilled(shape, &placement);
                out.admitted.push(placement);
                continue;
            }
            shape.failed = true;
        }
        let mut reason = pass.reason(shape);
        if input.now_ms.saturating_sub(job.queued_at_ms) > input.starvation_after_ms {
            let held = pass.block(shape, job.id);
            if !held.is_empty() {
                reason = WaitReason::HoldingCards {
                    waiting: Box::new(reason),
                    held,
                };
            }
        }
        if let Some(r) = pass.reserve(shape, job.id, job.priority) {
            out.reserved.push(r);
        }
        out.waiting.push(Waiting {
            job_id: job.id,
            reason,
        });
    }
    out
}

impl<'a> Pass<'a> {
    fn new(input: &'a PlanInput) -> Self {
        let cards = &input.cards;
        let mut order: Vec<usize> = (0..cards.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            let (x, y) = (&cards[a], &cards[b]);
            (x.node.as_str(), x.index, x.uuid).cmp(&(y.node.as_str(), y.index, y.uuid))
        });
        let mut models: Vec<&str> = cards.iter().map(|c| c.model.as_str()).collect();
        models.sort_unstable();
        models.dedup();

        let h = input.headroom_mib;
        let mut slots = Vec::with_capacity(cards.len());
        let mut nodes: Vec<NodeSpan> = Vec::new();
        for (pos, &ci) in order.iter().enumerate() {
            let c = &cards[ci];
            if pos == 0 || cards[order[pos - 1]].node != c.node {
                nodes.push(NodeSpan {
                    start: pos,
                    end: pos,
                    max_free: -1,
                });
            }
            let node = nodes.len() - 1;
            nodes[node].end = pos + 1;
            slots.push(Slot {
                src: ci,
                node,
                model: models.binary_search(&c.model.as_str()).unwrap_or(0),
                free: free_of(c.total_mib, h, c.reserved_mib, c.external_mib),
                cap_empty: free_of(c.total_mib, h, 0, c.external_mib),
                online: c.online,
                held: c.exclusive_held,
                busy: c.reserved_mib != 0,
                blocked_by: None,
            });
        }
        let mut pass = Pass {
            input,
            slots,
            nodes,
            models,
            max_free: -1,
            gen: 0,
            cap_gen: 0,
            buf: Vec::new(),
            pick: Vec::new(),
            bf: None,
        };
        pass.bf = backfill::Book::new(input, &pass.slots);
        for n in 0..pass.nodes.len() {
            pass.refresh_node(n);
        }
        pass
    }

    /// Recomputes a node's quick-reject bound and the global one.
    fn refresh_node(&mut self, n: usize) {
        let span = &self.nodes[n];
        let slots = &self.slots[span.start..span.end];
        let m = slots.iter().filter(|s| s.placeable()).map(|s| s.free).max();
        self.nodes[n].max_free = m.unwrap_or(-1);
        self.max_free = self.nodes.iter().map(|s| s.max_free).max().unwrap_or(-1);
    }

    /// Encodes a job's shape as `[gpu_count, exclusive, need per model...]`.
    fn shape_key(&self, job: &QueuedJob, key: &mut Vec<i64>) {
        key.clear();
        key.push(i64::from(job.gpu_count));
        key.push(i64::from(job.exclusive));
        match &job.need {
            Need::Fixed(v) => key.extend(self.models.iter().map(|_| (*v).max(0))),
            Need::PerModel(map) => {
                // Both sides are sorted by name: merge instead of looking up.
                let mut it = map.iter().peekable();
                for m in &self.models {
                    while it.next_if(|(k, _)| k.as_str() < *m).is_some() {}
                    match it.peek() {
                        Some((k, v)) if k.as_str() == *m => key.push((**v).max(0)),
                        _ => key.push(-1),
                    }
                }
            }
        }
    }

    /// The shape of `key` (`[gpu_count, exclusive, need per model..., node group, bound]`, the
    /// bound with backfill only), allowed on `nodes` (`None`: on every node).
    fn new_shape(&self, key: &[i64], nodes: Option<&[String]>, ends_by: Option<i64>) -> Shape {
        let needs = key
            .get(2..2 + self.models.len())
            .unwrap_or_default()
            .to_vec();
        let allowed = nodes.map(|names| {
            self.nodes
                .iter()
                .map(|span| {
                    let node = &self.input.cards[self.slots[span.start].src].node;
                    names.contains(node)
                })
                .collect()
        });
        Shape {
            min_need: needs.iter().copied().filter(|&n| n >= 0).min(),
            allowed,
            needs,
            gpu_count: usize::try_from(key[0]).unwrap_or(usize::MAX),
            exclusive: key[1] != 0,
            failed: false,
            reason: None,
            block: None,
            ends_by,
            unreservable: false,
        }
    }

    /// Best fit: on each node the `gpu_count` qualifying cards with the least
    /// leftover, then the node whose leftover sum is least (earlier name wins
    /// ties). Leaves the chosen slots in `self.pick`. With `kept`, cards backfill keeps for a
    /// head are offered only as far as the job cannot delay it.
    fn try_place(&mut self, s: &Shape, kept: bool) -> bool {
        let g = s.gpu_count;
        let Some(min_need) = s.min_need else {
            return false;
        };
        if self.max_free < min_need {
            return false;
        }
        let mut best: Option<i64> = None;
        for (n, span) in self.nodes.iter().enumerate() {
            if span.max_free < min_need || span.end - span.start < g || !s.allows(n) {
                continue;
            }
            self.buf.clear();
            for (si, c) in self.slots[span.start..span.end].iter().enumerate() {
                let need = s.needs[c.model];
                if need >= 0
                    && c.free >= need
                    && c.placeable()
                    && !(s.exclusive && c.busy)
                    && (!kept
                        || self
                            .bf
                            .as_ref()
                            .is_none_or(|b| b.allows(span.start + si, s, need)))
                {
                    self.buf.push((c.free - need, span.start + si));
                }
            }
            let Some((cost, chosen)) = least(&mut self.buf, g) else {
                continue;
            };
            if best.is_none_or(|b| cost < b) {
                best = Some(cost);
                self.pick.clear();
                self.pick.extend(chosen.iter().map(|p| p.1));
            }
        }
        best.is_some()
    }

    /// Applies the grants chosen by `try_place`.
    fn commit(&mut self, s: &Shape, job_id: Uuid) -> Placement {
        self.pick.sort_unstable();
        let mut cards = Vec::with_capacity(self.pick.len());
        for &si in &self.pick {
            let c = &mut self.slots[si];
            let grant = if s.exclusive {
                c.free
            } else {
                s.needs[c.model]
            };
            c.free -= grant;
            c.busy = true;
            c.held |= s.exclusive;
            cards.push(CardGrant {
                uuid: self.input.cards[c.src].uuid,
                vram_mib: grant,
            });
        }
        let node = self.pick.first().map(|&si| self.slots[si].node);
        if let Some(n) = node {
            self.refresh_node(n);
        }
        self.gen += 1;
        self.cap_gen += 1;
        Placement { job_id, cards }
    }

    /// Why a shape does not fit right now, reusing the last answer while
    /// nothing has changed.
    fn reason(&mut self, s: &mut Shape) -> WaitReason {
        if let Some((gen, r)) = &s.reason {
            if *gen == self.gen {
                return r.clone();
            }
        }
        let r = match self.kept_reason(s) {
            Some(r) => r,
            None => wait::explain(self, s),
        };
        s.reason = Some((self.gen, r.clone()));
        r
    }

    /// Starvation guard: picks the cards a starving job would fit on soonest
    /// (big enough when empty, most free now) and holds them against later
    /// jobs. Returns nothing when the job can never fit on online cards.
    fn block(&mut self, s: &mut Shape, job_id: Uuid) -> Vec<CardRef> {
        let set = match &s.block {
            Some((gen, set)) if *gen == self.cap_gen => set.clone(),
            _ => {
                let set = self.block_set(s);
                s.block = Some((self.cap_gen, set.clone()));
                set
            }
        };
        let mut changed = false;
        for &si in &set {
            let c = &mut self.slots[si];
            if c.blocked_by.is_none() {
                c.blocked_by = Some(job_id);
                changed = true;
            }
        }
        if let (true, Some(&si)) = (changed, set.first()) {
            self.refresh_node(self.slots[si].node);
            self.gen += 1;
        }
        set.iter().map(|&si| self.card_ref(si)).collect()
    }

    fn block_set(&mut self, s: &Shape) -> Vec<usize> {
        let g = s.gpu_count;
        let mut best: Option<i64> = None;
        let mut pick = Vec::new();
        for (n, span) in self.nodes.iter().enumerate() {
            if !s.allows(n) {
                continue;
            }
            self.buf.clear();
            for (si, c) in self.slots[span.start..span.end].iter().enumerate() {
                let need = s.needs[c.model];
                if need >= 0 && c.online && c.cap_empty >= need {
                    let now = if c.held { 0 } else { c.free };
                    self.buf.push((-now, span.start + si));
                }
            }
            // Keyed by minus the free VRAM: the least sum is the most free.
            let Some((cost, chosen)) = least(&mut self.buf, g) else {
                continue;
            };
            if best.is_none_or(|b| cost < b) {
                best = Some(cost);
                pick.clear();
                pick.extend(chosen.iter().map(|p| p.1));
            }
        }
        pick.sort_unstable();
        pick
    }

    fn card_ref(&self, si: usize) -> CardRef {
        let c = &self.input.cards[self.slots[si].src];
        CardRef {
            uuid: c.uuid,
            node: c.node.clone(),
            index: c.index,
            model: c.model.clone(),
        }
    }
}

/// The `g` entries of `buf` with the least keys (in any order) and the sum of those keys; `None`
/// when `buf` holds fewer than `g` (`g` is at least 1).
fn least(buf: &mut [(i64, usize)], g: usize) -> Option<(i64, &[(i64, usize)])> {
    if buf.len() < g {
        return None;
    }
    if buf.len() > g {
        buf.select_nth_unstable(g - 1);
    }
    let chosen = &buf[..g];
    Some((
        chosen.iter().fold(0i64, |a, p| a.saturating_add(p.0)),
        chosen,
    ))
}

#[cfg(test)]
mod tests;
