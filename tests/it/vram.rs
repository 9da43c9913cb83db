//! Observed VRAM and its policing (issue 12), end to end: real Postgres, real dockerd, jobs in
//! fenced containers. The sampler's rounds are driven by the test (`Sampler::round`), so every
//! reading is deterministic; the runner stops what the policing decides, as in `gpuq serve`.
//! Simulated cards get their usage through the admin API; real-card reading goes through the fake
//! NVML with the job container's real host PID, mapped by its `/proc/<pid>/cgroup`.

use crate::support::isolation::{event_kinds, host_pid_of};
use crate::support::nvml::{sim_source, spawn_observer, FakeNvml};
use crate::support::{wait_status, FencedCard};
use gpuq::model::gpu_id;
use gpuq::server::metrics::snapshot;
use gpuq::server::vram::{Round, Sampler, VramConfig};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::Duration;
use uuid::Uuid;

const IMAGE: &str = "gpuq-test/busybox:latest";
const CARD: &str = "1x24576:NVIDIA GeForce RTX 3090";

type Setup = FencedCard;

async fn setup(pool: PgPool, node: &str) -> Setup {
    FencedCard::start(pool, CARD, node).await
}

fn config(node: &str) -> VramConfig {
    VramConfig {
        node: node.into(),
        every: Duration::from_millis(100),
        overuse_samples: 3,
        reserve_mib: 512,
    }
}

/// [`setup`] and a sampler that reads the card's simulated usage (what [`use_mib`] sets).
async fn sim_setup(pool: PgPool, node: &str) -> (Setup, Sampler) {
    let s = setup(pool, node).await;
    let cards = spawn_observer(sim_source(&s.app.pool, CARD, node)).await;
    let sampler = Sampler::new(s.app.pool.clone(), cards, config(node));
    (s, sampler)
}

/// A job holding `mib` on the card that runs until stopped.
async fn sleeper(s: &Setup, mib: i64) -> Uuid {
    let spec = json!({ "image": IMAGE, "command": ["sleep", "300"], "min_vram_mb": mib });
    let id = s.app.submit_ok(&s.member, spec).await;
    wait_status(&s.app, &s.member, id, &["running"], 60).await;
    id
}

/// Two such jobs of 4000 MiB each, both running, in the order they were submitted.
async fn two_sleepers(s: &Setup) -> (Uuid, Uuid) {
    (sleeper(s, 4000).await, sleeper(s, 4000).await)
}

async fn set_sim(s: &Setup, body: Value) -> crate::support::Reply {
    s.app
        .put(
            &format!("/api/v1/gpus/{}/sim", gpu_id(&s.card)),
            &s.admin,
            body,
        )
        .await
}

async fn use_mib(s: &Setup, usage: &[(Uuid, i64)], external: i64) {
    let jobs: serde_json::Map<String, Value> = usage
        .iter()
        .map(|(j, m)| (j.to_string(), json!(m)))
        .collect();
    let r = set_sim(s, json!({ "job_used_mib": jobs, "external_mib": external })).await;
    assert_eq!(r.status, 204, "{}", r.text);
}

async fn round(sampler: &mut Sampler) -> Round {
    sampler.round().await.expect("a sampling round")
}

/// The job's card as the API shows it (used, peak, over).
async fn card_of(s: &Setup, id: Uuid) -> Value {
    s.app.job(&s.member, id).await["assigned_gpus"][0].clone()
}

#[sqlx::test(migrations = false)]
async fn an_overrunning_job_on_a_short_card_is_stopped_and_its_neighbour_runs_on(pool: PgPool) {
    let (s, mut sampler) = sim_setup(pool, "vr1").await;
    let (greedy, polite) = two_sleepers(&s).await;

    // Within their commitments: read, recorded, nothing else.
    use_mib(&s, &[(greedy, 3000), (polite, 3500)], 0).await;
    let r = round(&mut sampler).await;
    assert_eq!((r.readings, r.warned, r.stopped), (2, 0, 0), "{r:?}");
    let g = card_of(&s, greedy).await;
    assert_eq!(
        (g["used_mib"].as_i64(), g["peak_mib"].as_i64()),
        (Some(3000), Some(3000))
    );
    assert_eq!(g["over_commitment"], false);
    let used: Option<i64> = s
        .app
        .scalar_of("SELECT used_mib FROM gpus WHERE uuid = $1", s.card)
        .await;
    assert_eq!(used, Some(6500), "the card shows what its jobs use");
    let figures = snapshot::read(&s.app.pool, "vr1").await.unwrap();
    assert_eq!(
        figures.cards[0].jobs_used_mib,
        Some(6500),
        "/metrics has it"
    );
    assert_eq!(figures.cards[0].jobs_over, 0);

    // The greedy job takes 9000 of its 4000 while foreign processes hold 12000: 76 MiB free.
    use_mib(&s, &[(greedy, 9000)], 12000).await;
    let r = round(&mut sampler).await;
    assert_eq!(r.stopped, 1, "{r:?}");
    let v = wait_status(
        &s.app,
        &s.member,
        greedy,
        &["failed", "cancelled", "succeeded"],
        30,
    )
    .await;
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(
        v["stop_cause"], "vram_overuse",
        "the cause travels with the stop: {v}"
    );
    let reason = v["status_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("vram_overuse: declared 4000 MiB") && reason.contains("used 9000 MiB"),
        "{reason}"
    );
    assert!(reason.contains("76 MiB free"), "{reason}");
    assert!(event_kinds(&s.app, greedy)
        .await
        .contains(&"vram_overuse".to_string()));
    assert_eq!(
        snapshot::read(&s.app.pool, "vr1").await.unwrap().vram_stops,
        1
    );
    assert_eq!(
        card_of(&s, greedy).await["peak_mib"],
        9000,
        "the record keeps the peak"
    );

    // Its neighbour, within its commitment on the same card, runs on through more rounds.
    for _ in 0..3 {
        let r = round(&mut sampler).await;
        assert_eq!(r.stopped, 0, "{r:?}");
    }
    assert_eq!(s.app.job(&s.member, polite).await["status"], "running");
    assert!(!event_kinds(&s.app, polite)
        .await
        .iter()
        .any(|k| k.starts_with("vram")));
    s.end(&[polite]).await;
}

#[sqlx::test(migrations = false)]
async fn warn_warns_once_per_spell_and_never_stops(pool: PgPool) {
    let (s, mut sampler) = sim_setup(pool, "vr2").await;
    s.app
        .set_policy(&s.admin, json!({ "vram_enforcement": "warn" }))
        .await;
    let job = sleeper(&s, 4000).await;
    // Over its commitment on a short card.
    use_mib(&s, &[(job, 9000)], 15400).await;
    let warned: Vec<usize> = {
        let mut w = Vec::new();
        for _ in 0..5 {
            let r = round(&mut sampler).await;
            assert_eq!(r.stopped, 0, "warn never stops: {r:?}");
            w.push(r.warned);
        }
        w
    };
    assert_eq!(
        warned,
        vec![0, 0, 1, 0, 0],
        "warned at the third reading, once"
    );
    let kinds = event_kinds(&s.app, job).await;
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "vram_over_commitment")
            .count(),
        1,
        "{kinds:?}"
    );
    let detail: Value = s
        .app
        .scalar_of(
            "SELECT detail FROM job_events WHERE job_id = $1 AND kind = 'vram_over_commitment'",
            job,
        )
        .await;
    assert_eq!(detail["committed_mib"], 4000);
    assert_eq!(detail["used_mib"], 9000);
    assert_eq!(card_of(&s, job).await["over_commitment"], true);
    assert_eq!(s.app.job(&s.member, job).await["status"], "running");

    // Back within, then over again: a new spell, a new warning.
    use_mib(&s, &[(job, 1000)], 0).await;
    round(&mut sampler).await;
    use_mib(&s, &[(job, 5000)], 0).await;
    let again: usize = {
        let mut n = 0;
        for _ in 0..3 {
            n += round(&mut sampler).await.warned;
        }
        n
    };
    assert_eq!(again, 1);
    assert_eq!(card_of(&s, job).await["peak_mib"], 9000);
    s.end(&[job]).await;
}

#[sqlx::test(migrations = false)]
async fn foreign_memory_and_jobs_within_their_commitment_are_never_stopped(pool: PgPool) {
    let (s, mut sampler) = sim_setup(pool, "vr3").await;
    let (full, small) = two_sleepers(&s).await;
    // Foreign processes fill the card: 76 MiB free, every job within its commitment.
    use_mib(&s, &[(full, 4000), (small, 500)], 20000).await;
    for _ in 0..4 {
        let r = round(&mut sampler).await;
        assert_eq!((r.warned, r.stopped), (0, 0), "{r:?}");
    }
    for id in [full, small] {
        assert_eq!(s.app.job(&s.member, id).await["status"], "running");
    }
    let (used, external): (Option<i64>, i64) =
        sqlx::query_as("SELECT used_mib, external_mib FROM gpus WHERE uuid = $1")
            .bind(s.card)
            .fetch_one(&s.app.pool)
            .await
            .unwrap();
    assert_eq!(
        (used, external),
        (Some(24500), 20000),
        "foreign memory shows and lowers free"
    );
    s.end(&[full, small]).await;
}

#[sqlx::test(migrations = false)]
async fn simulated_usage_is_for_admins_and_for_jobs_holding_the_card(pool: PgPool) {
    let s = setup(pool, "vr4").await;
    let job = sleeper(&s, 4000).await;
    let body = json!({ "job_used_mib": { job.to_string(): 100000 } });
    // A member cannot make a neighbour look greedy (and get it stopped).
    let r = s
        .app
        .put(
            &format!("/api/v1/gpus/{}/sim", gpu_id(&s.card)),
            &s.member,
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    // More than the card holds.
    let r = set_sim(&s, body).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], format!("job_used_mib.{job}"));
    // A job that does not hold the card: named, and nothing is set.
    let stranger = Uuid::new_v4();
    let r = set_sim(
        &s,
        json!({ "job_used_mib": { job.to_string(): 10, stranger.to_string(): 10 } }),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains(&stranger.to_string()), "{}", r.text);
    let n: i64 = s.app.scalar("SELECT count(*) FROM sim_job_vram").await;
    assert_eq!(n, 0, "all or nothing");
    // Neither field.
    let r = set_sim(&s, json!({})).await;
    assert_eq!(r.status, 400, "{}", r.text);
    // A set usage is audited.
    let r = set_sim(&s, json!({ "job_used_mib": { job.to_string(): 10 } })).await;
    assert_eq!(r.status, 204, "{}", r.text);
    let audited: i64 = s
        .app
        .scalar("SELECT count(*) FROM audit_events WHERE kind = 'gpu.sim_job_usage'")
        .await;
    assert_eq!(audited, 1);
    s.end(&[job]).await;
}

#[sqlx::test(migrations = false)]
async fn real_card_readings_go_to_the_job_by_its_container_cgroup(pool: PgPool) {
    let s = setup(pool, "vr5").await;
    let (greedy, polite) = two_sleepers(&s).await;
    let pid_g = host_pid_of(&s.app, greedy).await;
    let pid_p = host_pid_of(&s.app, polite).await;
    // A foreign process: this test itself, in no gpuq container.
    let foreign = std::process::id();
    let uuid = gpu_id(&s.card);
    let state = |g: i64, p: i64, f: i64, extra: &str| {
        format!(
            "gpu {uuid} \"NVIDIA GeForce RTX 3090\" total_mib=24576 used_mib={}\n\
             proc 0 {pid_g} {g} compute\nproc 0 {pid_g} {g} graphics\n\
             proc 0 {pid_p} {p} compute\nproc 0 {foreign} {f} compute\n{extra}",
            g + p + f
        )
    };
    let fake = FakeNvml::new(&state(3000, 2000, 1000, ""));
    let cards = fake.observe(&s.app.pool, "vr5").await;
    let mut sampler = Sampler::new(s.app.pool.clone(), cards, config("vr5"));
    let r = round(&mut sampler).await;
    assert_eq!((r.readings, r.stopped), (2, 0), "{r:?}");
    // Listed twice (compute and graphics), counted once; the foreign process is no job's.
    assert_eq!(card_of(&s, greedy).await["used_mib"], 3000);
    assert_eq!(card_of(&s, polite).await["used_mib"], 2000);

    // The greedy one grows to 18000; with the foreign 6200 the card has 376 MiB free.
    fake.set(&state(18000, 0, 6200, ""));
    let r = round(&mut sampler).await;
    assert_eq!(r.stopped, 1, "{r:?}");
    let v = wait_status(&s.app, &s.member, greedy, &["failed", "cancelled"], 30).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(
        v["status_reason"]
            .as_str()
            .unwrap()
            .contains("used 18000 MiB"),
        "{v}"
    );
    assert_eq!(s.app.job(&s.member, polite).await["status"], "running");

    // After the end, NVML accounting's peak of its process is recorded.
    fake.set(&state(
        0,
        0,
        6200,
        &format!("acct 0 {pid_g} 19500 exited\n"),
    ));
    round(&mut sampler).await;
    assert_eq!(card_of(&s, greedy).await["accounting_peak_mib"], 19500);

    // The driver vanishing: the round fails and decides nothing.
    fake.vanish();
    assert!(sampler.round().await.is_err());
    assert_eq!(s.app.job(&s.member, polite).await["status"], "running");
    s.end(&[polite]).await;
}
