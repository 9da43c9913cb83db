//! Idle reclaim (issue 29), end to end: real Postgres, real dockerd, jobs in fenced containers
//! whose host PIDs the fake NVML lists with process utilisation samples (`putil` lines), mapped to
//! their jobs by `/proc/<pid>/cgroup`. The engine's rounds are paced by the test (one every
//! [`SAMPLE`]), as the card observer's snapshots pace them in `gpuq serve`; the runner stops what
//! the engine decides.

use crate::support::isolation::{event_kinds, host_pid_of, wait_container_removed};
use crate::support::nvml::{sim_source, spawn_observer, FakeNvml};
use crate::support::{wait_status, FencedCard, PASSWORD};
use gpuq::model::{gpu_id, Role};
use gpuq::server::gpu::GpuInventory;
use gpuq::server::idle::{Engine, Round};
use gpuq::server::metrics::snapshot;
use serde_json::{json, Value};
use sqlx::PgPool;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use uuid::Uuid;

const IMAGE: &str = "gpuq-test/busybox:latest";
const CARD: &str = "1x24576:NVIDIA GeForce RTX 3090";
/// The engine's period in these tests: "one sample".
const SAMPLE: Duration = Duration::from_millis(250);

struct Setup {
    base: FencedCard,
    name: String,
    /// Every job the test started, for [`Setup::end`].
    jobs: std::sync::Mutex<Vec<Uuid>>,
}

impl std::ops::Deref for Setup {
    type Target = FencedCard;

    fn deref(&self) -> &FencedCard {
        &self.base
    }
}

async fn setup(pool: PgPool, node: &str) -> Setup {
    Setup {
        base: FencedCard::start(pool, CARD, node).await,
        name: node.into(),
        jobs: Default::default(),
    }
}

impl Setup {
    /// A job of the member holding 2000 MiB that runs until stopped, running.
    async fn sleeper(&self, extra: Value) -> Uuid {
        let mut spec = json!({ "image": IMAGE, "command": ["sleep", "300"] });
        if extra.get("workload").is_none() {
            spec["min_vram_mb"] = json!(2000);
        }
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            spec[k] = v;
        }
        let id = self.app.submit_ok(&self.member, spec).await;
        self.jobs.lock().unwrap().push(id);
        wait_status(&self.app, &self.member, id, &["running"], 60).await;
        id
    }

    /// The fake NVML's state: the card, a compute process per `(pid, sm %)` (a `putil` line each)
    /// and the `extra` lines.
    fn state(&self, procs: &[(u32, u32)], extra: &str) -> String {
        let mut s = format!(
            "gpu {} \"NVIDIA GeForce RTX 3090\" total_mib=24576 used_mib=8000\n",
            gpu_id(&self.card)
        );
        for (pid, sm) in procs {
            s.push_str(&format!("proc 0 {pid} 1000 compute\nputil 0 {pid} {sm}\n"));
        }
        s.push_str(extra);
        s
    }

    async fn engine(&self, fake: &FakeNvml) -> Engine {
        let cards = fake.observe(&self.app.pool, &self.name).await;
        Engine::new(self.app.pool.clone(), cards, self.name.clone())
    }

    /// Cancels the member's jobs still running, waits until the runner removed every job's
    /// container (those the engine stopped too), and stops the node.
    async fn end(self, running: &[Uuid]) {
        self.cancel(running).await;
        let jobs = self.jobs.lock().unwrap().clone();
        for id in jobs {
            let ended = ["succeeded", "failed", "cancelled", "timed_out"];
            wait_status(&self.app, &self.member, id, &ended, 60).await;
            wait_container_removed(&self.app, id).await;
        }
        self.base.node.stop().await;
    }
}

async fn pid_of(s: &Setup, job: Uuid) -> u32 {
    host_pid_of(&s.app, job).await
}

/// When each job was flagged and stopped, from the engine's first round.
#[derive(Default, Debug)]
struct Seen {
    flagged: HashMap<Uuid, Duration>,
    cleared: HashMap<Uuid, Duration>,
    stopped: HashMap<Uuid, Duration>,
}

impl Seen {
    fn take(&mut self, at: Duration, r: &Round) {
        for j in &r.flagged {
            self.flagged.entry(*j).or_insert(at);
        }
        for j in &r.cleared {
            self.cleared.entry(*j).or_insert(at);
        }
        for j in &r.stopped {
            self.stopped.entry(*j).or_insert(at);
        }
    }
}

/// Rounds every [`SAMPLE`] for `total`, `state(elapsed)` written to the fake before each.
async fn drive(
    engine: &mut Engine,
    fake: &FakeNvml,
    total: Duration,
    state: impl Fn(Duration) -> String,
) -> Seen {
    let mut seen = Seen::default();
    let t0 = Instant::now();
    // The engine judges on the test's clock: each round at exactly the elapsed time it is
    // recorded at.
    let t0_utc = chrono::Utc::now();
    let mut tick = tokio::time::interval(SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while t0.elapsed() < total {
        tick.tick().await;
        let at = t0.elapsed();
        fake.set(&state(at));
        let now = t0_utc + chrono::TimeDelta::from_std(at).expect("a short run");
        let r = engine.round_at(Some(now)).await.expect("an idle round");
        seen.take(at, &r);
    }
    seen
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

#[sqlx::test(migrations = false)]
async fn idle_jobs_are_flagged_then_stopped_on_time_and_a_bursty_one_never(pool: PgPool) {
    let s = setup(pool, "idl1").await;
    // Window 6 s, grace 3 s.
    s.app
        .set_policy(
            &s.admin,
            json!({ "idle_action": "stop", "idle_after_min": 0.1, "idle_sm_percent": 5,
                    "idle_grace_min": 0.05 }),
        )
        .await;
    let quiet_low = s.sleeper(json!({})).await; // samples at 2 %: below the threshold
    let quiet_none = s.sleeper(json!({})).await; // a process with no samples (0 %)
    let quiet_four = s.sleeper(json!({})).await; // samples at 4 %
    let bursty = s.sleeper(json!({})).await;
    let no_process = s.sleeper(json!({})).await; // nothing of it on the card
    let pids = [
        pid_of(&s, quiet_low).await,
        pid_of(&s, quiet_none).await,
        pid_of(&s, quiet_four).await,
        pid_of(&s, bursty).await,
    ];
    let fake = FakeNvml::new(&s.state(&[], ""));
    let mut engine = s.engine(&fake).await;
    // Bursty: busy, then 4 s of quiet data loading (under the 6 s window), busy, and so on.
    let state = |at: Duration| {
        let bursty_sm = if at.as_millis() % 6000 < 4000 && at.as_millis() >= 2000 {
            0
        } else {
            90
        };
        s.state(
            &[
                (pids[0], 2),
                (pids[1], 0),
                (pids[2], 4),
                (pids[3], bursty_sm),
            ],
            "",
        )
    };
    let seen = drive(&mut engine, &fake, Duration::from_secs(16), state).await;
    let window = Duration::from_secs(6);
    let grace = Duration::from_secs(3);
    let slack = SAMPLE + Duration::from_millis(150);
    let idle = [quiet_low, quiet_none, quiet_four, no_process];
    for job in idle {
        let flagged = *seen.flagged.get(&job).expect("flagged");
        let stopped = *seen.stopped.get(&job).expect("stopped");
        println!(
            "idle reclaim: job flagged {} ms after the window, stopped {} ms after the grace",
            ms(flagged) - ms(window),
            ms(stopped) - ms(flagged) - ms(grace)
        );
        assert!(
            flagged >= window && flagged <= window + slack,
            "flagged at {flagged:?}, window {window:?}"
        );
        assert!(
            stopped >= flagged + grace && stopped <= flagged + grace + slack,
            "stopped at {stopped:?}, flagged at {flagged:?}"
        );
    }
    assert!(
        !seen.flagged.contains_key(&bursty) && !seen.stopped.contains_key(&bursty),
        "a bursty job is never flagged: {seen:?}"
    );
    assert!(seen.cleared.is_empty(), "{seen:?}");

    for job in idle {
        let v = wait_status(&s.app, &s.member, job, &["failed", "cancelled"], 30).await;
        assert_eq!(v["status"], "failed", "{v}");
        assert_eq!(v["stop_cause"], "idle", "{v}");
        let reason = v["status_reason"].as_str().unwrap();
        assert!(reason.starts_with("idle: "), "{reason}");
        let kinds = event_kinds(&s.app, job).await;
        assert!(
            kinds.contains(&"idle_flagged".to_string()) && kinds.contains(&"idle".to_string()),
            "{kinds:?}"
        );
    }
    let v = s.app.job(&s.member, no_process).await;
    assert!(
        v["status_reason"]
            .as_str()
            .unwrap()
            .starts_with("idle: no process on its cards"),
        "{v}"
    );
    let v = s.app.job(&s.member, quiet_low).await;
    assert!(
        v["status_reason"]
            .as_str()
            .unwrap()
            .starts_with("idle: no process above 5 % SM"),
        "{v}"
    );
    assert_eq!(s.app.job(&s.member, bursty).await["status"], "running");

    // The figures: /metrics and the usage report's GPU-hours reclaimed (each stopped job held
    // 2000 of 24576 MiB and had most of its 3600 s default timeout left... whatever its timeout,
    // a positive figure for alice and four jobs).
    let figures = snapshot::read(&s.app.pool, "idl1").await.unwrap();
    assert_eq!((figures.idle_flags, figures.idle_stops), (4, 4));
    let manager = s.app.bearer("mia", Role::Manager).await;
    let r = s.app.get("/api/v1/usage?from=-1h", &manager).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reclaimed = &r.json()["reclaimed_by_user"];
    assert_eq!(reclaimed[0]["key"], "alice", "{reclaimed}");
    assert_eq!(reclaimed[0]["jobs"], 4, "{reclaimed}");
    assert!(
        reclaimed[0]["gpu_hours"].as_f64().unwrap() > 0.0,
        "{reclaimed}"
    );
    s.end(&[bursty]).await;
}

#[sqlx::test(migrations = false)]
async fn warn_flags_and_tells_the_owner_but_never_stops_and_exempt_jobs_are_never_judged(
    pool: PgPool,
) {
    let s = setup(pool, "idl2").await;
    s.app
        .workload(
            &s.admin,
            "loader",
            json!({ "NVIDIA GeForce RTX 3090": 2000 }),
        )
        .await;
    s.app
        .set_policy(
            &s.admin,
            json!({ "idle_action": "warn", "idle_after_min": 0.05, "idle_grace_min": 0.0,
                    "idle_exempt_workloads": ["loader"] }),
        )
        .await;
    let r = s
        .app
        .api(
            "PUT",
            "/api/v1/me/notifications",
            Some(&s.member),
            Some(json!({ "email": "alice@example.org", "on": ["idle"] })),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let quiet = s.sleeper(json!({})).await;
    let exempt = s.sleeper(json!({ "workload": "loader" })).await;
    let pids = [pid_of(&s, quiet).await, pid_of(&s, exempt).await];
    let fake = FakeNvml::new(&s.state(&[(pids[0], 1), (pids[1], 0)], ""));
    let mut engine = s.engine(&fake).await;
    let state = |_| s.state(&[(pids[0], 1), (pids[1], 0)], "");
    let seen = drive(&mut engine, &fake, Duration::from_secs(8), state).await;
    assert!(seen.flagged.contains_key(&quiet), "{seen:?}");
    assert!(seen.stopped.is_empty(), "warn never stops: {seen:?}");
    assert!(!seen.flagged.contains_key(&exempt), "exempt: {seen:?}");
    assert_eq!(s.app.job(&s.member, quiet).await["status"], "running");

    // The owner is told (an `idle` notification in the outbox), once per spell.
    let told: i64 = s
        .app
        .scalar_of(
            "SELECT count(*) FROM notification_outbox WHERE job_id = $1 AND event = 'idle'",
            quiet,
        )
        .await;
    assert_eq!(told, 1);

    // The job page shows the flag to its owner, with no stop time under warn.
    let cookie = s.app.login("alice", PASSWORD).await;
    let page = s
        .app
        .server_fn("job_detail", &format!("id={quiet}"), Some(&cookie), &[])
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    let page: Value = page.json();
    assert_eq!(page["idle"]["no_process"], false, "{page}");
    assert_eq!(page["idle"]["stop_at"], Value::Null, "{page}");

    // Another member reads neither the flag nor the trail.
    let bob_bearer = s.app.bearer("bob", Role::Member).await;
    let bob = s.app.login("bob", PASSWORD).await;
    let page = s
        .app
        .server_fn("job_detail", &format!("id={quiet}"), Some(&bob), &[])
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    let page: Value = page.json();
    assert_eq!(page["idle"], Value::Null, "{page}");
    assert_eq!(page["events"], json!([]), "{page}");
    let trail = s
        .app
        .get(&format!("/api/v1/jobs/{quiet}/events"), &bob_bearer)
        .await;
    assert_eq!(trail.status, 403, "{}", trail.text);

    // Busy again: the flag is cleared, and the page no longer shows it.
    let busy = |_| s.state(&[(pids[0], 70), (pids[1], 0)], "");
    let seen = drive(&mut engine, &fake, Duration::from_secs(1), busy).await;
    assert!(seen.cleared.contains_key(&quiet), "{seen:?}");
    let page: Value = s
        .app
        .server_fn("job_detail", &format!("id={quiet}"), Some(&cookie), &[])
        .await
        .json();
    assert_eq!(page["idle"], Value::Null, "{page}");
    s.end(&[quiet, exempt]).await;
}

#[sqlx::test(migrations = false)]
async fn unreadable_samples_and_simulated_cards_are_never_judged(pool: PgPool) {
    let s = setup(pool, "idl3").await;
    s.app
        .set_policy(
            &s.admin,
            json!({ "idle_action": "stop", "idle_after_min": 0.02, "idle_grace_min": 0.0 }),
        )
        .await;
    let job = s.sleeper(json!({})).await;
    let pid = pid_of(&s, job).await;
    // The driver does not support process utilisation: unknown, never idle.
    let withheld = s.state(&[(pid, 0)], "withhold 0 process_utilization\n");
    let fake = FakeNvml::new(&withheld);
    let mut engine = s.engine(&fake).await;
    let seen = drive(&mut engine, &fake, Duration::from_secs(4), |_| {
        withheld.clone()
    })
    .await;
    assert!(
        seen.flagged.is_empty() && seen.stopped.is_empty(),
        "{seen:?}"
    );
    assert!(engine.tracked(job).is_some(), "read, and known");

    // Simulated cards: their processes are not seen, so the engine judges nothing.
    let cards = spawn_observer(sim_source(&s.app.pool, CARD, "idl3")).await;
    let mut sim = Engine::new(s.app.pool.clone(), cards, "idl3".into());
    for _ in 0..3 {
        let r = sim.round().await.unwrap();
        assert_eq!(r, Round::default());
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert_eq!(sim.tracked(job), None);
    assert!(!event_kinds(&s.app, job)
        .await
        .contains(&"idle_flagged".to_string()));
    s.end(&[job]).await;
}

#[test]
fn the_fake_nvml_gives_samples_of_busy_processes_only_and_as_nvml_does() {
    let fake = FakeNvml::new(
        "gpu GPU-6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f \"X\" total_mib=1000\n\
         proc 0 10 1 compute\nproc 0 11 1 compute\nputil 0 10 40 3\nputil 0 11 0\n",
    );
    let inv = fake.inventory();
    let reading = inv.read().unwrap();
    let samples = reading.cards[0].sm_samples.clone().expect("read");
    assert_eq!(samples.len(), 1, "{samples:?}");
    assert_eq!((samples[0].pid, samples[0].sm_percent), (10, 40));
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(samples[0].at_us <= now_us && samples[0].at_us + 5_000_000 > now_us);
    // No busy process: NVML_ERROR_NOT_FOUND, read as none (known), not as unknown.
    fake.set(
        "gpu GPU-6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f \"X\" total_mib=1000\n\
         proc 0 10 1 compute\nputil 0 10 0\n",
    );
    assert_eq!(inv.read().unwrap().cards[0].sm_samples, Some(Vec::new()));
    fake.set(
        "gpu GPU-6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f \"X\" total_mib=1000\n\
         putil 0 10 50\nwithhold 0 process_utilization\n",
    );
    assert_eq!(inv.read().unwrap().cards[0].sm_samples, None);
    fake.set(
        "gpu GPU-6f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f \"X\" total_mib=1000\n\
         putil 0 10 50\nfail nvmlDeviceGetProcessUtilization GPU_IS_LOST\n",
    );
    assert_eq!(inv.read().unwrap().cards[0].sm_samples, None);
}

#[sqlx::test(migrations = false)]
async fn a_session_is_never_judged_idle_and_its_busy_processes_count_as_its_traffic(pool: PgPool) {
    let s = setup(pool, "idl4").await;
    // Window 1.2 s, grace 0.6 s: a batch job with nothing on its card is stopped within seconds.
    s.app
        .set_policy(
            &s.admin,
            json!({ "idle_action": "stop", "idle_after_min": 0.02, "idle_sm_percent": 5,
                    "idle_grace_min": 0.01 }),
        )
        .await;
    let session = s.sleeper(json!({ "port": 8888 })).await;
    let batch = s.sleeper(json!({})).await;
    let pid = pid_of(&s, session).await;
    let active_at = |pool: PgPool| async move {
        sqlx::query_scalar::<_, Option<chrono::DateTime<chrono::Utc>>>(
            "SELECT session_active_at FROM jobs WHERE id = $1",
        )
        .bind(session)
        .fetch_one(&pool)
        .await
        .unwrap()
        .expect("a running session has an activity time")
    };
    let fake = FakeNvml::new(&s.state(&[], ""));
    let mut engine = s.engine(&fake).await;
    // Nothing of either on the card: the batch job is flagged and stopped, the session never.
    let seen = drive(&mut engine, &fake, Duration::from_secs(3), |_| {
        s.state(&[], "")
    })
    .await;
    assert!(seen.stopped.contains_key(&batch), "{seen:?}");
    assert!(
        !seen.flagged.contains_key(&session) && !seen.stopped.contains_key(&session),
        "{seen:?}"
    );
    let quiet = active_at(s.app.pool.clone()).await;
    // Its process busy: the sample's time is written as the session's activity, once per sample.
    let mut written = 0;
    let t0 = chrono::Utc::now();
    for _ in 0..4 {
        fake.set(&s.state(&[(pid, 60)], ""));
        let r = engine.round().await.unwrap();
        written += r.session_active.iter().filter(|j| **j == session).count();
        assert!(r.flagged.is_empty() && r.stopped.is_empty(), "{r:?}");
        tokio::time::sleep(SAMPLE).await;
    }
    assert!(written >= 1, "no activity written");
    let busy = active_at(s.app.pool.clone()).await;
    assert!(
        busy > quiet && busy >= t0 - chrono::TimeDelta::seconds(1),
        "{quiet} {busy}"
    );
    // Below the threshold it is not activity.
    fake.set(&s.state(&[(pid, 2)], ""));
    let r = engine.round().await.unwrap();
    assert!(r.session_active.is_empty(), "{r:?}");
    let v = s.app.job(&s.member, session).await;
    assert_eq!(v["status"], "running", "{v}");
    wait_status(&s.app, &s.member, batch, &["failed"], 60).await;
    s.end(&[session]).await;
}
