//! Logs as a weapon: reading a big log many times at once to make gpuq (shielded from the OOM
//! killer) push the kernel into killing other members' jobs, asking for a tail past any size, a
//! job that prints without end, and a member who fills the log folder with finished jobs' logs.

use crate::support::isolation::{job, log};
use crate::support::{
    cancel_and_wait, database_url, free_port, start_server, wait_status, Node, TestApp,
};
use gpuq::model::Role;
use gpuq::server::bench::logs::{wave, write_log};
use gpuq::server::jobs::log_read::{MAX_TAIL_BYTES, TAIL_CUT};
use gpuq::server::jobs::retention;
use gpuq::server::runner::logs::log_path;
use gpuq::server::runtime::LaunchMode;
use serde_json::json;
use sqlx::PgPool;
use std::io::Write;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::TryRecvError;
use uuid::Uuid;

/// The most a server may grow by while it answers 60 whole reads of a 64 MiB log at once. Before
/// logs were streamed, 60 such reads took it from 46 MiB to 4.5 GiB (`gpuq bench logs`); streamed,
/// they grow it by about 32 MiB.
const READS_GROWTH_MIB: f64 = 256.0;

/// A finished CPU job of `bearer`'s, to hang a log on.
async fn finished_job(app: &TestApp, bearer: &str) -> Uuid {
    let id = app.submit_ok(bearer, job("true", &[])).await;
    let sql = "UPDATE jobs SET status = 'succeeded', finished_at = now() WHERE id = $1";
    app.exec_with(sql, id).await;
    id
}

/// Fifteen users (the owner and fourteen managers, who read every log) send four whole reads
/// each of one 64 MiB log at once to a real `gpuq serve` that admits all sixty: every read gets the
/// whole log, and the server's resident size grows by less than [`READS_GROWTH_MIB`]. Then the
/// owner alone sends sixty: four stream, the rest are refused with 429 and `Retry-After`.
#[sqlx::test(migrations = false)]
async fn sixty_parallel_reads_of_a_64_mib_log_keep_the_server_small(pool: PgPool) {
    let (app, _admin, owner) = TestApp::with_admin_and_member(pool.clone(), "mallory").await;
    let mut bearers = vec![owner.clone()];
    for i in 1..15 {
        bearers.push(app.bearer(&format!("manager{i}"), Role::Manager).await);
    }
    let id = finished_job(&app, &owner).await;
    let data = tempfile::tempdir().unwrap();
    let text = write_log(&log_path(&data.path().join("logs"), id), 64).unwrap();
    let port = free_port();
    let data_dir = data.path().to_str().unwrap();
    let extra = ["--data-dir", data_dir, "--log-reads", "60"];
    let server = start_server(
        &database_url(&pool),
        port,
        &data.path().join("serve.log"),
        &extra,
    )
    .await;
    let pid = server.0.id();
    let url = format!("http://127.0.0.1:{port}/api/v1/jobs/{id}/logs");
    // One read first, so what the server sets up on its first request is not counted.
    let first = wave(pid, &url, &bearers[..1], 1).await.unwrap();
    assert_eq!(first.ok_bytes, [text]);

    let w = wave(pid, &url, &bearers, 4).await.unwrap();
    assert_eq!(w.statuses.get(&200), Some(&60), "{w:?}");
    assert!(w.ok_bytes.iter().all(|b| *b == text), "{:?}", w.ok_bytes);
    assert!(
        w.growth_mib() < READS_GROWTH_MIB,
        "60 reads of a 64 MiB log grew the server from {} to {} MiB",
        w.rss_before_kib / 1024,
        w.rss_peak_kib / 1024
    );

    let mine = wave(pid, &url, &bearers[..1], 60).await.unwrap();
    let ok = mine.statuses.get(&200).copied().unwrap_or(0);
    let refused = mine.statuses.get(&429).copied().unwrap_or(0);
    assert!(ok >= 4 && refused > 0 && ok + refused == 60, "{mine:?}");
    assert!(mine.ok_bytes.iter().all(|b| *b == text));
    assert_eq!(mine.refused_without_retry, 0);
}

/// A tail past the most lines is refused naming `tail`; a tail of a log of long lines holds the
/// lines of its last 4 MiB only, and says so.
#[sqlx::test(migrations = false)]
async fn a_huge_tail_is_refused_and_a_tail_of_long_lines_is_bounded(pool: PgPool) {
    let (app, _admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let id = finished_job(&app, &member).await;
    let path = log_path(&app.logs_dir, id);
    std::fs::create_dir_all(&app.logs_dir).unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let long = "x".repeat(16 * 1024);
    for i in 0..2_000 {
        writeln!(f, "2026-12-01T00:00:00.{i:09}Z o {long}").unwrap();
    }
    f.flush().unwrap();
    drop(f);

    for tail in ["10001", "1000000000", "18446744073709551615"] {
        let r = app
            .get(&format!("/api/v1/jobs/{id}/logs?tail={tail}"), &member)
            .await;
        assert_eq!(r.status, 400, "tail={tail}: {}", r.text.len());
        assert!(r.text.contains("tail"), "{}", r.text);
    }
    let r = app
        .get(&format!("/api/v1/jobs/{id}/logs?tail=10000"), &member)
        .await;
    assert_eq!(r.status, 200);
    assert!(
        r.text.len() as u64 <= MAX_TAIL_BYTES,
        "a tail of 32 MiB of long lines answered {} bytes",
        r.text.len()
    );
    let mut lines = r.text.lines();
    assert_eq!(lines.next(), Some(TAIL_CUT));
    assert!(lines.all(|l| l == long));
    let r = app
        .get(&format!("/api/v1/jobs/{id}/logs?tail=2"), &member)
        .await;
    assert_eq!(r.text, format!("{long}\n{long}\n"));
}

/// Log notifications for job `id` waiting in `grew` (a lag counts as what was missed).
fn grew_for(grew: &mut tokio::sync::broadcast::Receiver<Uuid>, id: Uuid) -> u64 {
    let mut n = 0;
    loop {
        match grew.try_recv() {
            Ok(job) if job == id => n += 1,
            Ok(_) => {}
            Err(TryRecvError::Lagged(missed)) => n += missed,
            Err(_) => return n,
        }
    }
}

/// A job that prints without end: its log stops within the runner's cap (1 MiB here) with a line
/// saying the output was cut, and from then on the runner reads nothing more of it while the job
/// goes on printing.
#[sqlx::test(migrations = false)]
async fn a_job_printing_past_its_cap_is_cut_and_no_longer_read(pool: PgPool) {
    let (app, _admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let node = Node::start(&app, "logs-cap", LaunchMode::Fenced).await;
    let mut grew = app.notifier.subscribe_logs();
    let id = app
        .submit_ok(
            &member,
            job("yes 0123456789012345678901234567890123456789", &[]),
        )
        .await;
    let path = log_path(&app.logs_dir, id);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&path).is_ok_and(|t| t.contains("log size limit")) {
        assert!(Instant::now() < deadline, "the log was never cut");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size <= 1 << 20,
        "the log is {size} bytes, past its 1 MiB cap"
    );
    grew_for(&mut grew, id);
    // The job still prints; the runner must not be reading any of it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(app.job(&member, id).await["status"], "running");
    let read = grew_for(&mut grew, id);
    assert!(
        read < 3,
        "{read} more lines were read from a cut job's output"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);

    let text = log(&app, &member, id).await;
    let (last, before) = text
        .trim_end()
        .rsplit_once('\n')
        .map(|(b, l)| (l, b))
        .unwrap();
    assert!(
        last.contains("log size limit of 1048576 bytes") && last.contains("cut"),
        "{last}"
    );
    assert!(before
        .lines()
        .all(|l| l == "0123456789012345678901234567890123456789"));
    cancel_and_wait(&app, &member, id).await;
    node.stop().await;
}

/// A member over their share of the log folder (`log_user_mib`): within moments of their jobs'
/// ends their oldest finished logs are removed until they are under it; another member's log is
/// left alone.
#[sqlx::test(migrations = false)]
async fn a_member_over_the_log_quota_loses_their_oldest_logs(pool: PgPool) {
    let (app, admin, mallory) = TestApp::with_admin_and_member(pool, "mallory").await;
    let olive = app.bearer("olive", Role::Member).await;
    app.set_policy(&admin, json!({ "log_user_mib": 1 })).await;
    let node = Node::start(&app, "logs-quota", LaunchMode::Fenced).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sweeper = tokio::spawn(retention::run(
        app.pool.clone(),
        app.logs_dir.clone(),
        (Duration::from_secs(3600), Duration::from_millis(200)),
        app.notifier.subscribe(),
        stopped,
    ));
    // About 720 KB of log each (700 lines of 1000 characters): one fits the 1 MiB share, two do
    // not. (Long lines: few lines, so little of JSON's per-line room in dockerd's copy.)
    let line = "s=0123456789; s=$s$s$s$s$s$s$s$s$s$s; s=$s$s$s$s$s$s$s$s$s$s";
    let chatty = job(&format!("{line}; yes $s | head -n 700"), &[]);
    let mut ids = Vec::new();
    for bearer in [&olive, &mallory, &mallory, &mallory] {
        let id = app.submit_ok(bearer, chatty.clone()).await;
        wait_status(&app, bearer, id, &["succeeded"], 60).await;
        ids.push(id);
    }
    let exists = |id: Uuid| log_path(&app.logs_dir, id).exists();
    let deadline = Instant::now() + Duration::from_secs(30);
    while exists(ids[1]) || exists(ids[2]) {
        assert!(Instant::now() < deadline, "mallory's oldest logs were kept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(exists(ids[3]), "mallory's newest log is within the share");
    assert!(exists(ids[0]), "olive's log is hers, within her share");
    let kept = std::fs::metadata(log_path(&app.logs_dir, ids[3]))
        .unwrap()
        .len();
    assert!(kept > 500_000 && kept <= 1 << 20, "{kept}");
    stop.send(true).unwrap();
    sweeper.await.unwrap();
    node.stop().await;
}

/// A job that prints numbered lines as fast as it can, far past the runner's cap (1 MiB here),
/// then ends: its log keeps the first cap-worth of its output, every line from the first one on
/// and none missing, then the line saying it was cut. (Before: dockerd's own copy, capped at the
/// same size, held less output than gpuq's cap, because each line is larger as JSON, and rotated
/// it away before the runner had read it: the log jumped from one number to a much later one.)
#[sqlx::test(migrations = false)]
async fn a_fast_printers_log_keeps_its_first_cap_of_output(pool: PgPool) {
    let (app, _admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let node = Node::start(&app, "logs-fast", LaunchMode::Fenced).await;
    let id = app.submit_ok(&member, job("seq 1 1000000", &[])).await;
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let path = log_path(&app.logs_dir, id);
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size <= 1 << 20, "the log is {size} bytes, past its cap");
    assert!(
        size > (1 << 20) - 1024,
        "the log is {size} bytes: it stopped well short of its cap"
    );
    let text = log(&app, &member, id).await;
    let (before, last) = text.trim_end().rsplit_once('\n').unwrap();
    assert!(
        last.contains("log size limit of 1048576 bytes") && last.contains("cut"),
        "{last}"
    );
    let mut expected = 1u64;
    for line in before.lines() {
        assert_eq!(
            line,
            expected.to_string(),
            "line {expected} of the output is missing"
        );
        expected += 1;
    }
    assert!(expected > 10_000, "only {expected} lines were kept");
    node.stop().await;
}
