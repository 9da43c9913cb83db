use super::*;

const RTX: &str = "NVIDIA GeForce RTX 3090";
const A100: &str = "NVIDIA A100 80GB";

fn card(node: &str, index: u32, model: &str, total: i64) -> Card {
    Card {
        uuid: Uuid::from_u128(0xC000 + u128::from(index) + 100 * u128::from(node.as_bytes()[0])),
        node: node.to_string(),
        index,
        model: model.to_string(),
        total_mib: total,
        reserved_mib: 0,
        external_mib: 0,
        online: true,
        exclusive_held: false,
    }
}

fn job(n: u128, need: Need, gpu_count: u32) -> QueuedJob {
    QueuedJob {
        id: Uuid::from_u128(n),
        seq: n as i64,
        priority: 0,
        past_soft_budget: false,
        standing: crate::model::Standing::EVEN,
        gpu_count,
        need,
        exclusive: false,
        queued_at_ms: 0,
        nodes: None,
    }
}

fn input(cards: Vec<Card>, queue: Vec<QueuedJob>) -> PlanInput {
    PlanInput {
        cards,
        queue,
        headroom_mib: 0,
        starvation_after_ms: 1_000,
        now_ms: 500,
        backfill: None,
    }
}

/// `c` with `mib` already reserved by running jobs.
fn busy(mut c: Card, mib: i64) -> Card {
    c.reserved_mib = mib;
    c
}

fn per_model(entries: &[(&str, i64)]) -> Need {
    Need::PerModel(entries.iter().map(|(m, v)| (m.to_string(), *v)).collect())
}

fn granted(p: &Plan, id: u128) -> Vec<(Uuid, i64)> {
    let pl = p
        .admitted
        .iter()
        .find(|pl| pl.job_id == Uuid::from_u128(id));
    pl.map(|pl| pl.cards.iter().map(|g| (g.uuid, g.vram_mib)).collect())
        .unwrap_or_default()
}

fn reason(p: &Plan, id: u128) -> &WaitReason {
    let w = p.waiting.iter().find(|w| w.job_id == Uuid::from_u128(id));
    &w.expect("job should wait").reason
}

/// Why `job`, alone in the queue, waits for `cards`.
fn lone_wait(cards: Vec<Card>, job: QueuedJob) -> WaitReason {
    let id = job.id;
    let p = plan(&input(cards, vec![job]));
    let w = p.waiting.into_iter().find(|w| w.job_id == id);
    w.expect("job should wait").reason
}

#[test]
fn best_fit_picks_smallest_sufficient_card() {
    let cards = vec![
        card("a", 0, RTX, 24_000),
        card("a", 1, RTX, 12_000),
        card("a", 2, RTX, 16_000),
    ];
    let p = plan(&input(cards.clone(), vec![job(1, Need::Fixed(10_000), 1)]));
    assert_eq!(granted(&p, 1), vec![(cards[1].uuid, 10_000)]);
}

#[test]
fn best_fit_across_nodes_minimises_leftover_then_name() {
    let cards = vec![
        card("a", 0, RTX, 16_000),
        card("a", 1, RTX, 16_000),
        card("b", 0, RTX, 12_000),
        card("b", 1, RTX, 12_000),
        card("c", 0, RTX, 12_000),
        card("c", 1, RTX, 12_000),
    ];
    let p = plan(&input(cards.clone(), vec![job(1, Need::Fixed(10_000), 2)]));
    assert_eq!(
        granted(&p, 1),
        vec![(cards[2].uuid, 10_000), (cards[3].uuid, 10_000)]
    );
}

#[test]
fn per_model_need_applies_and_missing_model_excluded() {
    let cards = vec![card("a", 0, RTX, 24_000), card("a", 1, A100, 80_000)];
    let need = per_model(&[(A100, 30_000)]);
    let p = plan(&input(cards.clone(), vec![job(1, need, 1)]));
    assert_eq!(granted(&p, 1), vec![(cards[1].uuid, 30_000)]);
}

#[test]
fn priority_first_and_skip_and_continue() {
    let cards = vec![card("a", 0, RTX, 24_000)];
    let mut big = job(1, Need::Fixed(30_000), 1);
    big.priority = 5;
    let mut small = job(2, Need::Fixed(20_000), 1);
    small.priority = 1;
    let mut smaller = job(3, Need::Fixed(10_000), 1);
    smaller.priority = 3;
    let p = plan(&input(cards, vec![small, big, smaller]));
    assert_eq!(p.admitted.len(), 1);
    assert_eq!(p.admitted[0].job_id, Uuid::from_u128(3));
    assert_eq!(
        p.waiting.iter().map(|w| w.job_id).collect::<Vec<_>>(),
        [1, 2].map(Uuid::from_u128)
    );
}

#[test]
fn exclusive_takes_whole_idle_card_and_blocks_sharing() {
    let mut cards = vec![
        busy(card("a", 0, RTX, 24_000), 1_000),
        card("a", 1, RTX, 24_000),
    ];
    cards[1].external_mib = 4_000;
    let mut ex = job(1, Need::Fixed(8_000), 1);
    ex.exclusive = true;
    let mut inp = input(
        cards.clone(),
        vec![ex, job(2, Need::Fixed(0), 1), job(3, Need::Fixed(0), 1)],
    );
    inp.headroom_mib = 500;
    inp.cards[1].reserved_mib = 0;
    let p = plan(&inp);
    // Card 0 is busy, so the exclusive job takes all free memory of card 1.
    assert_eq!(granted(&p, 1), vec![(cards[1].uuid, 24_000 - 500 - 4_000)]);
    // Zero-need jobs could squeeze anywhere, yet never onto the held card.
    assert_eq!(granted(&p, 2), vec![(cards[0].uuid, 0)]);
    assert_eq!(granted(&p, 3), vec![(cards[0].uuid, 0)]);
    // A second exclusive job finds no idle card.
    let mut ex2 = job(4, Need::Fixed(1_000), 1);
    ex2.exclusive = true;
    inp.queue.push(ex2);
    let p = plan(&inp);
    assert_eq!(
        reason(&p, 4).message(),
        "needs 1000 MiB on 1 idle card (exclusive use); no card of a suitable model is idle"
    );
}

#[test]
fn single_card_wait_message() {
    let cards = vec![
        busy(card("a", 0, A100, 81_920), 80_000),
        busy(card("a", 1, RTX, 24_576), 12_288),
    ];
    let need = per_model(&[(RTX, 20_480), (A100, 20_480)]);
    assert_eq!(
        lone_wait(cards, job(1, need, 1)).message(),
        "needs 20480 MiB on 1 card; best free: 12288 MiB on GPU 1 (NVIDIA GeForce RTX 3090, node a)"
    );
}

#[test]
fn multi_card_wait_message() {
    let cards = vec![
        card("a", 0, RTX, 24_000),
        busy(card("a", 1, RTX, 24_000), 20_000),
        card("b", 0, RTX, 24_000),
    ];
    assert_eq!(
        lone_wait(cards, job(1, Need::Fixed(8_000), 2)).message(),
        "needs 2 cards with 8000 MiB each on one node; best: 1 such card on node a"
    );
}

#[test]
fn no_eligible_model_message() {
    let mut a100 = card("a", 1, A100, 80_000);
    a100.online = false;
    let cards = vec![card("a", 0, RTX, 24_000), a100];
    let reason = lone_wait(cards, job(1, per_model(&[(A100, 1_000)]), 1));
    assert_eq!(reason, WaitReason::NoEligibleCard);
    assert_eq!(
        reason.message(),
        "no card of a model this workload runs on is online"
    );
}

#[test]
fn starving_job_holds_cards_against_later_jobs_only() {
    let cards = vec![
        busy(card("a", 0, RTX, 24_000), 20_000),
        busy(card("a", 1, RTX, 24_000), 10_000),
    ];
    let mut early = job(1, Need::Fixed(4_000), 1);
    early.priority = 9;
    let mut starving = job(2, Need::Fixed(20_000), 1);
    starving.priority = 5;
    starving.queued_at_ms = -10_000;
    let late = job(3, Need::Fixed(4_000), 1);
    let late2 = job(4, Need::Fixed(4_000), 1);
    let p = plan(&input(cards.clone(), vec![late, starving, early, late2]));
    // The earlier job is unaffected and best-fits onto card 0.
    assert_eq!(granted(&p, 1), vec![(cards[0].uuid, 4_000)]);
    let r = reason(&p, 2);
    assert_eq!(
        r.held_cards().iter().map(|c| c.index).collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(
        r.message(),
        "needs 20000 MiB on 1 card; best free: 14000 MiB on GPU 1 (NVIDIA GeForce RTX 3090, node a); \
         waited past the starvation limit, so it holds GPU 1 on node a"
    );
    let holder = Uuid::from_u128(2);
    assert_eq!(reason(&p, 3), &WaitReason::HeldForOlderJob { holder });
    assert_eq!(
        reason(&p, 4).message(),
        format!("cards held for an older waiting job ({holder})")
    );
}

#[test]
fn starving_job_that_never_fits_holds_nothing() {
    let cards = vec![card("a", 0, RTX, 24_000)];
    let mut starving = job(1, Need::Fixed(30_000), 1);
    starving.queued_at_ms = -10_000;
    let p = plan(&input(cards, vec![starving, job(2, Need::Fixed(1_000), 1)]));
    assert!(reason(&p, 1).held_cards().is_empty());
    assert_eq!(p.admitted.len(), 1);
}

#[test]
fn failed_shape_reason_tracks_later_capacity_changes() {
    let cards = vec![card("a", 0, RTX, 24_000), card("a", 1, RTX, 10_000)];
    let q = vec![
        job(1, Need::Fixed(30_000), 1),
        job(2, Need::Fixed(9_000), 1),
        job(3, Need::Fixed(30_000), 1),
    ];
    let p = plan(&input(cards, q));
    assert!(reason(&p, 1).message().contains("best free: 24000 MiB"));
    // Job 2 best-fits onto the 10000 card, so the big card is still 24000.
    assert!(reason(&p, 3).message().contains("best free: 24000 MiB"));
}

#[test]
fn never_fits_messages() {
    let cards = vec![
        card("a", 0, A100, 81_920),
        card("a", 1, RTX, 24_576),
        card("a", 2, RTX, 24_576),
    ];
    assert_eq!(
        never_fits(&Need::Fixed(1_000), 4, false, &cards, 0).as_deref(),
        Some("asks for 4 GPUs but the largest node has 3")
    );
    assert_eq!(
        never_fits(&per_model(&[("Tesla T4", 1_000)]), 1, false, &cards, 0).as_deref(),
        Some("workload has no manifest entry for any GPU model present (present: NVIDIA A100 80GB, NVIDIA GeForce RTX 3090)")
    );
    assert_eq!(
        never_fits(&Need::Fixed(90_000), 1, false, &cards, 0).as_deref(),
        Some("needs 90000 MiB per card; the largest card (NVIDIA A100 80GB) offers 81920 MiB")
    );
    assert_eq!(
        never_fits(&Need::Fixed(30_000), 2, true, &cards, 0).as_deref(),
        Some("asks for 2 whole GPUs (exclusive) with at least 30000 MiB each, but at most 1 such cards are on one node (a)")
    );
    assert_eq!(
        never_fits(&Need::Fixed(24_000), 3, false, &cards, 500),
        None
    );
    assert!(never_fits(&Need::Fixed(24_100), 3, false, &cards, 500).is_some());
    assert_eq!(
        never_fits(&per_model(&[(RTX, 20_000)]), 2, false, &cards, 0),
        None
    );
}

#[test]
fn shuffled_input_gives_identical_plan() {
    let cards = vec![
        card("b", 0, RTX, 24_000),
        card("a", 1, RTX, 24_000),
        card("a", 0, A100, 80_000),
    ];
    let q: Vec<QueuedJob> = (1..=6)
        .map(|i| job(i, Need::Fixed(9_000 * i as i64), 1))
        .collect();
    let p1 = plan(&input(cards.clone(), q.clone()));
    let mut rc = cards;
    rc.reverse();
    let mut rq = q;
    rq.rotate_left(2);
    assert_eq!(p1, plan(&input(rc, rq)));
}

#[test]
fn a_job_restricted_to_nodes_goes_only_there() {
    // Best fit would pick node a's smaller card; the job's image is only on node b.
    let a = card("a", 0, RTX, 12_000);
    let b = card("b", 0, RTX, 24_000);
    let mut only_b = job(1, Need::Fixed(10_000), 1);
    only_b.nodes = Some(vec!["b".into()]);
    let anywhere = job(2, Need::Fixed(10_000), 1);
    let p = plan(&input(vec![a.clone(), b.clone()], vec![only_b, anywhere]));
    assert_eq!(granted(&p, 1), vec![(b.uuid, 10_000)]);
    assert_eq!(granted(&p, 2), vec![(a.uuid, 10_000)]);
    // Restricted to a node that has no room, it waits rather than going elsewhere.
    let mut only_a = job(3, Need::Fixed(20_000), 1);
    only_a.nodes = Some(vec!["a".into()]);
    let p = plan(&input(vec![a, b], vec![only_a]));
    assert!(p.admitted.is_empty(), "{p:?}");
    assert_eq!(p.waiting.len(), 1);
}

#[test]
fn a_pull_in_progress_reads_in_gigabytes() {
    let r = WaitReason::Pulling {
        image: "r.example/x:1".into(),
        node: "gpu1".into(),
        bytes_done: 3_200_000_000,
        bytes_total: Some(9_800_000_000),
        note: None,
    };
    assert_eq!(
        r.message(),
        "pulling image r.example/x:1 on node gpu1: 3.2 of 9.8 GB"
    );
}

#[test]
fn a_soft_budgets_owner_goes_after_the_rest_of_its_priority_only() {
    let one = || vec![card("a", 0, RTX, 24_576)];
    // Job 1 came first, but its owner is past a soft budget: job 2 of the same priority takes
    // the card.
    let past = QueuedJob {
        past_soft_budget: true,
        ..job(1, Need::Fixed(20_000), 1)
    };
    let p = plan(&input(
        one(),
        vec![past.clone(), job(2, Need::Fixed(20_000), 1)],
    ));
    assert_eq!(granted(&p, 2).len(), 1);
    assert!(granted(&p, 1).is_empty());
    // A lower priority still goes after it.
    let low = QueuedJob {
        priority: -1,
        ..job(3, Need::Fixed(20_000), 1)
    };
    let p = plan(&input(one(), vec![low, past]));
    assert_eq!(granted(&p, 1).len(), 1);
    assert!(granted(&p, 3).is_empty());
}
