use super::*;
use crate::server::admission::planner::Need;

const MIN: i64 = 60_000;

fn card() -> Card {
    Card {
        uuid: Uuid::from_u128(0xC0),
        node: "n".into(),
        index: 0,
        model: "M".into(),
        total_mib: 24_000,
        reserved_mib: 20_000,
        external_mib: 0,
        online: true,
        exclusive_held: false,
    }
}

/// One card held by a `train` job started `ran_min` minutes ago with a 60-minute deadline, and a
/// queued job that needs the card; `runs` is the history of `train`, in minutes.
fn snapshot(ran_min: i64, runs: &[i64]) -> Snapshot {
    let now = 1_000 * MIN;
    let mut history = History::new();
    if !runs.is_empty() {
        history.insert(
            "train".into(),
            Durations::new(runs.iter().map(|m| m * MIN).collect()),
        );
    }
    Snapshot {
        cards: vec![card()],
        holding: vec![Holding {
            id: Uuid::from_u128(1),
            owner: Uuid::from_u128(100),
            gpu_count: 1,
            grants: vec![CardGrant {
                uuid: Uuid::from_u128(0xC0),
                vram_mib: 20_000,
            }],
            exclusive: false,
            array: None,
            workload: Some("train".into()),
            timeout_ms: 60 * MIN,
            started_ms: Some(now - ran_min * MIN),
            ended: false,
        }],
        queued: vec![Waiter {
            job: QueuedJob {
                id: Uuid::from_u128(2),
                seq: 2,
                priority: 0,
                past_soft_budget: false,
                standing: crate::model::Standing::EVEN,
                gpu_count: 1,
                need: Need::Fixed(10_000),
                exclusive: false,
                queued_at_ms: now,
                nodes: None,
            },
            owner: Uuid::from_u128(101),
            workload: None,
            timeout_ms: 30 * MIN,
            after: Vec::new(),
            array: None,
            held: None,
        }],
        caps: Caps::default(),
        array_limits: HashMap::new(),
        headroom_mib: 0,
        starvation_after_ms: 24 * 60 * MIN,
        slack_ms: MIN / 2,
        history,
        typical: (Typical::Median, Typical::Median),
        now_ms: now,
        backfill: false,
    }
}

fn of(s: &Snapshot) -> Estimate {
    estimate(s, 100)
        .remove(&Uuid::from_u128(2))
        .expect("the queued job has figures")
}

#[test]
fn the_estimate_follows_the_history_and_the_bound_the_deadline() {
    let s = snapshot(0, &[5, 10, 15, 20, 30]);
    let e = of(&s);
    assert_eq!(e.expected, Start::At(s.now_ms + 15 * MIN));
    assert_eq!(e.latest, Start::At(s.now_ms + 60 * MIN + MIN / 2));
    // Twelve minutes in, the runs that lasted longer (15, 20, 30) say 20 in all: 8 more.
    let s = snapshot(12, &[5, 10, 15, 20, 30]);
    let e = of(&s);
    assert_eq!(e.expected, Start::At(s.now_ms + 8 * MIN));
    assert_eq!(e.latest, Start::At(s.now_ms + 48 * MIN + MIN / 2));
}

#[test]
fn without_history_both_figures_are_the_deadline() {
    let s = snapshot(10, &[]);
    let e = of(&s);
    assert_eq!(e.expected, Start::At(s.now_ms + 50 * MIN));
    assert_eq!(e.latest, Start::At(s.now_ms + 50 * MIN + MIN / 2));
}

#[test]
fn a_job_past_its_deadline_is_expected_to_end_now_and_a_job_that_never_fits_says_so() {
    let s = snapshot(70, &[90]);
    let e = of(&s);
    assert_eq!(e.expected, Start::At(s.now_ms));
    assert_eq!(e.latest, Start::At(s.now_ms));
    let mut s = snapshot(0, &[]);
    s.queued[0].job.need = Need::Fixed(50_000);
    match of(&s) {
        Estimate {
            expected: Start::Never(a),
            latest: Start::Never(b),
        } => assert_eq!(a, b),
        other => panic!("{other:?}"),
    }
}
