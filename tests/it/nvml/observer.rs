//! The card observer of a node with a runner, on the fake NVML: one reader whose snapshots feed
//! the inventory, the usage samples and VRAM policing, with each process put to its job by one
//! function.

use crate::support::isolation::container_of;
use crate::support::nvml::FakeNvml;
use crate::support::{wait_status, Node, TestApp};
use gpuq::model::gpu_id;
use gpuq::server::card_tasks::CardTasks;
use gpuq::server::gpu::observer::JobOwners;
use gpuq::server::runtime::LaunchMode;
use gpuq::server::usage::Sampling;
use gpuq::server::vram::VramConfig;
use serde_json::json;
use sqlx::PgPool;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

const NODE: &str = "obs1";
const RTX: &str = "NVIDIA GeForce RTX 3090";

/// Polls `probe` until it gives `Some` (30 s at most).
async fn until<T, F: Future<Output = Option<T>>>(what: &str, mut probe: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The fake's state: the node's one card, the job's process `job_pid` using `job` MiB (in both
/// lists, as NVML may list it), and a foreign process (this test) using `foreign` MiB.
fn state(card: Uuid, job_pid: u32, job: i64, foreign: i64, extra: &str) -> String {
    let me = std::process::id();
    format!(
        "gpu {} \"{RTX}\" total_mib=24576 used_mib={} util=42\n\
         proc 0 {job_pid} {job} compute\nproc 0 {job_pid} {job} graphics\n\
         proc 0 {me} {foreign} compute\n{extra}",
        gpu_id(&card),
        job + foreign
    )
}

#[sqlx::test(migrations = false)]
async fn one_observer_feeds_the_inventory_the_usage_samples_and_vram_policing(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 1).await;
    let card = app.sim_cards(&format!("1x24576:{RTX}"), NODE).await[0];
    let (_, member) = app.admin_and_member("alice").await;
    let mut node = Node::start(&app, NODE, LaunchMode::Fenced).await;
    let spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "300"], "min_vram_mb": 4000 });
    let job = app.submit_ok(&member, spec).await;
    wait_status(&app, &member, job, &["running"], 60).await;
    let container = container_of(&app, job).await.expect("a container");
    let pid: u32 =
        crate::support::docker::docker_cli(&["inspect", "-f", "{{.State.Pid}}", &container])
            .parse()
            .unwrap();

    // The driver sees the job's process (3000 MiB) and a foreign one (700 MiB) on the card.
    let fake = FakeNvml::new(&state(card, pid, 3000, 700, ""));
    let inventory = Arc::new(fake.inventory());
    fake.count_calls();
    let cards = node
        .watch_cards(
            &app,
            CardTasks {
                node: NODE.into(),
                inventory,
                refresh_every: Duration::from_millis(200),
                sampling: Sampling {
                    every: Duration::from_millis(200),
                    retention: Duration::from_secs(48 * 3600),
                },
                vram: Some(VramConfig {
                    node: NODE.into(),
                    every: Duration::from_millis(100),
                    overuse_samples: 3,
                    reserve_mib: 512,
                }),
                proc_root: "/proc".into(),
            },
        )
        .await;

    // The snapshot puts each process to its job by the one function: the job's process is the
    // job's, this test's own is foreign.
    let snapshot = cards.latest();
    let owner = |p: u32| {
        snapshot
            .processes
            .iter()
            .find(|s| s.pid == p)
            .map(|s| s.job)
    };
    assert_eq!(owner(pid), Some(Some(job)), "{snapshot:?}");
    assert_eq!(owner(std::process::id()), Some(None), "{snapshot:?}");
    let owners = JobOwners::load(&app.pool, NODE, "/proc".into())
        .await
        .unwrap();
    assert_eq!(owners.job_of(pid), Some(job));
    assert_eq!(owners.job_of(std::process::id()), None);

    // 1. The inventory: the card as NVML sees it; only the foreign process's memory is external
    //    (the job's is counted by its reservation).
    let row: (Option<i64>, i64, bool) =
        until("the inventory written from the snapshot", || async {
            let row: (Option<i64>, i64, bool) = sqlx::query_as(
                "SELECT used_mib, external_mib, simulated FROM gpus WHERE uuid = $1",
            )
            .bind(card)
            .fetch_one(&app.pool)
            .await
            .unwrap();
            (!row.2).then_some(row)
        })
        .await;
    assert_eq!(row, (Some(3700), 700, false));
    // 2. The usage samples: the same figures, and the busy percentage.
    let samples: i64 = until("usage samples from the snapshots", || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM gpu_samples WHERE gpu_uuid = $1 \
             AND (used_mib, external_mib, utilization_pct) = (3700, 700, 42)",
        )
        .bind(card)
        .fetch_one(&app.pool)
        .await
        .unwrap();
        (n >= 2).then_some(n)
    })
    .await;
    assert!(samples >= 2);
    // 3. VRAM: the job's reading is its process's memory, counted once.
    let job_card = || async { app.job(&member, job).await["assigned_gpus"][0].clone() };
    until("the job's VRAM reading", || async {
        (job_card().await["used_mib"] == 3000).then_some(())
    })
    .await;

    // The job grows to 20000 MiB of its 4000 while foreign memory takes the card to 276 MiB
    // free: policing stops it, and the inventory follows the same snapshots. The driver's
    // accounting keeps its process's peak.
    let peak = format!("acct 0 {pid} 21000 running\n");
    fake.set(&state(card, pid, 20000, 4300, &peak));
    let v = wait_status(
        &app,
        &member,
        job,
        &["failed", "cancelled", "succeeded"],
        30,
    )
    .await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(reason.contains("used 20000 MiB"), "{reason}");
    until("the new foreign memory in the inventory", || async {
        let external: i64 = sqlx::query_scalar("SELECT external_mib FROM gpus WHERE uuid = $1")
            .bind(card)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        (external == 24300 || external == 4300).then_some(())
    })
    .await;
    // Once it has ended, NVML accounting's peak of its process, asked of the observer too.
    until("the accounting peak", || async {
        (job_card().await["accounting_peak_mib"] == 21000).then_some(())
    })
    .await;

    // Every enumeration of the cards was the observer's: one per reading it published, and one
    // per accounting question. Nothing else read NVML while three consumers ran on its snapshots.
    node.stop_cards().await;
    let readings = cards.latest().seq;
    let calls = fake.calls();
    let accounting = calls
        .get("nvmlDeviceGetAccountingMode")
        .copied()
        .unwrap_or(0);
    assert!(accounting >= 1, "{calls:?}");
    assert_eq!(
        calls["nvmlDeviceGetCount_v2"],
        readings + accounting,
        "{calls:?}"
    );
    // A reading is one pass: each card's memory is read once per reading.
    assert_eq!(calls["nvmlDeviceGetMemoryInfo_v2"], readings, "{calls:?}");
    node.stop().await;
}
