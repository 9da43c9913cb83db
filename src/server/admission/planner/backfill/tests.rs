use super::super::*;

const M: &str = "NVIDIA GeForce RTX 3090";
const SLACK: i64 = 1_000;

fn card(index: u32, reserved: i64) -> Card {
    Card {
        uuid: Uuid::from_u128(0xC000 + u128::from(index)),
        node: "a".into(),
        index,
        model: M.into(),
        total_mib: 24_000,
        reserved_mib: reserved,
        external_mib: 0,
        online: true,
        exclusive_held: false,
    }
}

fn job(n: u128, need: i64) -> QueuedJob {
    QueuedJob {
        id: Uuid::from_u128(n),
        seq: n as i64,
        priority: 0,
        past_soft_budget: false,
        standing: crate::model::Standing::EVEN,
        gpu_count: 1,
        need: Need::Fixed(need),
        exclusive: false,
        queued_at_ms: 0,
        nodes: None,
    }
}

/// One card, 16000 of its 24000 MiB held by a job whose deadline is at 10 s; `jobs` queued with
/// their bounds, at time 0.
fn input(jobs: &[(u128, i64, Option<i64>)], backfill: bool) -> PlanInput {
    let c = card(0, 16_000);
    let releases = vec![Release {
        job_id: Uuid::from_u128(99),
        deadline_ms: 10_000,
        grants: vec![CardGrant {
            uuid: c.uuid,
            vram_mib: 16_000,
        }],
        exclusive: false,
    }];
    PlanInput {
        cards: vec![c],
        queue: jobs.iter().map(|&(n, need, _)| job(n, need)).collect(),
        headroom_mib: 0,
        starvation_after_ms: i64::MAX,
        now_ms: 0,
        backfill: backfill.then(|| Backfill {
            releases,
            bounds: jobs
                .iter()
                .filter_map(|&(n, _, b)| Some((Uuid::from_u128(n), b?)))
                .collect(),
            slack_ms: SLACK,
        }),
    }
}

fn admitted(p: &Plan) -> Vec<u128> {
    p.admitted.iter().map(|a| a.job_id.as_u128()).collect()
}

fn reason(p: &Plan, n: u128) -> &WaitReason {
    let w = p.waiting.iter().find(|w| w.job_id == Uuid::from_u128(n));
    &w.expect("the job waits").reason
}

#[test]
fn a_short_job_backfills_a_long_one_waits_and_one_beside_the_head_starts() {
    // Head 1 needs 20000 (8000 free now); its card frees by 10 s + slack.
    let jobs = [
        (1, 20_000, Some(60_000)),
        (2, 2_000, Some(5_000)),   // ends by 6 s: before the head's start
        (3, 6_000, Some(100_000)), // runs past it, and 6000 > the 4000 beside the head
        (4, 3_000, Some(100_000)), // runs past it, but fits beside the head
        (5, 1_500, None),          // no bound: only beside, and 1000 are left there
    ];
    let p = plan(&input(&jobs, true));
    assert_eq!(admitted(&p), vec![2, 4]);
    assert_eq!(
        p.reserved,
        vec![Reservation {
            head: Uuid::from_u128(1),
            start_ms: 10_000 + SLACK,
            cards: vec![CardGrant {
                uuid: card(0, 0).uuid,
                vram_mib: 20_000
            }],
        }]
    );
    let want = WaitReason::ReservedForHead {
        head: Uuid::from_u128(1),
        start_by_ms: 11_000,
        max_timeout_ms: 10_000,
    };
    assert_eq!(reason(&p, 3), &want);
    assert_eq!(reason(&p, 5), &want);
    let words = want.message();
    assert!(
        words.contains("kept for job 00000000-0000-0000-0000-000000000001")
            && words.contains("timeout of at most 10s"),
        "{words}"
    );
    assert!(matches!(reason(&p, 1), WaitReason::InsufficientVram { .. }));
}

#[test]
fn without_backfill_later_jobs_take_what_they_fit_on() {
    let jobs = [
        (1, 20_000, Some(60_000)),
        (2, 2_000, Some(5_000)),
        (3, 6_000, Some(100_000)),
    ];
    let p = plan(&input(&jobs, false));
    assert_eq!(admitted(&p), vec![2, 3]);
    assert!(p.reserved.is_empty());
}

#[test]
fn a_head_behind_jobs_without_a_known_end_keeps_nothing() {
    let mut inp = input(&[(1, 20_000, None), (2, 6_000, None)], true);
    if let Some(b) = &mut inp.backfill {
        b.releases.clear();
    }
    let p = plan(&inp);
    assert_eq!(admitted(&p), vec![2]);
    assert!(p.reserved.is_empty());
}

#[test]
fn one_head_per_priority_level_and_heads_never_share_a_card() {
    // Two cards; the second frees later. Level 5's head takes the earlier one, level 0's head
    // the later one; a second waiting job of level 0 gets nothing kept.
    let mut inp = input(&[], true);
    let c1 = card(1, 16_000);
    inp.cards.push(c1.clone());
    if let Some(b) = &mut inp.backfill {
        b.releases.push(Release {
            job_id: Uuid::from_u128(98),
            deadline_ms: 50_000,
            grants: vec![CardGrant {
                uuid: c1.uuid,
                vram_mib: 16_000,
            }],
            exclusive: false,
        });
    }
    let mut high = job(1, 20_000);
    high.priority = 5;
    inp.queue = vec![high, job(2, 20_000), job(3, 20_000)];
    let p = plan(&inp);
    let kept: Vec<(u128, i64, u32)> = p
        .reserved
        .iter()
        .map(|r| {
            let index = if r.cards[0].uuid == c1.uuid { 1 } else { 0 };
            (r.head.as_u128(), r.start_ms, index)
        })
        .collect();
    assert_eq!(kept, vec![(1, 11_000, 0), (2, 51_000, 1)]);
}

#[test]
fn an_exclusive_head_lets_nothing_run_past_its_start() {
    let mut inp = input(&[(2, 1_000, Some(5_000)), (3, 1_000, Some(100_000))], true);
    let mut head = job(1, 20_000);
    head.exclusive = true;
    inp.queue.push(head);
    inp.queue.sort_by_key(|j| j.seq);
    let p = plan(&inp);
    assert_eq!(admitted(&p), vec![2]);
    assert_eq!(p.reserved[0].cards[0].vram_mib, 24_000);
    assert!(matches!(reason(&p, 3), WaitReason::ReservedForHead { .. }));
}
