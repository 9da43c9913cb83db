//! Deterministic synthetic clusters and queues, shared by every section of the benchmark so the
//! planner-only figures and the Postgres figures describe the same workload.

use crate::server::admission::planner::{Card, Need, PlanInput, QueuedJob};
use crate::server::gpu::GpuInfo;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Small xorshift PRNG: runs are reproducible without another crate.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    /// A generator for this seed (a zero state would stay zero, so the low bit is forced).
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-enough integer in `0..n` (0 when `n` is 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Card models and their memory; node `n` holds eight cards of model `n % 4`.
pub(super) const MODELS: [(&str, i64); 4] = [
    ("NVIDIA GeForce RTX 3090", 24_576),
    ("NVIDIA GeForce RTX 4090", 24_564),
    ("NVIDIA L40S", 46_068),
    ("NVIDIA A100 80GB", 81_920),
];

/// Cards per node.
pub(super) const CARDS_PER_NODE: usize = 8;

/// Workload types: name and MiB per card for each of [`MODELS`] (0: no build for that model).
pub(super) const WORKLOADS: [(&str, [i64; 4]); 8] = [
    ("bench-llm-7b", [16_000, 16_000, 17_000, 18_000]),
    ("bench-llm-70b-shard", [0, 0, 0, 78_000]),
    ("bench-sd-xl", [12_000, 11_000, 12_000, 0]),
    ("bench-bert-finetune", [8_000, 8_000, 8_000, 8_000]),
    ("bench-video-diffusion", [22_000, 22_000, 30_000, 30_000]),
    ("bench-llm-13b-train", [0, 0, 40_000, 60_000]),
    ("bench-notebook", [4_000, 4_000, 4_000, 4_000]),
    ("bench-consumer-cards", [20_000, 20_000, 0, 0]),
];

/// Per-model needs of workload `w`, as the manifest stores them.
pub(super) fn needs_of(w: usize) -> BTreeMap<String, i64> {
    let row = WORKLOADS.get(w).map(|(_, r)| *r).unwrap_or_default();
    MODELS
        .iter()
        .zip(row)
        .filter(|(_, mib)| *mib > 0)
        .map(|((model, _), mib)| ((*model).to_owned(), mib))
        .collect()
}

/// What one synthetic job asks for. Every job fits an empty cluster of at least one node per
/// model, so a burst always drains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct JobSpec {
    /// Cards on one node, 1 to 4.
    pub gpu_count: u32,
    /// Index into [`WORKLOADS`], or `None` for an explicit per-card minimum.
    pub workload: Option<usize>,
    /// Per-card MiB when there is no workload type (4 to 43 GiB).
    pub fixed_mib: i64,
    /// Whole cards.
    pub exclusive: bool,
    /// 80 % at 0, 15 % at 1, 5 % at 5.
    pub priority: i32,
    /// How long ago it was submitted (up to 8 h).
    pub age_ms: i64,
}

/// A realistic mixed queue: 60 % single-card jobs, a fifth with explicit minimums, 5 % exclusive.
pub(super) fn jobs(n: usize, r: &mut Rng) -> Vec<JobSpec> {
    (0..n)
        .map(|_| {
            let gpu_count = match r.below(100) {
                0..=59 => 1,
                60..=84 => 2,
                85..=87 => 3,
                _ => 4,
            };
            let explicit = r.below(5) == 0;
            let fixed_mib = 1_000 * (4 + r.below(40) as i64);
            let workload = r.below(WORKLOADS.len() as u64) as usize;
            JobSpec {
                gpu_count,
                workload: (!explicit).then_some(workload),
                fixed_mib,
                exclusive: r.below(20) == 0,
                priority: match r.below(100) {
                    0..=79 => 0,
                    80..=94 => 1,
                    _ => 5,
                },
                age_ms: r.below(8 * 3_600_000) as i64,
            }
        })
        .collect()
}

/// A partly busy cluster for the planner alone: 30 % of cards half-reserved at random, some
/// foreign use, 2 % offline, a few held by exclusive jobs.
pub(super) fn planner_cards(n: usize, r: &mut Rng) -> Vec<Card> {
    (0..n)
        .map(|i| {
            let node = i / CARDS_PER_NODE;
            let (model, total) = MODELS[node % MODELS.len()];
            let reserved = if r.below(10) < 3 {
                r.below(total as u64 / 2) as i64
            } else {
                0
            };
            Card {
                uuid: Uuid::from_u128(0xC000_0000 + i as u128),
                node: format!("gpu-node-{node:03}"),
                index: (i % CARDS_PER_NODE) as u32,
                model: model.to_owned(),
                total_mib: total,
                reserved_mib: reserved,
                external_mib: if r.below(10) == 0 { 1_024 } else { 0 },
                online: r.below(50) != 0,
                exclusive_held: reserved == 0 && r.below(40) == 0,
            }
        })
        .collect()
}

/// The planner's view of a synthetic queue, "now" being 0.
pub(super) fn queued(specs: &[JobSpec]) -> Vec<QueuedJob> {
    let needs: Vec<Need> = (0..WORKLOADS.len())
        .map(|w| Need::PerModel(needs_of(w)))
        .collect();
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| QueuedJob {
            id: Uuid::from_u128(0x1000_0000 + i as u128),
            seq: i as i64,
            priority: s.priority,
            past_soft_budget: false,
            standing: crate::model::Standing::EVEN,
            gpu_count: s.gpu_count,
            need: match s.workload.and_then(|w| needs.get(w)) {
                Some(need) => need.clone(),
                None => Need::Fixed(s.fixed_mib),
            },
            exclusive: s.exclusive,
            queued_at_ms: -s.age_ms,
            nodes: None,
        })
        .collect()
}

/// A whole planner input: `cards` cards, `queued` jobs, 512 MiB headroom, starvation after 6 h.
pub(super) fn planner_input(queued_jobs: usize, cards: usize, seed: u64) -> PlanInput {
    let mut r = Rng::new(seed);
    let cards = planner_cards(cards, &mut r);
    let specs = jobs(queued_jobs, &mut r);
    PlanInput {
        cards,
        queue: queued(&specs),
        headroom_mib: 512,
        starvation_after_ms: 6 * 3_600_000,
        now_ms: 0,
        backfill: None,
    }
}

/// An empty simulated card.
fn empty_card(uuid: Uuid, index: usize, model: &str, total_mib: i64) -> GpuInfo {
    GpuInfo {
        uuid,
        index: index as u32,
        model: model.to_owned(),
        total_mib,
        used_mib: Some(0),
        external_mib: Some(0),
        utilization_pct: None,
        simulated: true,
    }
}

/// The database cluster: `cards` empty simulated cards by node name, eight per node.
pub(super) fn db_nodes(cards: usize) -> Vec<(String, Vec<GpuInfo>)> {
    let mut nodes: Vec<(String, Vec<GpuInfo>)> = Vec::new();
    for i in 0..cards {
        let node = i / CARDS_PER_NODE;
        if i % CARDS_PER_NODE == 0 {
            nodes.push((format!("bench-node-{node:02}"), Vec::new()));
        }
        let (model, total) = MODELS[node % MODELS.len()];
        if let Some((_, list)) = nodes.last_mut() {
            let uuid = Uuid::from_u128(0xBE4C_0000_0000 + i as u128);
            list.push(empty_card(uuid, i % CARDS_PER_NODE, model, total));
        }
    }
    nodes
}

/// Round `round` of the nodes section: `count` nodes of [`CARDS_PER_NODE`] empty cards each,
/// named and numbered apart from every other round's and from [`db_nodes`]'.
pub(super) fn round_nodes(round: usize, count: usize) -> Vec<(String, Vec<GpuInfo>)> {
    (0..count)
        .map(|node| {
            let (model, total) = MODELS[node % MODELS.len()];
            let cards = (0..CARDS_PER_NODE)
                .map(|index| {
                    let n = (round * 1_000 + node) * CARDS_PER_NODE + index;
                    empty_card(
                        Uuid::from_u128(0xBE4D_0000_0000 + n as u128),
                        index,
                        model,
                        total,
                    )
                })
                .collect();
            (format!("bench-r{round}-node-{node:02}"), cards)
        })
        .collect()
}
