//! Every NVML path, through the fake `libnvidia-ml.so.1` (`tests/fixtures/fake-nvml/`): the
//! inventory, MIG cards, withheld fields, per-process memory, accounting, failures on demand, the
//! driver vanishing mid-run, and `gpuq serve --gpu-source nvml` end to end.

use crate::support::nvml::{FakeNvml, NvidiaDocker};
use crate::support::{api_as_admin, database_url, free_port, post_job, start_server, TestApp};
use gpuq::model::Role;
use gpuq::server::gpu::{self, GpuError, GpuInventory, InventoryKind, NvmlInventory, OurProcesses};
use serde_json::Value;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::{Duration, Instant};

const A: &str = "1f1f7a0e-3c5b-2d6c-9c9e-0a3b1c2d3e4f";
const B: &str = "2b7c2c1e-52f4-4c3e-8a43-1d9e7f0a2b11";
const C: &str = "3d3e9b40-7a21-4f6a-b2c8-93e1f0d4a567";
const A100: &str = "NVIDIA A100-SXM4-80GB";
const L4: &str = "NVIDIA L4";

fn two_cards() -> String {
    format!(
        "# two cards\n\
         gpu GPU-{A} \"{A100}\" total_mib=81920 used_mib=1024 util=37\n\
         gpu GPU-{B} \"{L4}\" total_mib=23034 used_mib=0 util=0\n"
    )
}

fn ours(pids: &[u32]) -> OurProcesses {
    pids.iter().copied().collect()
}

fn snapshot(inv: &NvmlInventory, our: &[u32]) -> Vec<gpu::GpuInfo> {
    inv.snapshot(&ours(our)).unwrap()
}

#[test]
fn the_inventory_reports_the_cards_as_the_driver_does() {
    let fake = FakeNvml::new(&two_cards());
    let inv = fake.inventory();
    assert_eq!(inv.kind(), InventoryKind::Nvml);
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards.len(), 2, "{cards:?}");
    let (a, b) = (&cards[0], &cards[1]);
    assert_eq!((a.uuid.to_string().as_str(), a.index), (A, 0));
    assert_eq!(
        (a.model.as_str(), a.total_mib, a.used_mib),
        (A100, 81920, Some(1024))
    );
    assert_eq!((a.utilization_pct, a.external_mib), (Some(37), Some(0)));
    assert!(!a.simulated);
    assert_eq!((b.uuid.to_string().as_str(), b.index), (B, 1));
    assert_eq!(
        (b.model.as_str(), b.total_mib, b.used_mib),
        (L4, 23034, Some(0))
    );

    // The state is read again on every call: a rewrite is seen by the same loaded library.
    fake.set(&format!(
        "gpu GPU-{B} \"{L4}\" total_mib=23034 used_mib=4000 util=90\n"
    ));
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards.len(), 1);
    assert_eq!((cards[0].uuid.to_string().as_str(), cards[0].index), (B, 0));
    assert_eq!(
        (cards[0].used_mib, cards[0].utilization_pct),
        (Some(4000), Some(90))
    );
}

#[test]
fn mig_cards_are_skipped_and_shown_as_such() {
    let fake = FakeNvml::new(&format!(
        "gpu GPU-{A} \"{A100}\" total_mib=81920 mig=1\n\
         gpu MIG-{B} \"{A100} MIG 3g.40gb\" total_mib=40192\n\
         gpu GPU-{C} \"{L4}\" total_mib=23034 mig=0 mig_pending=1\n\
         withhold 2 mig\n"
    ));
    let inv = fake.inventory();
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards.len(), 1, "only the whole card is offered: {cards:?}");
    assert_eq!(cards[0].uuid.to_string(), C);
    let skipped = inv.skipped();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(
        (skipped[0].index, skipped[0].id.as_str()),
        (0, &*format!("GPU-{A}"))
    );
    assert_eq!(skipped[0].model.as_deref(), Some(A100));
    assert!(
        skipped[0].reason.contains("MIG mode enabled"),
        "{:?}",
        skipped[0]
    );
    assert_eq!(skipped[1].id, format!("MIG-{B}"));
    assert!(skipped[1].reason.contains("MIG device"), "{:?}", skipped[1]);

    // MIG turned off: the card is offered again and no longer listed as skipped.
    fake.set(&format!("gpu GPU-{A} \"{A100}\" total_mib=81920 mig=0\n"));
    assert_eq!(snapshot(&inv, &[]).len(), 1);
    assert!(inv.skipped().is_empty());
    // A simulated inventory skips nothing.
    let sim = gpu::from_config(gpu::GpuMode::Sim, Some("1x1024:X"), "n").unwrap();
    assert!(sim.skipped().is_empty());
}

#[test]
fn withheld_fields_are_unknown_never_zero() {
    let fake = FakeNvml::new(&format!(
        "{}gpu GPU-{C} \"{L4}\" total_mib=23034 used_mib=10\n\
         withhold 0 utilization\n\
         withhold 1 process_memory\n\
         withhold 1 name\n\
         withhold 2 memory\n\
         proc 0 100 300 compute\n\
         proc 1 200 500 compute\n\
         proc 1 201 600 graphics\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let cards = snapshot(&inv, &[]);
    assert_eq!(
        cards.len(),
        2,
        "a card without its memory size is no use: {cards:?}"
    );
    assert_eq!(
        cards[0].utilization_pct, None,
        "not supported is unknown, not 0 %"
    );
    assert_eq!(cards[0].external_mib, Some(300));
    assert_eq!(cards[1].utilization_pct, Some(0), "a real 0 % stays 0 %");
    assert_eq!(
        cards[1].external_mib, None,
        "a foreign process of unknown size"
    );
    assert_eq!(cards[1].model, "unknown");
    // Withheld memory of gpuq's own processes does not matter: they are counted by reservation.
    assert_eq!(snapshot(&inv, &[200, 201])[1].external_mib, Some(0));
    let procs = inv.processes().unwrap();
    let card_b: Vec<_> = procs.iter().filter(|p| p.gpu.to_string() == B).collect();
    assert_eq!(card_b.len(), 2);
    assert!(card_b.iter().all(|p| p.used_mib.is_none()), "{card_b:?}");

    // A process list NVML refuses makes the foreign total unknown too.
    fake.set(&format!("{}withhold 0 processes\n", two_cards()));
    assert_eq!(snapshot(&inv, &[])[0].external_mib, None);
}

#[test]
fn per_process_memory_separates_foreign_processes_from_gpuqs_own() {
    let fake = FakeNvml::new(&format!(
        "{}proc 0 100 2000 compute\n\
         proc 0 200 300 compute\n\
         proc 0 200 300 graphics\n\
         proc 0 300 50 graphics\n\
         proc 1 100 700 compute\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let foreign_only = snapshot(&inv, &[100]);
    assert_eq!(
        foreign_only[0].external_mib,
        Some(350),
        "200 (in both lists, once) + 300; 100 is gpuq's"
    );
    assert_eq!(foreign_only[1].external_mib, Some(0));
    let everything_foreign = snapshot(&inv, &[]);
    assert_eq!(everything_foreign[0].external_mib, Some(2350));
    assert_eq!(everything_foreign[1].external_mib, Some(700));

    let procs = inv.processes().unwrap();
    let listed: Vec<(String, u32, Option<i64>, bool)> = procs
        .iter()
        .map(|p| (p.gpu.to_string(), p.pid, p.used_mib, p.graphics))
        .collect();
    assert_eq!(
        listed,
        vec![
            (A.into(), 100, Some(2000), false),
            (A.into(), 200, Some(300), false),
            (A.into(), 200, Some(300), true),
            (A.into(), 300, Some(50), true),
            (B.into(), 100, Some(700), false),
        ]
    );
}

#[test]
fn accounting_gives_each_pids_peak_after_it_exited() {
    let fake = FakeNvml::new(&format!(
        "{}gpu GPU-{C} \"{L4}\" total_mib=23034 accounting=0\n\
         acct 0 4242 7000\n\
         acct 0 4243 100 running\n\
         acct 0 4244 na\n\
         acct 0 5000 9999\n\
         acct 1 4242 1200 exited\n\
         acct 2 4242 3000\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let mut peaks = inv.accounting_peaks(&[4242, 4243, 4244, 6000]).unwrap();
    peaks.sort_by_key(|p| (p.gpu.to_string(), p.pid));
    let got: Vec<(String, u32, Option<i64>, bool)> = peaks
        .iter()
        .map(|p| (p.gpu.to_string(), p.pid, p.peak_mib, p.running))
        .collect();
    assert_eq!(
        got,
        vec![
            (A.into(), 4242, Some(7000), false),
            (A.into(), 4243, Some(100), true),
            (A.into(), 4244, None, false),
            (B.into(), 4242, Some(1200), false),
        ],
        "card C has accounting off: its record is not read; PID 5000 was not asked for"
    );
    // The peak stays readable when the process no longer runs on the card.
    assert!(inv.processes().unwrap().is_empty());
    fake.set(&format!(
        "{}withhold 0 accounting\nacct 1 4242 1200\n",
        two_cards()
    ));
    let peaks = inv.accounting_peaks(&[4242]).unwrap();
    assert_eq!(peaks.len(), 1, "card A's accounting is withheld: {peaks:?}");
    assert_eq!(peaks[0].gpu.to_string(), B);
}

#[test]
fn any_call_fails_on_demand() {
    let fake = FakeNvml::new(&format!(
        "{}fail nvmlDeviceGetUtilizationRates GPU_IS_LOST gpu=1\n\
         fail nvmlDeviceGetComputeRunningProcesses_v3 NVML_ERROR_NO_PERMISSION gpu=0\n",
        two_cards()
    ));
    let inv = fake.inventory();
    let cards = snapshot(&inv, &[]);
    assert_eq!(cards[0].utilization_pct, Some(37));
    assert_eq!(cards[0].external_mib, None, "its process list was refused");
    assert_eq!(cards[1].utilization_pct, None);
    assert_eq!(cards[1].external_mib, Some(0));

    fake.set(&format!(
        "{}fail nvmlDeviceGetCount_v2 UNKNOWN\n",
        two_cards()
    ));
    let e = inv.snapshot(&ours(&[])).unwrap_err();
    assert!(matches!(e, GpuError::Nvml(_)), "{e:?}");
    assert!(e.to_string().contains("cannot count devices"), "{e}");

    fake.set(&format!("{}fail nvmlInit_v2 NO_PERMISSION\n", two_cards()));
    let e = NvmlInventory::new(Some(fake.lib())).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&fake.lib().display().to_string()),
        "names the library: {msg}"
    );

    // A malformed state file is an error, not an empty machine.
    fake.set(&format!("{}gpu GPU-{C} \"{L4}\" total_mb=1\n", two_cards()));
    assert!(inv.snapshot(&ours(&[])).is_err());
    assert!(inv.processes().is_err());
}

/// Cards by uuid → (state, used_mib), as `GET /api/v1/gpus` shows them.
async fn cards_shown(app: &TestApp, bearer: &str) -> Vec<(String, String, Option<i64>)> {
    let gpus = app
        .api("GET", "/api/v1/gpus", Some(bearer), None)
        .await
        .json();
    gpus["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["uuid"].as_str().unwrap().to_owned(),
                g["state"].as_str().unwrap().to_owned(),
                g["used_mib"].as_i64(),
            )
        })
        .collect()
}

#[sqlx::test(migrations = false)]
async fn the_driver_vanishing_mid_run_leaves_gpuq_running_and_it_recovers(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    let fake = FakeNvml::new(&two_cards());
    let inv: Arc<dyn GpuInventory> = Arc::new(fake.inventory());
    let refresh = || gpu::sync::refresh(&app.pool, &inv, "fake-node");
    assert!(refresh().await.unwrap());
    let online = |used_a: i64, used_b: i64| {
        vec![
            (format!("GPU-{A}"), "online".to_owned(), Some(used_a)),
            (format!("GPU-{B}"), "online".to_owned(), Some(used_b)),
        ]
    };
    let mut shown = cards_shown(&app, &admin).await;
    shown.sort();
    assert_eq!(shown, online(1024, 0));

    // One card falls off the bus: it is shown missing, the other stays.
    fake.set(&format!("{}fail * GPU_IS_LOST gpu=0\n", two_cards()));
    refresh().await.unwrap();
    let mut shown = cards_shown(&app, &admin).await;
    shown.sort();
    assert_eq!(shown[0].1, "missing", "{shown:?}");
    assert_eq!(shown[1].1, "online", "{shown:?}");

    // The whole driver goes away: the refresh fails and says so; what was last seen is kept.
    fake.vanish();
    let e = refresh().await.unwrap_err();
    let why = format!("{e:#}");
    assert!(why.contains("NVIDIA driver is not loaded"), "{why}");
    // It comes back with new figures: the same loaded library sees them; both cards are back.
    fake.set(&two_cards().replace("used_mib=1024", "used_mib=5000"));
    assert!(refresh().await.unwrap());
    let mut shown = cards_shown(&app, &admin).await;
    shown.sort();
    assert_eq!(shown, online(5000, 0));
}

/// Polls `GET /api/v1/gpus` until `check` holds for the answer (10 s at most).
async fn wait_for_cards(
    client: &reqwest::Client,
    port: u16,
    bearer: &str,
    what: &str,
    check: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r: Value = client
            .get(format!("http://127.0.0.1:{port}/api/v1/gpus"))
            .header("authorization", bearer)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let cards = r["gpus"].as_array().cloned().unwrap_or_default();
        if check(&cards) {
            return cards;
        }
        assert!(Instant::now() < deadline, "{what}: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrations = false)]
async fn gpuq_serve_runs_on_the_fake_nvml_end_to_end(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    let fake = FakeNvml::new(&two_cards());
    let port = free_port();
    let log = fake.dir().join("server.log");
    let lib = fake.lib().display().to_string();
    let mut server = start_server(
        &url,
        port,
        &log,
        &[
            "--gpu-source",
            "nvml",
            "--nvml-lib",
            &lib,
            "--gpu-refresh-s",
            "1",
        ],
    )
    .await;
    let (client, bearer) = api_as_admin(port).await;
    let cards = wait_for_cards(&client, port, &bearer, "the fake's cards", |c| c.len() == 2).await;
    let mut seen: Vec<(String, String, i64, Option<i64>, bool)> = cards
        .iter()
        .map(|g| {
            (
                g["uuid"].as_str().unwrap().to_owned(),
                g["model"].as_str().unwrap().to_owned(),
                g["total_mib"].as_i64().unwrap(),
                g["used_mib"].as_i64(),
                g["simulated"].as_bool().unwrap(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (format!("GPU-{A}"), A100.into(), 81920, Some(1024), false),
            (format!("GPU-{B}"), L4.into(), 23034, Some(0), false),
        ]
    );

    // Rewritten while gpuq runs: the next refresh shows it.
    fake.set(&two_cards().replace("used_mib=1024", "used_mib=2048"));
    wait_for_cards(&client, port, &bearer, "new used memory", |c| {
        c.iter().any(|g| g["used_mib"] == 2048)
    })
    .await;

    // A malformed state: the fake names the file and line in gpuq's log; gpuq keeps serving.
    fake.set("gpu GPU-x \"X\" total_mib=oops\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains(":1: gpu: total_mib=oops is not key=number")
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The driver vanishes: gpuq keeps running and answering; it recovers when the driver is back.
    fake.vanish();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(server.0.try_wait().unwrap().is_none(), "gpuq exited");
    wait_for_cards(&client, port, &bearer, "still answering", |c| c.len() == 2).await;
    fake.set(&two_cards().replace("used_mib=1024", "used_mib=3000"));
    wait_for_cards(
        &client,
        port,
        &bearer,
        "back after the driver returned",
        |c| c.iter().any(|g| g["used_mib"] == 3000),
    )
    .await;
    assert!(server.0.try_wait().unwrap().is_none(), "gpuq exited");
}

#[sqlx::test(migrations = false)]
async fn a_wrong_nvml_lib_path_stops_serve_with_the_path_named(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-libnvidia-ml.so.1");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args([
            "--database-url",
            &url,
            "--gpu-source",
            "nvml",
            "--runner",
            "false",
        ])
        .arg("--nvml-lib")
        .arg(&missing)
        .env("GPUQ_BOOTSTRAP_ADMIN_PASSWORD", crate::support::PASSWORD)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(stderr.contains("--nvml-lib"), "{stderr}");
}

#[sqlx::test(migrations = false)]
async fn a_job_on_nvml_cards_starts_fenced_to_exactly_its_assigned_uuids(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    let docker = NvidiaDocker::start();
    let fake = FakeNvml::new(&format!(
        "{}gpu GPU-{C} \"{L4}\" total_mib=23034\n",
        two_cards().replace(A100, L4).replace("81920", "23034")
    ));
    let port = free_port();
    let lib = fake.lib().display().to_string();
    let socket = docker.socket().display().to_string();
    let data = fake.dir().join("data").display().to_string();
    let _server = start_server(
        &url,
        port,
        &fake.dir().join("server.log"),
        &[
            "--gpu-source",
            "nvml",
            "--nvml-lib",
            &lib,
            "--runner",
            "true",
            "--docker-socket",
            &socket,
            "--data-dir",
            &data,
        ],
    )
    .await;
    let (client, bearer) = api_as_admin(port).await;
    // No bridge in the throw-away dockerd: jobs run without a network.
    let r = client
        .put(format!(
            "http://127.0.0.1:{port}/api/v1/settings/launch-policy"
        ))
        .header("authorization", &bearer)
        .json(&serde_json::json!({ "network": "none" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let spec = serde_json::json!({
        "image": "gpuq-test/busybox:latest", "name": "fenced", "gpu_count": 2, "min_vram_mb": 20000,
        "command": ["sh", "-c", "echo visible=$NVIDIA_VISIBLE_DEVICES; sleep 3"],
    });
    let id = post_job(&client, port, &bearer, &spec).await;
    let job = wait_for_job(&client, port, &bearer, id, "running").await;
    let mut assigned: Vec<String> = job["assigned_gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["uuid"].as_str().unwrap().to_owned())
        .collect();
    assigned.sort();
    assert_eq!(assigned.len(), 2, "{job}");

    let label = format!("label=org.gpuq.job-id={id}");
    let ps = docker.cli(&["ps", "-aq", "--filter", &label]);
    let container = String::from_utf8(ps.stdout).unwrap().trim().to_owned();
    assert!(!container.is_empty(), "no container for job {id}");
    let inspect = docker.cli(&["inspect", &container]);
    let spec: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let requests = &spec[0]["HostConfig"]["DeviceRequests"];
    let requests = requests.as_array().unwrap_or_else(|| panic!("{requests}"));
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["Driver"], "nvidia");
    let mut ids: Vec<String> = requests[0]["DeviceIDs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, assigned, "exactly the assigned cards, by UUID");
    assert_eq!(
        requests[0]["Count"], 0,
        "no 'any N cards' request beside the ids"
    );
    assert_eq!(requests[0]["Capabilities"], serde_json::json!([["gpu"]]));
    assert_eq!(spec[0]["HostConfig"]["Privileged"], false);

    // The driver's hook ran for it, and the container saw exactly its cards.
    let job = wait_for_job(&client, port, &bearer, id, "succeeded").await;
    assert_eq!(job["exit_code"], 0, "{job}");
    assert!(
        docker.hook_log().contains("args: prestart"),
        "{}",
        docker.hook_log()
    );
    let log = client
        .get(format!("http://127.0.0.1:{port}/api/v1/jobs/{id}/logs"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let visible = log
        .lines()
        .find_map(|l| l.strip_prefix("visible="))
        .unwrap_or_else(|| panic!("{log}"));
    let mut visible: Vec<&str> = visible.split(',').collect();
    visible.sort();
    assert_eq!(visible, assigned, "{log}");
}

/// Polls the job over HTTP until it has `status` (60 s at most).
async fn wait_for_job(
    client: &reqwest::Client,
    port: u16,
    bearer: &str,
    id: uuid::Uuid,
    status: &str,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job: Value = client
            .get(format!("http://127.0.0.1:{port}/api/v1/jobs/{id}"))
            .header("authorization", bearer)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if job["status"] == status {
            return job;
        }
        assert!(
            !["failed", "cancelled", "succeeded"].contains(&job["status"].as_str().unwrap_or("")),
            "job ended before {status}: {job}"
        );
        assert!(Instant::now() < deadline, "job never {status}: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
