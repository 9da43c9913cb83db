//! `gpuq doctor`, the real binary: it passes on simulated cards with real Postgres and dockerd,
//! fails clearly without an NVIDIA driver, and never changes the database or starts Postgres.

use crate::support::{database_url, free_port, TestApp};
use serde_json::Value;
use sqlx::PgPool;
use std::process::{Command, Output};

const IMAGE: &str = "gpuq-test/busybox:latest";

fn doctor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .arg("doctor")
        .args(args)
        .output()
        .expect("run gpuq doctor")
}

/// `gpuq doctor --json` on simulated `cards` against the test app's database, with a fresh data
/// directory, a free port and the `extra` arguments.
fn doctor_on_sim(app: &TestApp, cards: &str, extra: &[&str]) -> Output {
    let url = database_url(&app.pool);
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = vec!["--json", "--gpu-source", "sim", "--sim-gpus", cards];
    args.extend(["--database-url", &url, "--listen", &listen]);
    args.extend(["--data-dir", dir.path().to_str().unwrap()]);
    args.extend_from_slice(extra);
    doctor(&args)
}

/// The checks of a `--json` run, by name.
fn checks(out: &Output) -> Vec<Value> {
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(doc["ok"], out.status.success(), "{doc:#}");
    doc["checks"].as_array().unwrap().clone()
}

fn check<'a>(all: &'a [Value], name: &str) -> &'a Value {
    all.iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {all:#?}"))
}

/// Asserts that check `name` has `status` and mentions `about` in its detail.
fn assert_check(all: &[Value], name: &str, status: &str, about: &str) {
    let c = check(all, name);
    assert_eq!(c["status"], status, "{c}");
    assert!(c["detail"].as_str().unwrap().contains(about), "{c}");
}

#[sqlx::test(migrations = false)]
async fn doctor_passes_on_simulated_cards(pool: PgPool) {
    let app = TestApp::new(pool).await;
    // A policy any test host holds with room to spare: one job a card and two without a GPU, of
    // 1 GiB each. The defaults let 200 jobs of 16 GiB run at once on these two cards (96 a card at
    // 256 MiB, and 8 without a GPU), which warns on any host under 3.1 TiB.
    let admin = app.bearer("root", gpuq::model::Role::Admin).await;
    app.set_policy(&admin, one_job_a_card(1024)).await;
    let out = doctor_on_sim(
        &app,
        "2x24576:NVIDIA GeForce RTX 3090",
        &["--smoke-image", IMAGE],
    );
    let all = checks(&out);
    assert!(out.status.success(), "{all:#?}");
    for name in [
        "smoke",
        "data-dir",
        "postgres",
        "migrations",
        "clock",
        "policy",
        "listen",
    ] {
        assert_eq!(check(&all, name)["status"], "pass", "{name}: {all:#?}");
    }
    assert_check(
        &all,
        "policy",
        "pass",
        "up to 4 jobs at once fit in memory (4096 of",
    );
    // Docker passes, or warns about its cgroup version; never fails here.
    assert_ne!(check(&all, "docker")["status"], "fail");
    assert!(check(&all, "docker")["data"]["version"].is_string());
    // Simulated cards: the NVIDIA runtime is not needed, so at worst a warning.
    assert_ne!(check(&all, "nvidia-runtime")["status"], "fail");
    let cards = check(&all, "gpus")["data"]["cards"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(cards.len(), 2);
    assert_check(&all, "smoke", "pass", "gpuq-sim0");
    // The Docker disk: the free space of the file system of dockerd's own root directory.
    let root = crate::support::docker::docker_cli(&["info", "-f", "{{.DockerRootDir}}"]);
    let disk = check(&all, "disk-docker")["detail"].as_str().unwrap();
    assert!(
        disk.starts_with(&format!("{root}: ")) && disk.contains("GiB free of"),
        "{disk}"
    );
    // Every warn and fail says what to do.
    for c in &all {
        if c["status"] != "pass" {
            assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "{c}");
        }
    }
}

#[sqlx::test(migrations = false)]
async fn doctor_without_a_driver_fails_naming_nvml_and_its_library(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let dir = tempfile::tempdir().unwrap();
    let out = doctor(&[
        "--gpu-source",
        "nvml",
        "--database-url",
        &database_url(&app.pool),
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
    ]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let gpus = text
        .lines()
        .find(|l| l.starts_with("fail  gpus"))
        .unwrap_or_else(|| panic!("no failed gpus line: {text}"));
    assert!(
        gpus.contains("NVML") && gpus.contains("libnvidia-ml.so.1"),
        "{gpus}"
    );
    let fix = text
        .lines()
        .skip_while(|l| !l.starts_with("fail  gpus"))
        .nth(1)
        .unwrap();
    assert!(
        fix.trim_start()
            .starts_with("fix: install the NVIDIA driver"),
        "{fix}"
    );
    // Every line is a check, its fix, or the summary.
    for line in text.lines() {
        let ok = ["pass  ", "warn  ", "fail  "]
            .iter()
            .any(|p| line.starts_with(p))
            || line.trim_start().starts_with("fix: ")
            || line.ends_with(" failed");
        assert!(ok, "unexpected line: {line}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gpus"), "{err}");
}

#[sqlx::test(migrations = false)]
async fn doctor_changes_nothing_it_checks(pool: PgPool) {
    // An empty database: the doctor reports pending migrations and leaves it empty.
    let url = database_url(&pool);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("never-created");
    let common = [
        "--json",
        "--gpu-source",
        "sim",
        "--sim-gpus",
        "1x24576:NVIDIA GeForce RTX 3090",
        "--runner",
        "false",
    ];
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = common.to_vec();
    args.extend(["--database-url", &url, "--listen", &listen]);
    args.extend(["--data-dir", data.to_str().unwrap()]);
    let all = checks(&doctor(&args));
    assert_check(&all, "migrations", "warn", "empty database");
    assert_check(&all, "policy", "warn", "reading the launch policy");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(tables, 0, "the doctor created tables");
    assert!(!data.exists(), "the doctor created the data directory");

    // The embedded cluster: not created, not started.
    let mut args = common.to_vec();
    args.extend(["--listen", &listen, "--data-dir", data.to_str().unwrap()]);
    let all = checks(&doctor(&args));
    assert_check(&all, "postgres", "warn", "not created yet");
    assert!(
        !data.join("pg").exists(),
        "the doctor made an embedded cluster"
    );
}

/// A launch policy that lets one job run on each 24 GiB card and two without a GPU, each with a
/// memory limit of `memory_limit_mib` (a quarter of it for `/dev/shm`, a quarter for `/tmp`).
fn one_job_a_card(memory_limit_mib: u64) -> serde_json::Value {
    serde_json::json!({
        "memory_limit_mib": memory_limit_mib,
        "shm_mib": memory_limit_mib / 4,
        "tmp_mib": memory_limit_mib / 4,
        "min_vram_mib": 24576,
        "max_cpu_jobs_per_node": 2,
    })
}

/// The doctor counts the jobs that can run at once by the least a job may commit on a card, and a
/// workload type the manifest gives less than the policy's floor lowers that least: an admin who
/// adds one sees the jobs that could then share the cards outgrow the host's memory.
#[sqlx::test(migrations = false)]
async fn doctor_warns_when_the_jobs_that_can_run_at_once_outgrow_the_hosts_memory(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", gpuq::model::Role::Admin).await;
    // 2 cards + 2 without a GPU = 4 jobs of a hundredth of the host each: they fit.
    let each = host_memory_mib() / 100;
    app.set_policy(&admin, one_job_a_card(each)).await;
    let cards = "2x24576:NVIDIA GeForce RTX 3090";
    let all = checks(&doctor_on_sim(&app, cards, &[]));
    assert_check(&all, "policy", "pass", "up to 4 jobs at once fit in memory");
    // A 256 MiB workload type: 96 jobs a card, 194 in all, nearly twice the host.
    app.workload(
        &admin,
        "tiny",
        serde_json::json!({ "NVIDIA GeForce RTX 3090": 256 }),
    )
    .await;
    let all = checks(&doctor_on_sim(&app, cards, &[]));
    assert_check(
        &all,
        "policy",
        "warn",
        "up to 194 jobs can run here at once (192 on 2 cards",
    );
    let c = check(&all, "policy");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!(
            "memory_limit_mib {each}: {} MiB in all",
            194 * each
        )),
        "{c}"
    );
    assert!(c["fix"].as_str().unwrap().contains("min_vram_mib"), "{c}");
}

/// This host's memory, MiB, as `/proc/meminfo` tells it.
fn host_memory_mib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024
}

/// A policy under which a job can fill the disk dockerd and every job share, or take the host's
/// memory, is a warn naming how: a writable root, a writable volume tree on the file system of
/// Docker's root, a memory limit as large as the host's memory.
#[sqlx::test(migrations = false)]
async fn doctor_warns_of_a_policy_that_lets_a_job_fill_dockers_disk_or_take_the_hosts_memory(
    pool: PgPool,
) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", gpuq::model::Role::Admin).await;
    let docker_root = crate::support::docker::docker_cli(&["info", "-f", "{{.DockerRootDir}}"]);
    let beside = std::path::Path::new(docker_root.trim()).parent().unwrap();
    let tree = tempfile::tempdir_in(beside).unwrap();
    let tree = tree.path().to_str().unwrap();
    app.set_policy(
        &admin,
        serde_json::json!({
            "read_only_rootfs": false,
            "memory_limit_mib": host_memory_mib(),
            "volume_allowlist": [{ "path": tree }, { "path": "/srv/datasets", "read_only": true }],
        }),
    )
    .await;
    let all = checks(&doctor_on_sim(&app, "1x24576:NVIDIA GeForce RTX 3090", &[]));
    assert_check(&all, "policy", "warn", "read_only_rootfs is off");
    let c = check(&all, "policy");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("volume tree {tree} is on")), "{c}");
    assert!(
        detail.contains(&format!(
            "memory_limit_mib {} leaves less than",
            host_memory_mib()
        )),
        "{c}"
    );
    assert!(
        !detail.contains("/srv/datasets"),
        "a read-only tree is no risk: {c}"
    );
    assert!(
        c["fix"].as_str().unwrap().contains("read_only_rootfs"),
        "{c}"
    );
}

/// Docker's `live-restore`: a warn naming the setting where it is off (a restart of dockerd would
/// kill every job), a pass where it is on (a throw-away dockerd with it set).
#[sqlx::test(migrations = false)]
async fn doctor_warns_when_a_dockerd_restart_would_kill_every_job(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let cards = "1x24576:NVIDIA GeForce RTX 3090";
    let machine = crate::support::docker::docker_cli(&["info", "-f", "{{.LiveRestoreEnabled}}"]);
    let all = checks(&doctor_on_sim(&app, cards, &[]));
    let c = check(&all, "live-restore");
    if machine == "true" {
        assert_eq!(c["status"], "pass", "{c}");
    } else {
        assert_check(&all, "live-restore", "warn", "kills every running job");
        assert!(
            c["fix"]
                .as_str()
                .unwrap()
                .contains("\"live-restore\": true"),
            "{c}"
        );
    }
    let dockerd = crate::support::nvml::NvidiaDocker::start_with(r#"{ "live-restore": true }"#);
    let socket = dockerd.socket().display().to_string();
    let all = checks(&doctor_on_sim(&app, cards, &["--docker-socket", &socket]));
    assert_check(&all, "live-restore", "pass", "outlive a restart");
}

/// The key registry passwords are sealed under: none yet passes (it is made when first needed), a
/// key file only its owner reads passes, one its group or others may read fails saying `chmod 600`.
#[sqlx::test(migrations = false)]
async fn doctor_checks_the_secrets_key_file(pool: PgPool) {
    use std::os::unix::fs::PermissionsExt;
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let listen = format!("127.0.0.1:{}", free_port());
        checks(&doctor(&[
            "--json",
            "--gpu-source",
            "sim",
            "--sim-gpus",
            "1x24576:NVIDIA GeForce RTX 3090",
            "--database-url",
            &url,
            "--listen",
            &listen,
            "--data-dir",
            dir.path().to_str().unwrap(),
        ]))
    };
    assert_check(&run(), "secrets-key", "pass", "no secrets key yet");
    let key = dir.path().join("secrets.key");
    std::fs::write(&key, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_check(&run(), "secrets-key", "pass", "readable by its owner only");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let all = run();
    assert_check(
        &all,
        "secrets-key",
        "fail",
        "may be read by its group or others",
    );
    assert!(
        check(&all, "secrets-key")["fix"]
            .as_str()
            .unwrap()
            .contains("chmod 600"),
        "{all:#?}"
    );
}
