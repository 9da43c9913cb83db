//! Isolation of jobs from the host and from each other (issue 10, items 1, 2 and 4, and the
//! policy's CPU, `/dev/shm`, memory, process and root filesystem limits): job uids, root images,
//! limits seen by Docker, the never-mount list, re-checks of re-adopted containers and gpuq's job
//! network. The attacks themselves are in `attacks::isolation`.

use crate::support::docker::docker_cli;
use crate::support::isolation::{
    allowed_tempdir, container_of, facts_of, job, job_ids_of, log, open_dir, IsoNode,
};
use crate::support::{cancel_and_wait, database_url, failure_reason, wait_status, Serve, TestApp};
use gpuq::model::Role;
use gpuq::server::db::job_uids::{self, JobUidRange};
use gpuq::server::runtime::{Docker, ICC_OPTION, JOB_NETWORK};
use serde_json::json;
use sqlx::PgPool;

async fn run_ok(app: &TestApp, bearer: &str, script: &str) -> String {
    let id = app.submit_ok(bearer, job(script, &[])).await;
    let v = wait_status(app, bearer, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    log(app, bearer, id).await
}

async fn user_id(app: &TestApp, name: &str) -> uuid::Uuid {
    app.scalar_of("SELECT id FROM users WHERE username = $1", name)
        .await
}

#[sqlx::test(migrations = false)]
async fn each_user_gets_one_job_uid_from_the_range_on_first_launch(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.bearer("alice", Role::Member).await;
    let bob = app.bearer("bob", Role::Member).await;
    assert_eq!(job_ids_of(&app, "alice").await, (None, None));
    let range = JobUidRange {
        first: 250_000,
        last: 250_001,
    };
    let node = IsoNode::start(&app, "iso-uids", vec![], range).await;
    let a1 = run_ok(&app, &alice, "echo ids=$(id -u):$(id -g)").await;
    let a2 = run_ok(&app, &alice, "echo ids=$(id -u):$(id -g)").await;
    let b1 = run_ok(&app, &bob, "echo ids=$(id -u):$(id -g)").await;
    let (au, ag) = job_ids_of(&app, "alice").await;
    let (bu, _) = job_ids_of(&app, "bob").await;
    let (au, bu) = (au.unwrap(), bu.unwrap());
    assert_eq!(Some(au), ag, "gid defaults to the uid");
    assert_ne!(au, bu, "two users never share a uid");
    for uid in [au, bu] {
        assert!((250_000..=250_001).contains(&uid), "{uid}");
    }
    assert!(a1.contains(&format!("ids={au}:{au}")), "{a1}");
    assert!(
        a2.contains(&format!("ids={au}:{au}")),
        "the same uid again: {a2}"
    );
    assert!(b1.contains(&format!("ids={bu}:{bu}")), "{b1}");
    // The range is used up: a third user's job fails, saying what to do.
    let carol = app.bearer("carol", Role::Member).await;
    let id = app.submit_ok(&carol, job("id -u", &[])).await;
    let reason = failure_reason(&app, &carol, id).await;
    assert!(
        reason.contains("job_uid") && reason.contains("--job-uid-range"),
        "{reason}"
    );
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn allocation_skips_uids_an_admin_assigned(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.bearer("alice", Role::Member).await;
    app.bearer("bob", Role::Member).await;
    let range = JobUidRange {
        first: 260_000,
        last: 260_001,
    };
    let mut conn = app.pool.acquire().await.unwrap();
    let bob = user_id(&app, "bob").await;
    job_uids::set(&mut conn, bob, Some(260_000), None)
        .await
        .unwrap();
    drop(conn);
    let id = app.submit_ok(&alice, job("true", &[])).await;
    let ids = job_uids::for_job(&app.pool, id, range)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((ids.uid, ids.gid), (260_001, 260_001));
    // Asked again: the same ids, nothing new allocated.
    let again = job_uids::for_job(&app.pool, id, range).await.unwrap();
    assert_eq!(again, Some(ids));
}

#[sqlx::test(migrations = false)]
async fn admins_set_job_uids_and_conflicts_name_the_field(pool: PgPool) {
    let (app, admin, alice) = TestApp::with_admin_and_member(pool, "alice").await;
    app.bearer("bob", Role::Member).await;
    let (a, b) = (user_id(&app, "alice").await, user_id(&app, "bob").await);
    let patch = |id: uuid::Uuid, body: serde_json::Value, who: String| {
        let app = &app;
        async move { app.patch(&format!("/api/v1/users/{id}"), &who, body).await }
    };
    let r = patch(
        a,
        json!({ "job_uid": 4242, "job_gid": 4343 }),
        admin.clone(),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(job_ids_of(&app, "alice").await, (Some(4242), Some(4343)));
    let r = patch(b, json!({ "job_uid": 4242 }), admin.clone()).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(
        r.text.contains("job_uid") && r.text.contains("alice"),
        "{}",
        r.text
    );
    assert_eq!(job_ids_of(&app, "bob").await, (None, None));
    let r = patch(b, json!({ "job_uid": 0 }), admin.clone()).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "job_uid");
    let r = patch(b, json!({ "job_gid": -5 }), admin.clone()).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "job_gid");
    // Setting one's own uid is an admin's decision.
    let r = patch(a, json!({ "job_uid": 1000 }), alice.clone()).await;
    assert_eq!(r.status, 403, "{}", r.text);
    // The audit trail records the change.
    let sql = "SELECT count(*) FROM audit_events WHERE kind = 'user.update' AND detail ? 'job_uid'";
    let audited: i64 = app.scalar(sql).await;
    assert_eq!(audited, 1);
    // Jobs run as what the admin set.
    let node = IsoNode::start(&app, "iso-admin-uid", vec![], Default::default()).await;
    let text = run_ok(&app, &alice, "echo ids=$(id -u):$(id -g)").await;
    assert!(text.contains("ids=4242:4343"), "{text}");
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn only_root_images_run_as_root(pool: PgPool) {
    let (app, admin, alice) = TestApp::with_admin_and_member(pool, "alice").await;
    let node = IsoNode::start(&app, "iso-root", vec![], Default::default()).await;
    let text = run_ok(&app, &alice, "echo uid=$(id -u)").await;
    assert!(!text.contains("uid=0"), "{text}");
    app.set_policy(&admin, json!({ "root_images": ["gpuq-test/*"] }))
        .await;
    let text = run_ok(&app, &alice, "echo uid=$(id -u)").await;
    assert!(
        text.contains("uid=0"),
        "a listed image keeps its root user: {text}"
    );
    app.set_policy(&admin, json!({ "root_images": ["nvidia/*"] }))
        .await;
    let text = run_ok(&app, &alice, "echo uid=$(id -u)").await;
    assert!(!text.contains("uid=0"), "{text}");
    node.stop().await;
}

/// The runner keeps the launch policy it read until the notifier says it may have changed, yet
/// the very next launch after a change follows it: with the backstop timer an hour away, only the
/// change's own notification can tell the runner.
#[sqlx::test(migrations = false)]
async fn a_policy_change_reaches_the_next_launch_without_the_backstop(pool: PgPool) {
    let app = TestApp::with_backstop(pool, std::time::Duration::from_secs(3600)).await;
    let (admin, alice) = app.admin_and_member("alice").await;
    let node = IsoNode::start(&app, "iso-policy", vec![], Default::default()).await;
    let shm = "busybox df -k /dev/shm | busybox tail -1";
    for mib in [64, 128, 128, 64] {
        app.set_policy(&admin, json!({ "shm_mib": mib })).await;
        let text = run_ok(&app, &alice, shm).await;
        assert!(
            text.contains(&format!(" {} ", mib * 1024)),
            "a /dev/shm of {mib} MiB: {text}"
        );
    }
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn the_policys_limits_user_and_network_are_what_docker_runs(pool: PgPool) {
    let (app, admin, alice) = TestApp::with_admin_and_member(pool, "alice").await;
    app.set_policy(&admin, json!({ "cpus_per_job": 1.5, "shm_mib": 128 }))
        .await;
    let node = IsoNode::start(&app, "iso-limits", vec![], Default::default()).await;
    let id = app
        .submit_ok(
            &alice,
            job("busybox df -k /dev/shm | busybox tail -1; sleep 60", &[]),
        )
        .await;
    wait_status(&app, &alice, id, &["running"], 30).await;
    let facts = facts_of(&app, id).await;
    assert_eq!(facts.nano_cpus, 1_500_000_000);
    assert_eq!(facts.shm_size, 128 * 1024 * 1024);
    // The default policy's memory (no swap) and process limits, read-only root and /tmp.
    assert_eq!(facts.memory, 16 << 30);
    assert_eq!(facts.memory_swap, facts.memory);
    assert_eq!(facts.pids_limit, 4096);
    assert!(facts.readonly_rootfs);
    let (uid, gid) = job_ids_of(&app, "alice").await;
    let (uid, gid) = (uid.unwrap(), gid.unwrap());
    // The job's uid owns its /tmp, whatever mode the image's own /tmp has.
    assert_eq!(
        facts.tmpfs.get("/tmp").map(String::as_str),
        Some(format!("rw,exec,nosuid,nodev,size=4096m,mode=1777,uid={uid},gid={gid}").as_str())
    );
    assert_eq!(facts.user, format!("{uid}:{gid}"));
    assert_eq!(facts.networks, [JOB_NETWORK]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = log(&app, &alice, id).await;
        if text.contains("131072") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "/dev/shm: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    cancel_and_wait(&app, &alice, id).await;
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn the_never_mount_list_holds_at_submit_and_at_launch(pool: PgPool) {
    let (app, admin, alice) = TestApp::with_admin_and_member(pool, "alice").await;
    let (_root, tree) = allowed_tempdir(&app, &admin, "tree").await;
    // Symlinks inside the allowlisted tree to the runtime's sockets and state, and /boot.
    for (name, target) in [
        ("run", "/run"),
        ("docker", "/var/lib/docker"),
        ("boot", "/boot"),
    ] {
        let link = tree.join(name);
        std::os::unix::fs::symlink(target, &link).unwrap();
        if std::fs::canonicalize(&link).is_err() {
            continue; // Not on this host: nothing to mount.
        }
        let r = app
            .submit(&alice, job("true", &[format!("{}:/x", link.display())]))
            .await;
        assert_eq!(r.status, 400, "{name}: {}", r.text);
        assert_eq!(r.json()["field"], "volumes[0]");
        assert!(r.text.contains("never mount"), "{}", r.text);
    }
    // This node's own data folder sits inside the tree: only the node knows, so the launch fails.
    let data = open_dir(&tree.join("gpuq-data"));
    let id = app
        .submit_ok(&alice, job("ls /x", &[format!("{}:/x", data.display())]))
        .await;
    let node = IsoNode::start(&app, "iso-never", vec![data.clone()], Default::default()).await;
    let reason = failure_reason(&app, &alice, id).await;
    assert!(
        reason.contains("volumes[0]") && reason.contains("never mount"),
        "{reason}"
    );
    assert_eq!(container_of(&app, id).await, None);
    // A folder beside it is fine, and the job sees exactly it.
    let ok = open_dir(&tree.join("alice"));
    std::fs::write(ok.join("hello"), "hi").unwrap();
    let id = app
        .submit_ok(&alice, job("ls /x", &[format!("{}:/x:ro", ok.display())]))
        .await;
    let v = wait_status(&app, &alice, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert!(log(&app, &alice, id).await.contains("hello"));
    node.stop().await;
}

/// A restart: `gpuq serve` is killed while two jobs run; while it is down one job's folder
/// becomes a symlink out of the allowlist. The restarted server stops and fails that job instead
/// of re-adopting it, and re-adopts the other.
#[sqlx::test(migrations = false)]
async fn a_readopted_container_whose_volume_moved_is_stopped(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 4).await;
    let (admin, alice) = app.admin_and_member("alice").await;
    let (root, shared) = allowed_tempdir(&app, &admin, "shared").await;
    let outside = open_dir(&root.path().join("outside"));
    let proj = open_dir(&shared.join("proj"));
    let kept = open_dir(&shared.join("kept"));
    let uids = ["--stop-grace-s", "1", "--job-uid-range", "270000-270009"];
    let serve = Serve::runner(&app.pool, "iso-readopt", &uids);
    let server = serve.start("a.log").await;
    let moved = app
        .submit_ok(&alice, job("sleep 60", &[format!("{}:/x", proj.display())]))
        .await;
    let stays = app
        .submit_ok(&alice, job("sleep 60", &[format!("{}:/x", kept.display())]))
        .await;
    for id in [moved, stays] {
        wait_status(&app, &alice, id, &["running"], 30).await;
    }
    let (uid, _) = job_ids_of(&app, "alice").await;
    assert!((270_000..=270_009).contains(&uid.unwrap()), "{uid:?}");
    // kill -9: the containers run on without gpuq.
    server.kill9();
    std::fs::rename(&proj, shared.join("proj.old")).unwrap();
    std::os::unix::fs::symlink(&outside, &proj).unwrap();
    let container = container_of(&app, moved).await.unwrap();
    let _again = serve.start("b.log").await;
    let v = wait_status(&app, &alice, moved, &["failed", "succeeded"], 30).await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("not re-adopted") && reason.contains("volumes[0]"),
        "{reason}"
    );
    let docker = Docker::connect().await.unwrap();
    assert!(
        docker.inspect(&container).await.is_err(),
        "container removed"
    );
    // The other job is re-adopted and runs on.
    let readopted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = 'readopted'",
    )
    .bind(stays)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(readopted, 1);
    assert_eq!(app.job(&alice, stays).await["status"], "running");
    cancel_and_wait(&app, &alice, stays).await;
}

#[sqlx::test(migrations = false)]
async fn a_bad_job_uid_range_stops_the_server_naming_the_flag(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    for bad in ["0-10", "300-200", "many"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
            .args(["serve", "--database-url", &url, "--job-uid-range", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--job-uid-range"), "{bad}: {err}");
    }
}

#[tokio::test]
async fn the_job_network_is_created_once_without_inter_container_traffic() {
    let docker = Docker::connect().await.unwrap();
    let first = docker.ensure_job_network().await.unwrap();
    let again = docker.ensure_job_network().await.unwrap();
    assert_eq!(first, again, "created once, then reused");
    let out = docker_cli(&["network", "inspect", &first, "-f", "{{json .Options}}"]);
    let options: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(options[ICC_OPTION], "false", "{options}");
}
