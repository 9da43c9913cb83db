//! Integration tests against the real dockerd. Nothing is skipped: if dockerd
//! is unreachable, every test fails.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::docker::{
    all_logs, docker, docker_cli, request, request_alone, run, Cleanup, IMAGE,
};
use futures_util::future::join_all;
use futures_util::StreamExt;
use gpuq::server::runtime::{
    ensure_sim_devices, verify, Docker, GrantedGpu, LaunchMode, LogStream, RuntimeError,
};

fn sim_gpu(n: usize, path: PathBuf) -> GrantedGpu {
    GrantedGpu {
        uuid: format!("GPU-0000000{n}-5140-4000-8000-000000000000"),
        sim_device: Some(path),
    }
}

fn stdout_lines(lines: &[gpuq::server::runtime::LogLine]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.stream == LogStream::Stdout)
        .map(|l| l.text.clone())
        .collect()
}

#[tokio::test]
async fn echo_lines_exit_codes_and_timestamped_logs() {
    let d = docker().await;
    d.ping().await.unwrap();
    let c = Cleanup::default();
    let ok = request(
        &["sh", "-c", "echo one; echo two >&2; echo three; echo"],
        vec![],
    );
    let (id, code) = run(&d, &c, &ok, LaunchMode::Fenced).await;
    assert_eq!(code, 0);
    let lines = all_logs(&d, &id).await;
    // Order is guaranteed within a stream; stdout and stderr may interleave.
    assert_eq!(stdout_lines(&lines), ["one", "three", ""]);
    let stderr: Vec<_> = lines
        .iter()
        .filter(|l| l.stream == LogStream::Stderr)
        .collect();
    assert_eq!(stderr.len(), 1);
    assert_eq!(stderr[0].text, "two");
    for l in &lines {
        // Fixed-width RFC3339Nano: 2006-01-02T15:04:05.000000000Z
        assert_eq!(l.at.len(), 30, "{:?}", l.at);
        assert!(l.at.ends_with('Z') && l.at.as_bytes()[10] == b'T');
    }
    let out: Vec<_> = lines
        .iter()
        .filter(|l| l.stream == LogStream::Stdout)
        .collect();
    assert!(out.windows(2).all(|w| w[0].at <= w[1].at));
    // A since in the future yields nothing: the filter reaches dockerd.
    let later: Vec<_> = d.logs(&id, Some(i32::MAX as i64), false).collect().await;
    assert!(later.is_empty(), "{later:?}");
    assert!(matches!(
        d.logs(&id, Some(-1), false).next().await,
        Some(Err(RuntimeError::InvalidRequest(_)))
    ));
    let facts = d.inspect(&id).await.unwrap();
    assert!(!facts.running);
    assert_eq!(facts.exit_code, Some(0));
    assert!(facts.started_at.is_some() && facts.finished_at.is_some());

    // Exit 3, with the log followed live while it runs.
    let fail = request(&["sh", "-c", "echo a; sleep 1; echo b; exit 3"], vec![]);
    c.track(&fail);
    let id = d.create(&fail, LaunchMode::Fenced).await.unwrap();
    d.start(&id).await.unwrap();
    let followed: Vec<_> = d
        .logs(&id, None, true)
        .map(|l| l.unwrap().text)
        .collect()
        .await;
    assert_eq!(followed, ["a", "b"]);
    assert_eq!(d.wait(&id).await.unwrap(), 3);
    assert_eq!(d.inspect(&id).await.unwrap().exit_code, Some(3));
}

/// Capabilities missing from this process's bounding set. dockerd 20.10 gives
/// privileged containers every capability up to `cap_last_cap`, so on a host
/// whose bounding set lacks one (e.g. a sandbox without CAP_SYS_RESOURCE)
/// runc refuses to start any privileged container.
fn missing_bounding_caps() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let bnd = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (0..=last).filter(|c| bnd & (1 << c) == 0).collect()
}

#[tokio::test]
async fn ab_isolation_fenced_sees_own_card_privileged_sees_all() {
    let d = docker().await;
    let c = Cleanup::default();
    let paths = ensure_sim_devices(3).unwrap();
    let probe = ["sh", "-c", "ls /dev/gpuq-sim* 2>/dev/null; sleep 1"];
    let all: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let one_card_each = || -> Vec<_> {
        paths
            .iter()
            .enumerate()
            .map(|(n, p)| request(&probe, vec![sim_gpu(n, p.clone())]))
            .collect()
    };

    // A: fenced, concurrently; each sees exactly its own card.
    let fenced = one_card_each();
    let results = join_all(fenced.iter().map(|r| run(&d, &c, r, LaunchMode::Fenced))).await;
    for (n, ((id, code), r)) in results.iter().zip(&fenced).enumerate() {
        assert_eq!(*code, 0);
        let seen = stdout_lines(&all_logs(&d, id).await);
        assert_eq!(seen, vec![all[n].clone()], "fenced probe {n}");
        verify(&d.inspect(id).await.unwrap(), r).unwrap();
    }

    // B: the same three, privileged.
    let privileged = one_card_each();
    let mut ids = Vec::new();
    for r in &privileged {
        c.track(r);
        let id = d.create(r, LaunchMode::PrivilegedForTest).await.unwrap();
        match verify(&d.inspect(&id).await.unwrap(), r) {
            Err(RuntimeError::FenceViolation(m)) => assert!(m.contains("privileged"), "{m}"),
            other => panic!("privileged container passed verify: {other:?}"),
        }
        ids.push(id);
    }
    let started = join_all(ids.iter().map(|id| d.start(id))).await;
    if started.iter().all(Result::is_ok) {
        let codes = join_all(ids.iter().map(|id| d.wait(id))).await;
        for (n, (id, code)) in ids.iter().zip(codes).enumerate() {
            assert_eq!(code.unwrap(), 0);
            let seen = stdout_lines(&all_logs(&d, id).await);
            for p in &all {
                assert!(seen.contains(p), "privileged probe {n} saw {seen:?}");
            }
        }
        return;
    }
    // This host cannot run privileged containers at all; prove that is the
    // reason, then show the B side the only other way: the same probes given
    // every card see every card, so visibility is decided by the fence alone.
    let missing = missing_bounding_caps();
    for s in &started {
        match s {
            Err(RuntimeError::Docker(m)) if m.contains("apply caps") && !missing.is_empty() => {}
            other => panic!("privileged start failed for an unexpected reason: {other:?}"),
        }
    }
    eprintln!(
        "NOTE: privileged containers cannot start here (capabilities {missing:?} are \
         missing from the bounding set); privileged visibility not observed, \
         over-granted probes used instead"
    );
    let every_card: Vec<_> = paths
        .iter()
        .enumerate()
        .map(|(n, p)| sim_gpu(n, p.clone()))
        .collect();
    let wide: Vec<_> = (0..3)
        .map(|_| request(&probe, every_card.clone()))
        .collect();
    let results = join_all(wide.iter().map(|r| run(&d, &c, r, LaunchMode::Fenced))).await;
    for (n, (id, code)) in results.iter().enumerate() {
        assert_eq!(*code, 0);
        assert_eq!(
            stdout_lines(&all_logs(&d, id).await),
            all,
            "over-granted probe {n}"
        );
    }
}

#[tokio::test]
async fn missing_image_is_reported_not_pulled() {
    let d = docker().await;
    let c = Cleanup::default();
    let mut r = request(&["true"], vec![]);
    r.image = format!("gpuq-test/absent-{}:never", r.job_id);
    c.track(&r);
    match d.create(&r, LaunchMode::Fenced).await {
        Err(RuntimeError::ImageMissing(name)) => assert_eq!(name, r.image),
        other => panic!("expected ImageMissing, got {other:?}"),
    }
    assert!(d.image_exists(IMAGE).await.unwrap());
    assert!(!d.image_exists(&r.image).await.unwrap());
}

/// dockerd before 23 checks a container's network only when it starts it: a start whose network
/// was removed since the create says so (the runner then launches the job again and looks gpuq's
/// job network up anew) instead of failing like any other start.
#[tokio::test]
async fn a_start_whose_network_was_removed_says_the_network_is_gone() {
    let d = docker().await;
    let net = format!("gpuq-test-gone-{}", uuid::Uuid::new_v4().simple());
    docker_cli(&["network", "create", &net]);
    let id = docker_cli(&["create", "--network", &net, IMAGE, "true"]);
    docker_cli(&["network", "rm", &net]);
    let started = d.start(&id).await;
    docker_cli(&["rm", "-f", &id]);
    match started {
        Err(RuntimeError::NetworkGone(m)) => assert!(m.contains(&net), "{m}"),
        other => panic!("expected NetworkGone, got {other:?}"),
    }
}

#[tokio::test]
async fn stop_kills_after_grace() {
    let d = docker().await;
    let c = Cleanup::default();
    let r = request(&["sleep", "60"], vec![]);
    c.track(&r);
    let id = d.create(&r, LaunchMode::Fenced).await.unwrap();
    d.start(&id).await.unwrap();
    assert!(d.inspect(&id).await.unwrap().running);
    let grace = Duration::from_secs(2);
    let t0 = Instant::now();
    d.stop(&id, grace).await.unwrap();
    let code = d.wait(&id).await.unwrap();
    assert!(
        t0.elapsed() < grace + Duration::from_secs(5),
        "{:?}",
        t0.elapsed()
    );
    assert!(code == 137 || code == 143, "exit code {code}");
    // Stopping again is harmless.
    d.stop(&id, grace).await.unwrap();
}

#[tokio::test]
async fn list_managed_finds_labelled_containers() {
    let d = docker().await;
    let c = Cleanup::default();
    let mut r = request_alone(&["sh", "-c", "exit 5"]);
    r.attempt = 7;
    let (id, code) = run(&d, &c, &r, LaunchMode::Fenced).await;
    assert_eq!(code, 5);
    let mine = d.list_managed(Some(&r.node)).await.unwrap();
    assert_eq!(mine.len(), 1, "{mine:?}");
    let m = &mine[0];
    assert_eq!(
        (m.id.as_str(), m.job_id, m.attempt),
        (id.as_str(), r.job_id, 7)
    );
    assert_eq!(
        (m.node.as_str(), m.running, m.exit_code),
        (r.node.as_str(), false, Some(5))
    );
    let everyone = d.list_managed(None).await.unwrap();
    assert!(everyone.iter().any(|m| m.job_id == r.job_id));
    d.remove(&id).await.unwrap();
    assert!(d.list_managed(Some(&r.node)).await.unwrap().is_empty());
    assert!(matches!(
        d.inspect(&id).await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test]
async fn real_card_is_requested_from_nvidia_by_uuid() {
    let d = docker().await;
    let c = Cleanup::default();
    let uuid = "GPU-3f2c1a9e-7b4d-4c11-9a0e-1234567890ab";
    let r = request(
        &["true"],
        vec![GrantedGpu {
            uuid: uuid.into(),
            sim_device: None,
        }],
    );
    c.track(&r);
    // Created only: starting needs the NVIDIA runtime, absent here.
    let id = d.create(&r, LaunchMode::Fenced).await.unwrap();
    let facts = d.inspect(&id).await.unwrap();
    assert_eq!(facts.gpu_device_ids, vec![uuid.to_string()]);
    assert!(facts.devices.is_empty() && !facts.privileged && !facts.running);
    assert_eq!(facts.exit_code, None);
    verify(&facts, &r).unwrap();
}

#[tokio::test]
async fn fenced_container_has_no_capabilities_and_fence_env() {
    let d = docker().await;
    let c = Cleanup::default();
    let mut r = request(
        &[
            "sh",
            "-c",
            "while read k v; do [ \"$k\" = CapEff: ] && echo $v; done </proc/self/status; \
             echo $NVIDIA_VISIBLE_DEVICES; echo \"[$GPUQ_GPUS]\"; echo $GPUQ_JOB_ID; echo $MINE",
        ],
        vec![],
    );
    r.env.insert("MINE".into(), "x y".into());
    let (id, code) = run(&d, &c, &r, LaunchMode::Fenced).await;
    assert_eq!(code, 0);
    let out = stdout_lines(&all_logs(&d, &id).await);
    let job = r.job_id.to_string();
    assert_eq!(out, ["0000000000000000", "void", "[]", job.as_str(), "x y"]);
}

#[tokio::test]
async fn unreachable_daemon_is_reported() {
    match Docker::connect_socket("/nonexistent/gpuq-docker.sock").await {
        Err(RuntimeError::Unreachable(why)) => assert!(why.contains("gpuq-docker.sock"), "{why}"),
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

/// The host PIDs of a container's processes, as `docker top` lists them.
fn top_pids(id: &str) -> Vec<u32> {
    crate::support::docker::docker_cli(&["top", id, "-o", "pid"])
        .lines()
        .skip(1)
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The one answer to "which job owns this process?" (the card observer's, for NVML's host PIDs):
/// every process of a job's recorded container is that job's, by its `/proc/<pid>/cgroup`; a
/// process in no container, in another container, or gone is no job's.
#[tokio::test]
async fn the_owner_of_a_host_pid_is_the_job_whose_recorded_container_holds_it() {
    use gpuq::server::db::vram::HeldCard;
    use gpuq::server::gpu::observer::JobOwners;
    let d = docker().await;
    let c = Cleanup::default();
    let r = request_alone(&["sh", "-c", "sleep 30 & sleep 30 & wait"]);
    c.track(&r);
    let other = request_alone(&["sleep", "30"]);
    c.track(&other);
    let id = d.create(&r, LaunchMode::Fenced).await.unwrap();
    let other_id = d.create(&other, LaunchMode::Fenced).await.unwrap();
    d.start(&id).await.unwrap();
    d.start(&other_id).await.unwrap();
    // sh and its two sleeps.
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids = loop {
        let pids = top_pids(&id);
        if pids.len() >= 3 || Instant::now() > deadline {
            break pids;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(pids.len(), 3, "{pids:?}");
    let other_pids = top_pids(&other_id);
    assert_eq!(other_pids.len(), 1, "{other_pids:?}");
    let gpu = uuid::Uuid::new_v4();
    let held = |job, container: &str| HeldCard {
        job_id: job,
        container_id: Some(container.to_owned()),
        gpu_uuid: gpu,
        committed_mib: 1000,
        stopping: false,
        workload: None,
        session: false,
    };
    // Only `r`'s job holds cards here (with its recorded container).
    let owners = JobOwners::from_held(&[held(r.job_id, &id)], "/proc".into());
    for pid in &pids {
        assert_eq!(owners.job_of(*pid), Some(r.job_id), "pid {pid}");
    }
    assert!(owners.holds(r.job_id, gpu));
    assert!(!owners.holds(r.job_id, uuid::Uuid::new_v4()));
    // A container that is no card-holding job's here (another gpuq container of this node, its
    // job not holding cards) and a process in no container are foreign.
    assert_eq!(owners.job_of(other_pids[0]), None);
    assert_eq!(owners.job_of(std::process::id()), None);
    // Once the other job is recorded, its process is its own, never `r`'s.
    let both = JobOwners::from_held(
        &[held(r.job_id, &id), held(other.job_id, &other_id)],
        "/proc".into(),
    );
    assert_eq!(both.job_of(other_pids[0]), Some(other.job_id));
    assert_eq!(both.job_of(pids[0]), Some(r.job_id));
    // A job recorded with another container does not own these processes.
    let mismatched = JobOwners::from_held(&[held(r.job_id, &other_id)], "/proc".into());
    assert_eq!(mismatched.job_of(pids[0]), None);
    // Stopped: its processes are gone, and so is their owner.
    d.stop(&id, Duration::from_secs(1)).await.unwrap();
    for pid in &pids {
        assert_eq!(owners.job_of(*pid), None, "pid {pid} after the stop");
    }
    d.stop(&other_id, Duration::from_secs(1)).await.unwrap();
    d.remove(&id).await.unwrap();
    d.remove(&other_id).await.unwrap();
}
