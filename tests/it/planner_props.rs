//! Property tests: every plan is replayed against an independent, brute-force
//! reference of the admission rules.

use std::collections::{BTreeMap, HashMap, HashSet};

use gpuq::server::admission::planner::{
    plan, Card, CardGrant, Need, Plan, PlanInput, QueuedJob, WaitReason,
};
use proptest::prelude::*;
use uuid::Uuid;

const MODELS: [&str; 3] = ["M-small", "M-mid", "M-big"];
const NOW: i64 = 100_000;
const STARVE: i64 = 1_000;

fn arb_card() -> impl Strategy<Value = (u8, usize, i64, i64, i64, bool, bool)> {
    (
        0..3u8,
        0..3usize,
        prop::sample::select(vec![4_000i64, 8_000, 12_000, 24_000]),
        prop_oneof![3 => Just(0i64), 1 => 1..8i64],
        prop_oneof![3 => Just(0i64), 1 => 0..3_000i64],
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.1),
    )
}

fn arb_need() -> impl Strategy<Value = Need> {
    prop_oneof![
        (0..10_000i64).prop_map(Need::Fixed),
        prop::collection::btree_map(prop::sample::select(MODELS.to_vec()), 0..10_000i64, 0..=3)
            .prop_map(|m| Need::PerModel(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
    ]
}

/// A job: priority, seq, cards, need, exclusive, age, and its owner's fair-share standing (a few
/// values, so that ties happen).
fn arb_job() -> impl Strategy<Value = (i32, i64, u32, Need, bool, i64, u8)> {
    (
        0..3i32,
        0..15i64,
        1..=3u32,
        arb_need(),
        prop::bool::weighted(0.15),
        0..2_500i64,
        0..4u8,
    )
}

fn arb_input() -> impl Strategy<Value = PlanInput> {
    (
        prop::collection::vec(arb_card(), 1..=10),
        prop::collection::vec(arb_job(), 0..=25),
        0..1_000i64,
    )
        .prop_map(|(cs, js, headroom_mib)| {
            let mut next_index: HashMap<u8, u32> = HashMap::new();
            let cards = cs
                .into_iter()
                .enumerate()
                .map(|(i, (node, model, total, resv, ext, online, held))| {
                    let index = next_index.entry(node).or_default();
                    *index += 1;
                    Card {
                        uuid: Uuid::from_u128(0xCA00 + i as u128),
                        node: format!("node-{}", (b'a' + node) as char),
                        index: *index - 1,
                        model: MODELS[model].to_string(),
                        total_mib: total,
                        reserved_mib: total * resv / 8,
                        external_mib: ext,
                        online,
                        exclusive_held: held,
                    }
                })
                .collect();
            let queue = js
                .into_iter()
                .enumerate()
                .map(
                    |(i, (priority, seq, gpu_count, need, exclusive, age, standing))| QueuedJob {
                        id: Uuid::from_u128(0x10B0 + i as u128),
                        seq,
                        priority,
                        past_soft_budget: false,
                        standing: gpuq::model::Standing::new(f64::from(standing) * 1.5),
                        gpu_count,
                        need,
                        exclusive,
                        queued_at_ms: NOW - age,
                        nodes: None,
                    },
                )
                .collect();
            PlanInput {
                cards,
                queue,
                headroom_mib,
                starvation_after_ms: STARVE,
                now_ms: NOW,
                backfill: None,
            }
        })
}

fn need_on(need: &Need, model: &str) -> Option<i64> {
    match need {
        Need::Fixed(v) => Some((*v).max(0)),
        Need::PerModel(m) => m.get(model).map(|v| (*v).max(0)),
    }
}

/// The pass-state the reference replays, keyed by card uuid.
#[derive(Clone)]
struct RefCard {
    card: Card,
    free: i64,
    busy: bool,
    held: bool,
    blocked: bool,
}

/// The queue order as docs/admission.md states it: priority (higher first), then the owner's
/// fair-share standing (lower first), then submit order.
fn spec_order(q: &[QueuedJob]) -> Vec<&QueuedJob> {
    let mut v: Vec<&QueuedJob> = q.iter().collect();
    v.sort_by(|x, y| {
        y.priority
            .cmp(&x.priority)
            .then(x.standing.value().total_cmp(&y.standing.value()))
            .then(x.seq.cmp(&y.seq))
            .then(x.id.cmp(&y.id))
    });
    v
}

fn qualifies(c: &RefCard, job: &QueuedJob) -> Option<i64> {
    let need = need_on(&job.need, &c.card.model)?;
    let ok = c.card.online && !c.held && !c.blocked && c.free >= need && !(job.exclusive && c.busy);
    ok.then_some(need)
}

/// All `k`-subsets of `0..n`, as sorted index vectors.
fn combos(n: usize, k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![vec![]];
    }
    if n < k {
        return vec![];
    }
    let mut out = combos(n - 1, k);
    for mut c in combos(n - 1, k - 1) {
        c.push(n - 1);
        out.push(c);
    }
    out
}

fn by_node(cards: &[RefCard]) -> BTreeMap<String, Vec<usize>> {
    let mut m: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, c) in cards.iter().enumerate() {
        m.entry(c.card.node.clone()).or_default().push(i);
    }
    for v in m.values_mut() {
        v.sort_by_key(|&i| (cards[i].card.index, cards[i].card.uuid));
    }
    m
}

/// Replays `p` in spec order against a brute-force model of the rules.
fn check_plan(inp: &PlanInput, p: &Plan) -> Result<(), TestCaseError> {
    // Exactly-once accounting.
    let mut seen = HashSet::new();
    for id in p
        .admitted
        .iter()
        .map(|a| a.job_id)
        .chain(p.waiting.iter().map(|w| w.job_id))
    {
        prop_assert!(seen.insert(id), "job {} appears twice", id);
    }
    let queued: HashSet<Uuid> = inp.queue.iter().map(|j| j.id).collect();
    prop_assert_eq!(&seen, &queued);

    let admitted: HashMap<Uuid, &Vec<CardGrant>> =
        p.admitted.iter().map(|a| (a.job_id, &a.cards)).collect();
    let waiting: HashMap<Uuid, &WaitReason> =
        p.waiting.iter().map(|w| (w.job_id, &w.reason)).collect();
    let h = inp.headroom_mib;
    let mut cards: Vec<RefCard> = inp
        .cards
        .iter()
        .map(|c| RefCard {
            free: (c.total_mib - h - c.reserved_mib - c.external_mib).max(0),
            busy: c.reserved_mib != 0,
            held: c.exclusive_held,
            blocked: false,
            card: c.clone(),
        })
        .collect();
    let idx: HashMap<Uuid, usize> = cards
        .iter()
        .enumerate()
        .map(|(i, c)| (c.card.uuid, i))
        .collect();
    let nodes = by_node(&cards);
    let mut granted_total: HashMap<Uuid, i64> = HashMap::new();
    let mut grants_per_card: HashMap<Uuid, usize> = HashMap::new();
    let mut held_by_starving: Vec<(usize, HashSet<Uuid>)> = Vec::new();

    for (pos, job) in spec_order(&inp.queue).into_iter().enumerate() {
        let g = job.gpu_count as usize;
        if let Some(grants) = admitted.get(&job.id) {
            prop_assert_eq!(grants.len(), g, "wrong card count");
            let ids: HashSet<Uuid> = grants.iter().map(|gr| gr.uuid).collect();
            prop_assert_eq!(ids.len(), g, "cards not distinct");
            let node = &cards[idx[&grants[0].uuid]].card.node.clone();
            let mut cost = 0;
            let mut chosen = Vec::new();
            for gr in grants.iter() {
                let c = &cards[idx[&gr.uuid]];
                prop_assert_eq!(&c.card.node, node, "placement spans nodes");
                let need = qualifies(c, job);
                prop_assert!(need.is_some(), "card {} did not qualify", c.card.index);
                let need = need.unwrap_or_default();
                let expect = if job.exclusive { c.free } else { need };
                prop_assert_eq!(gr.vram_mib, expect);
                prop_assert!(gr.vram_mib >= need && gr.vram_mib <= c.free);
                cost += c.free - need;
                chosen.push(c.card.index);
            }
            chosen.sort();
            // Best fit by brute force: least leftover, then node name, then index.
            let mut best: Option<(i64, String, Vec<u32>)> = None;
            for (name, members) in &nodes {
                let q: Vec<(usize, i64)> = members
                    .iter()
                    .filter_map(|&i| qualifies(&cards[i], job).map(|n| (i, n)))
                    .collect();
                for combo in combos(q.len(), g) {
                    let c: i64 = combo.iter().map(|&k| cards[q[k].0].free - q[k].1).sum();
                    let mut ix: Vec<u32> =
                        combo.iter().map(|&k| cards[q[k].0].card.index).collect();
                    ix.sort();
                    let cand = (c, name.clone(), ix);
                    if best.as_ref().is_none_or(|b| cand < *b) {
                        best = Some(cand);
                    }
                }
            }
            prop_assert_eq!(best, Some((cost, node.clone(), chosen)), "not the best fit");
            for gr in grants.iter() {
                let c = &mut cards[idx[&gr.uuid]];
                c.free -= gr.vram_mib;
                c.busy = true;
                c.held |= job.exclusive;
                *granted_total.entry(gr.uuid).or_default() += gr.vram_mib;
                *grants_per_card.entry(gr.uuid).or_default() += 1;
                for (spos, set) in &held_by_starving {
                    prop_assert!(
                        !(set.contains(&gr.uuid) && *spos < pos),
                        "granted a held card"
                    );
                }
            }
        } else {
            let reason = waiting[&job.id];
            // Must not have fit on what was left at its turn.
            for members in nodes.values() {
                let n = members
                    .iter()
                    .filter(|&&i| qualifies(&cards[i], job).is_some())
                    .count();
                prop_assert!(
                    n < g,
                    "job {} fit at its turn but waits: {}",
                    job.id,
                    reason.message()
                );
            }
            let can_fit_empty = |ignore_blocks: bool, empty: bool| {
                nodes.values().any(|members| {
                    let n = members
                        .iter()
                        .filter(|&&i| {
                            let c = &cards[i];
                            let Some(need) = need_on(&job.need, &c.card.model) else {
                                return false;
                            };
                            let cap = if empty {
                                c.card.total_mib - h - c.card.external_mib
                            } else if c.held || (job.exclusive && c.busy) {
                                -1
                            } else {
                                c.free
                            };
                            c.card.online && cap >= need && (ignore_blocks || !c.blocked)
                        })
                        .count();
                    n >= g
                })
            };
            let fits_ignoring_holds = can_fit_empty(true, false);
            let fits_when_empty = can_fit_empty(true, true);
            let starving = NOW - job.queued_at_ms > STARVE;
            let held = reason.held_cards();
            if starving {
                prop_assert_eq!(held.is_empty(), !fits_when_empty, "starving hold mismatch");
            } else {
                prop_assert!(held.is_empty(), "non-starving job holds cards");
            }
            if !held.is_empty() {
                prop_assert_eq!(held.len(), g);
                let set: HashSet<Uuid> = held.iter().map(|c| c.uuid).collect();
                prop_assert_eq!(set.len(), g);
                for hc in held {
                    let c = &mut cards[idx[&hc.uuid]];
                    prop_assert_eq!(&c.card.node, &held[0].node);
                    c.blocked = true;
                }
                held_by_starving.push((pos, set));
            }
            let inner = match reason {
                WaitReason::HoldingCards { waiting, .. } => waiting.as_ref(),
                r => r,
            };
            match inner {
                WaitReason::NoEligibleCard => prop_assert!(!inp
                    .cards
                    .iter()
                    .any(|c| c.online && need_on(&job.need, &c.model).is_some())),
                WaitReason::HeldForOlderJob { .. } => prop_assert!(fits_ignoring_holds),
                WaitReason::InsufficientVram { .. } => prop_assert_eq!(g, 1),
                WaitReason::NotEnoughCards { gpu_count, .. } => {
                    prop_assert_eq!(*gpu_count as usize, g)
                }
                WaitReason::HoldingCards { .. } => prop_assert!(false, "nested hold"),
                WaitReason::ReservedForHead { .. } => {
                    prop_assert!(false, "no backfill here, so no card is kept for a head")
                }
                WaitReason::OverCap { .. }
                | WaitReason::OwnerDisabled
                | WaitReason::Pulling { .. }
                | WaitReason::ImageUnavailable { .. }
                | WaitReason::Dependency { .. }
                | WaitReason::ArrayLimit { .. }
                | WaitReason::DependencyBroken { .. }
                | WaitReason::BudgetExhausted { .. } => {
                    prop_assert!(
                        false,
                        "caps, holds, images, dependencies, array limits and budgets are applied \
                         before planning, never by the planner"
                    )
                }
            }
            prop_assert!(!reason.message().is_empty());
        }
    }
    // Never over any card's free VRAM; exclusive cards get nothing else.
    for c in &inp.cards {
        let granted = granted_total.get(&c.uuid).copied().unwrap_or(0);
        let free = (c.total_mib - h - c.reserved_mib - c.external_mib).max(0);
        prop_assert!(granted <= free, "card {} over-granted", c.uuid);
        let ex_grant = p.admitted.iter().any(|a| {
            let ex = inp.queue.iter().any(|j| j.id == a.job_id && j.exclusive);
            ex && a.cards.iter().any(|g| g.uuid == c.uuid)
        });
        if ex_grant {
            prop_assert_eq!(grants_per_card[&c.uuid], 1);
            prop_assert!(c.reserved_mib == 0 && !c.exclusive_held && c.online);
        }
        if c.exclusive_held || !c.online {
            prop_assert_eq!(granted, 0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn plan_obeys_the_rules(inp in arb_input()) {
        let p = plan(&inp);
        check_plan(&inp, &p)?;
    }

    #[test]
    fn plan_is_deterministic_under_shuffles(
        inp in arb_input(),
        seed in any::<u64>(),
    ) {
        let p = plan(&inp);
        let mut shuffled = inp.clone();
        let mut s = seed | 1;
        let mut rnd = move |n: usize| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n as u64) as usize
        };
        for i in (1..shuffled.queue.len()).rev() {
            let j = rnd(i + 1);
            shuffled.queue.swap(i, j);
        }
        for i in (1..shuffled.cards.len()).rev() {
            let j = rnd(i + 1);
            shuffled.cards.swap(i, j);
        }
        prop_assert_eq!(p, plan(&shuffled));
    }
}

/// A running job in the multi-pass simulation.
struct Running {
    grants: Vec<CardGrant>,
    left: u32,
}

/// Runs passes in which admitted jobs finish after a few passes and small
/// later jobs keep arriving; returns the pass that admitted job 1, if any.
fn simulate(
    cards: &[Card],
    big: QueuedJob,
    smalls: &[(i64, u32)],
    arrivals: &[usize],
    starvation_after_ms: i64,
    passes: usize,
    running: Vec<Running>,
) -> Option<usize> {
    let mut running = running;
    let mut queue = vec![big.clone()];
    let mut next = 0usize;
    for pass in 0..passes {
        for _ in 0..arrivals[pass % arrivals.len()] {
            let (need, _) = smalls[next % smalls.len()];
            next += 1;
            queue.push(QueuedJob {
                id: Uuid::from_u128(1_000 + next as u128),
                seq: 1 + next as i64,
                priority: big.priority - (next % 2) as i32,
                past_soft_budget: false,
                standing: gpuq::model::Standing::EVEN,
                gpu_count: 1,
                need: Need::Fixed(need),
                exclusive: false,
                queued_at_ms: pass as i64 * 1_000,
                nodes: None,
            });
        }
        let mut cs = cards.to_vec();
        for c in &mut cs {
            c.reserved_mib = running
                .iter()
                .flat_map(|r| r.grants.iter())
                .filter(|g| g.uuid == c.uuid)
                .map(|g| g.vram_mib)
                .sum();
        }
        let inp = PlanInput {
            cards: cs,
            queue: queue.clone(),
            headroom_mib: 0,
            starvation_after_ms,
            now_ms: pass as i64 * 1_000 + 1,
            backfill: None,
        };
        let p = plan(&inp);
        for a in &p.admitted {
            if a.job_id == big.id {
                return Some(pass);
            }
            let k = (a.job_id.as_u128() - 1_001) as usize;
            running.push(Running {
                grants: a.cards.clone(),
                left: smalls[k % smalls.len()].1,
            });
        }
        queue.retain(|j| !p.admitted.iter().any(|a| a.job_id == j.id));
        for r in &mut running {
            r.left -= 1;
        }
        running.retain(|r| r.left > 0);
    }
    None
}

fn sim_cards(per_node: &[usize], total: i64) -> Vec<Card> {
    let mut out = Vec::new();
    for (n, &k) in per_node.iter().enumerate() {
        for i in 0..k {
            out.push(Card {
                uuid: Uuid::from_u128(0xCA00 + out.len() as u128),
                node: format!("n{n}"),
                index: i as u32,
                model: "M".into(),
                total_mib: total,
                reserved_mib: 0,
                external_mib: 0,
                online: true,
                exclusive_held: false,
            });
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn starving_job_is_eventually_admitted(
        per_node in prop::collection::vec(1..=4usize, 1..=2),
        total in prop::sample::select(vec![8_000i64, 24_000]),
        frac in 50..=100i64,
        g_pick in 0..4usize,
        smalls in prop::collection::vec((500..4_000i64, 1..=3u32), 1..8),
        arrivals in prop::collection::vec(1..=4usize, 1..6),
        initial in prop::collection::vec((500..4_000i64, 1..=3u32), 1..12),
    ) {
        let cards = sim_cards(&per_node, total);
        let max_node = per_node.iter().copied().max().unwrap_or(1);
        let big = QueuedJob {
            id: Uuid::from_u128(1),
            seq: 0,
            priority: 1,
            past_soft_budget: false,
            standing: gpuq::model::Standing::EVEN,
            gpu_count: (g_pick % max_node) as u32 + 1,
            need: Need::Fixed(total * frac / 100),
            exclusive: false,
            queued_at_ms: 0,
            nodes: None,
        };
        // Cards start partly occupied by jobs that finish after 1..=3 passes.
        let running = initial
            .iter()
            .enumerate()
            .map(|(i, &(mib, left))| Running {
                grants: vec![CardGrant { uuid: cards[i % cards.len()].uuid, vram_mib: mib.min(total / 4) }],
                left,
            })
            .collect();
        let admitted = simulate(&cards, big, &smalls, &arrivals, 500, 40, running);
        prop_assert!(admitted.is_some(), "big job starved for 40 passes");
    }
}

/// The liveness property above can fail: without the guard, a steady stream
/// of small jobs keeps a big one out forever; with it, the big one gets in.
#[test]
fn without_the_guard_the_big_job_starves() {
    let cards = sim_cards(&[1], 24_000);
    let big = QueuedJob {
        id: Uuid::from_u128(1),
        seq: 0,
        priority: 1,
        past_soft_budget: false,
        standing: gpuq::model::Standing::EVEN,
        gpu_count: 1,
        need: Need::Fixed(20_000),
        exclusive: false,
        queued_at_ms: 0,
        nodes: None,
    };
    let smalls = [(6_000, 4)];
    let running = || {
        (1..=4)
            .map(|left| Running {
                grants: vec![CardGrant {
                    uuid: cards[0].uuid,
                    vram_mib: 6_000,
                }],
                left,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        simulate(&cards, big.clone(), &smalls, &[1], i64::MAX, 40, running()),
        None
    );
    assert_eq!(
        simulate(&cards, big, &smalls, &[1], 500, 40, running()),
        Some(4)
    );
}
