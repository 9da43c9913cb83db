use super::*;
use crate::server::admission::planner::Need;

const MIN: i64 = 60_000;
const DAY: i64 = 24 * 60 * MIN;

fn card(index: u32, total: i64) -> Card {
    Card {
        uuid: Uuid::from_u128(0xC000 + u128::from(index)),
        node: "n".into(),
        index,
        model: "M".into(),
        total_mib: total,
        reserved_mib: 0,
        external_mib: 0,
        online: true,
        exclusive_held: false,
    }
}

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

/// Job `n` of `owner`, asking for one card with `mib`, running `run_min` minutes.
fn job(n: u128, owner: u128, mib: i64, run_min: i64) -> SimJob {
    SimJob {
        job: QueuedJob {
            id: id(n),
            seq: n as i64,
            priority: 0,
            past_soft_budget: false,
            standing: crate::model::Standing::EVEN,
            gpu_count: 1,
            need: Need::Fixed(mib),
            exclusive: false,
            queued_at_ms: 0,
            nodes: None,
        },
        owner: id(owner),
        run_ms: run_min * MIN,
        after: Vec::new(),
        array: None,
        held: None,
    }
}

fn sim(cards: Vec<Card>, pending: Vec<SimJob>) -> Sim {
    Sim {
        cards,
        active: Vec::new(),
        pending,
        caps: Caps::default(),
        array_limits: HashMap::new(),
        headroom_mib: 0,
        starvation_after_ms: DAY,
        now_ms: 0,
        backfill: None,
    }
}

fn at_min(starts: &HashMap<Uuid, Start>, n: u128) -> Start {
    starts
        .get(&id(n))
        .cloned()
        .expect("every job has an answer")
}

#[test]
fn a_queue_over_two_cards_starts_each_job_when_a_card_frees() {
    let queue = vec![
        job(1, 100, 20_000, 10),
        job(2, 100, 20_000, 5),
        job(3, 100, 20_000, 7),
        job(4, 100, 20_000, 1),
        job(5, 100, 30_000, 1),
    ];
    let starts = sim(vec![card(0, 24_000), card(1, 24_000)], queue).run(100);
    assert_eq!(at_min(&starts, 1), Start::At(0));
    assert_eq!(at_min(&starts, 2), Start::At(0));
    // Job 2 ends at 5 and frees its card for job 3; job 1 ends at 10 and frees its for job 4.
    assert_eq!(at_min(&starts, 3), Start::At(5 * MIN));
    assert_eq!(at_min(&starts, 4), Start::At(10 * MIN));
    // No card is big enough for job 5: it says so instead of a date.
    match at_min(&starts, 5) {
        Start::Never(why) => assert!(why.contains("30000 MiB"), "{why}"),
        other => panic!("job 5 should never start, got {other:?}"),
    }
}

#[test]
fn jobs_already_running_end_first_and_small_jobs_share_a_card() {
    let mut s = sim(
        vec![card(0, 24_000), card(1, 24_000)],
        vec![job(1, 100, 20_000, 10), job(2, 100, 4_000, 3)],
    );
    // A running job holds 20 GB of card 0 until minute 8.
    s.cards[0].reserved_mib = 20_000;
    s.active.push(Active {
        id: id(9),
        owner: id(200),
        gpu_count: 1,
        grants: vec![CardGrant {
            uuid: s.cards[0].uuid,
            vram_mib: 20_000,
        }],
        exclusive: false,
        array: None,
        ends_ms: 8 * MIN,
    });
    s.cards[1].reserved_mib = 22_000;
    s.active.push(Active {
        id: id(8),
        owner: id(200),
        gpu_count: 1,
        grants: vec![CardGrant {
            uuid: s.cards[1].uuid,
            vram_mib: 22_000,
        }],
        exclusive: false,
        array: None,
        ends_ms: 20 * MIN,
    });
    let starts = s.run(100);
    // Job 1 needs a card's 20 GB: card 0 at minute 8. Job 2's 4 GB fit beside the running job on
    // card 0 at once (best fit: 24 - 20 - 4 = 0 left).
    assert_eq!(at_min(&starts, 1), Start::At(8 * MIN));
    assert_eq!(at_min(&starts, 2), Start::At(0));
}

#[test]
fn caps_priorities_dependencies_arrays_and_held_jobs_are_respected() {
    let mut queue = vec![
        job(1, 100, 1_000, 10),
        job(2, 100, 1_000, 10), // capped: its owner runs 1 at a time
        job(3, 101, 1_000, 4),
        job(4, 101, 1_000, 4), // after job 3
        job(5, 102, 1_000, 2),
        job(6, 102, 1_000, 2), // array of 5 and 6, 1 at a time
        job(7, 103, 1_000, 1), // held: its owner is disabled
        job(8, 104, 20_000, 1),
    ];
    queue[3].after = vec![id(3)];
    queue[4].array = Some(id(50));
    queue[5].array = Some(id(50));
    queue[6].held = Some("its owner's account is disabled".into());
    // Submitted last but of higher priority: it goes before job 1 and takes the big card's room.
    queue[7].job.priority = 5;
    let mut s = sim(vec![card(0, 24_000), card(1, 24_000)], queue);
    s.caps.max_running_per_user = 1;
    s.array_limits.insert(id(50), 1);
    let starts = s.run(100);
    assert_eq!(at_min(&starts, 8), Start::At(0));
    assert_eq!(at_min(&starts, 1), Start::At(0));
    assert_eq!(at_min(&starts, 2), Start::At(10 * MIN));
    assert_eq!(at_min(&starts, 3), Start::At(0));
    assert_eq!(at_min(&starts, 4), Start::At(4 * MIN));
    assert_eq!(at_min(&starts, 5), Start::At(0));
    assert_eq!(at_min(&starts, 6), Start::At(2 * MIN));
    assert_eq!(
        at_min(&starts, 7),
        Start::Never("its owner's account is disabled".into())
    );
}

#[test]
fn the_step_limit_leaves_the_rest_unknown() {
    let queue = (1..=4).map(|n| job(n, 100, 20_000, 1)).collect();
    let starts = sim(vec![card(0, 24_000)], queue).run(1);
    assert_eq!(at_min(&starts, 1), Start::At(0));
    assert_eq!(at_min(&starts, 2), Start::At(MIN));
    assert_eq!(at_min(&starts, 3), Start::Unknown);
    assert_eq!(at_min(&starts, 4), Start::Unknown);
}
