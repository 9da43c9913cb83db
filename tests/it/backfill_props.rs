//! Backfill's guarantee as a property: on random cards, holders with deadlines and queues with
//! timeouts, every card kept for a head has the head's need free at the head's start, counting
//! every job of the plan that runs past that start: no job the plan starts delays a head.

use std::collections::HashMap;

use gpuq::server::admission::planner::{
    plan, Backfill, Card, CardGrant, Need, PlanInput, QueuedJob, Release,
};
use proptest::prelude::*;
use uuid::Uuid;

const NOW: i64 = 1_000_000;
const SLACK: i64 = 500;

type CardGen = (u8, i64, i64, bool, Option<i64>);
type JobGen = (i32, u32, i64, bool, Option<i64>);

fn arb() -> impl Strategy<Value = PlanInput> {
    let card = (
        0..2u8,
        prop::sample::select(vec![8_000i64, 24_000]),
        0..=8i64,
        prop::bool::weighted(0.1),
        prop::option::weighted(0.85, 0..50_000i64),
    );
    let job = (
        0..2i32,
        1..=2u32,
        500..24_000i64,
        prop::bool::weighted(0.15),
        prop::option::weighted(0.8, 1..60_000i64),
    );
    (
        prop::collection::vec(card, 1..=6),
        prop::collection::vec(job, 1..=12),
    )
        .prop_map(|(cs, js): (Vec<CardGen>, Vec<JobGen>)| {
            let mut index: HashMap<u8, u32> = HashMap::new();
            let mut cards = Vec::new();
            let mut releases = Vec::new();
            for (i, (node, total, eighths, excl, deadline)) in cs.into_iter().enumerate() {
                let ix = index.entry(node).or_default();
                *ix += 1;
                let reserved = if excl { total } else { total * eighths / 8 };
                let uuid = Uuid::from_u128(0xCA00 + i as u128);
                cards.push(Card {
                    uuid,
                    node: format!("n{node}"),
                    index: *ix - 1,
                    model: "M".into(),
                    total_mib: total,
                    reserved_mib: reserved,
                    external_mib: 0,
                    online: true,
                    exclusive_held: excl,
                });
                if let (Some(d), true) = (deadline, reserved > 0) {
                    releases.push(Release {
                        job_id: Uuid::from_u128(0xF000 + i as u128),
                        deadline_ms: NOW + d,
                        grants: vec![CardGrant {
                            uuid,
                            vram_mib: reserved,
                        }],
                        exclusive: excl,
                    });
                }
            }
            let mut bounds = std::collections::BTreeMap::new();
            let queue = js
                .into_iter()
                .enumerate()
                .map(|(i, (priority, gpu_count, need, exclusive, bound))| {
                    let id = Uuid::from_u128(0x10B0 + i as u128);
                    if let Some(b) = bound {
                        bounds.insert(id, b);
                    }
                    QueuedJob {
                        id,
                        seq: i as i64,
                        priority,
                        past_soft_budget: false,
                        standing: gpuq::model::Standing::EVEN,
                        gpu_count,
                        need: Need::Fixed(need),
                        exclusive,
                        queued_at_ms: NOW,
                        nodes: None,
                    }
                })
                .collect();
            PlanInput {
                cards,
                queue,
                headroom_mib: 0,
                starvation_after_ms: i64::MAX,
                now_ms: NOW,
                backfill: Some(Backfill {
                    releases,
                    bounds,
                    slack_ms: SLACK,
                }),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn no_started_job_delays_a_head(inp in arb()) {
        let p = plan(&inp);
        let bf = inp.backfill.as_ref().unwrap();
        let job = |id: Uuid| inp.queue.iter().find(|j| j.id == id).unwrap();
        let mut heads = std::collections::HashSet::new();
        for r in &p.reserved {
            prop_assert!(heads.insert(r.head), "one reservation per head");
            let head = job(r.head);
            prop_assert!(p.waiting.iter().any(|w| w.job_id == r.head), "a head waits");
            prop_assert_eq!(r.cards.len(), head.gpu_count as usize);
            prop_assert!(r.start_ms >= NOW);
            let Need::Fixed(need) = head.need else { unreachable!() };
            for g in &r.cards {
                let card = inp.cards.iter().find(|c| c.uuid == g.uuid).unwrap();
                prop_assert_eq!(&card.node, &inp.cards.iter().find(|c| c.uuid == r.cards[0].uuid).unwrap().node);
                // What holds the card at the head's start: holders past it, and every job of
                // this plan on it whose bound runs past it (or that has none).
                let released: i64 = bf.releases.iter()
                    .filter(|rl| rl.deadline_ms + SLACK <= r.start_ms)
                    .flat_map(|rl| rl.grants.iter())
                    .filter(|gr| gr.uuid == card.uuid)
                    .map(|gr| gr.vram_mib)
                    .sum();
                let mut held_at = card.exclusive_held && !bf.releases.iter().any(|rl| {
                    rl.exclusive && rl.deadline_ms + SLACK <= r.start_ms
                        && rl.grants.iter().any(|gr| gr.uuid == card.uuid)
                });
                let mut reserved = (card.reserved_mib - released).max(0);
                for a in &p.admitted {
                    let j = job(a.job_id);
                    let ends = bf.bounds.get(&j.id).map(|b| NOW + b + SLACK);
                    if ends.is_some_and(|e| e <= r.start_ms) {
                        continue;
                    }
                    for gr in a.cards.iter().filter(|gr| gr.uuid == card.uuid) {
                        reserved += gr.vram_mib;
                        held_at |= j.exclusive;
                    }
                }
                let free = card.total_mib - reserved;
                prop_assert!(!held_at, "an exclusive job holds a kept card at the head's start");
                if head.exclusive {
                    prop_assert_eq!(reserved, 0, "something runs past an exclusive head's start");
                } else {
                    prop_assert!(free >= need, "card {} has {} free at the head's start, the head needs {}", card.index, free, need);
                    prop_assert_eq!(g.vram_mib, need);
                }
            }
        }
        // Heads never share a card.
        let mut kept = std::collections::HashSet::new();
        for g in p.reserved.iter().flat_map(|r| r.cards.iter()) {
            prop_assert!(kept.insert(g.uuid), "two heads keep one card");
        }
    }
}
