//! Getting out of a job onto the host, or into a neighbour's job. Each attack runs from a member
//! account against real Postgres and dockerd, through a fenced node as `gpuq serve` runs one.

use crate::support::docker::docker_cli;
use crate::support::isolation::{
    allowed_tempdir, container_of, event_kinds, facts_of, ip_of, job, job_ids_of, log, open_dir,
    IsoNode,
};
use crate::support::{cancel_and_wait, wait_status, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::Docker;
use serde_json::json;
use sqlx::PgPool;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A job running `script` with `dir` mounted at `/data`.
fn on_data(script: &str, dir: &std::path::Path) -> serde_json::Value {
    job(script, &[format!("{}:/data", dir.display())])
}

/// A member queues jobs whose volumes are folders inside the allowlisted tree, then, while the
/// jobs wait, swaps the folders for symlinks: one to a host folder outside the allowlist, one to
/// `/etc`. The runner resolves them again at launch: both jobs fail naming the volume, and no
/// container is ever created, so the host folders are never mounted.
#[sqlx::test(migrations = false)]
async fn a_volume_swapped_for_a_symlink_while_queued_is_never_mounted(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let (root, shared) = allowed_tempdir(&app, &admin, "shared").await;
    let secret = root.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("token"), "host-secret-4711\n").unwrap();
    let proj = open_dir(&shared.join("proj"));
    let proj2 = open_dir(&shared.join("proj2"));
    let to_secret = app
        .submit_ok(&member, on_data("cat /data/token; ls /data", &proj))
        .await;
    let to_etc = app
        .submit_ok(&member, on_data("cat /data/hostname; ls /data", &proj2))
        .await;
    // No node runs yet: the jobs wait in the queue while the member swaps the folders.
    for id in [to_secret, to_etc] {
        assert_eq!(app.job(&member, id).await["status"], "queued");
    }
    std::fs::remove_dir(&proj).unwrap();
    std::os::unix::fs::symlink(&secret, &proj).unwrap();
    std::fs::remove_dir(&proj2).unwrap();
    std::os::unix::fs::symlink("/etc", &proj2).unwrap();

    let node = IsoNode::start(&app, "iso-swap", vec![], Default::default()).await;
    for (id, host) in [(to_secret, &proj), (to_etc, &proj2)] {
        let v = wait_status(&app, &member, id, &["failed", "succeeded"], 60).await;
        assert_eq!(v["status"], "failed", "the swapped volume was mounted: {v}");
        let reason = v["status_reason"].as_str().unwrap();
        assert!(
            reason.contains("volumes[0]") && reason.contains(host.to_str().unwrap()),
            "the reason names the volume: {reason}"
        );
        assert_eq!(container_of(&app, id).await, None, "no container was made");
        let kinds = event_kinds(&app, id).await;
        assert!(
            !kinds
                .iter()
                .any(|k| k == "fence_verified" || k == "start_issued"),
            "{kinds:?}"
        );
    }
    let docker = Docker::connect().await.unwrap();
    assert!(docker
        .list_managed(Some("iso-swap"))
        .await
        .unwrap()
        .is_empty());
    node.stop().await;
}

/// A member's job writes a copy of a shell on a mounted read-write folder and tries to make it a
/// root setuid binary (`chmod u+s`, `chown root`). The job runs as the member's job uid, not 0, so
/// the file belongs to that uid: at most a setuid-to-the-member binary, no root shell.
#[sqlx::test(migrations = false)]
async fn a_setuid_plant_on_a_mounted_folder_belongs_to_the_member(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let (_root, shared) = allowed_tempdir(&app, &admin, "shared").await;
    let node = IsoNode::start(&app, "iso-suid", vec![], Default::default()).await;
    let script = "echo uid=$(id -u) gid=$(id -g); busybox cp /bin/busybox /data/rootshell; \
                  busybox chmod 4755 /data/rootshell; echo chmod=$?; \
                  busybox chown 0:0 /data/rootshell; echo chown=$?";
    let plant = open_dir(&shared.join("plant"));
    let id = app.submit_ok(&member, on_data(script, &plant)).await;
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let text = log(&app, &member, id).await;
    let meta = std::fs::metadata(plant.join("rootshell")).unwrap();
    assert_ne!(meta.uid(), 0, "the planted file is root's: {text}");
    assert_ne!(meta.gid(), 0);
    assert!(!text.contains("uid=0 "), "the job ran as root: {text}");
    assert!(text.contains("chown=1"), "chown to root is refused: {text}");
    let (uid, gid) = job_ids_of(&app, "mallory").await;
    let (uid, gid) = (
        uid.expect("a job uid") as u32,
        gid.expect("a job gid") as u32,
    );
    assert!(
        text.contains(&format!("uid={uid} gid={gid}")),
        "the job runs as the member's job uid: {text}"
    );
    assert_eq!(
        meta.uid(),
        uid,
        "the planted file belongs to the member's job uid"
    );
    let setuid = meta.permissions().mode() & 0o4000 != 0;
    assert!(
        !setuid || meta.uid() != 0,
        "a setuid bit, if any, is the member's own"
    );
    node.stop().await;
}

/// Accepts connections on every host address and counts them: "the outside" a job may reach.
async fn outside_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    (port, accepted)
}

async fn wait_log(app: &TestApp, bearer: &str, id: uuid::Uuid, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log(app, bearer, id).await.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no `{needle}` in the log of {id}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Job A (one member) listens on a port; job B (another member) knows A's address and tries to
/// connect. On gpuq's network B's connection never arrives, while B still reaches the outside.
#[sqlx::test(migrations = false)]
async fn a_neighbours_open_port_is_unreachable(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.bearer("alice", Role::Member).await;
    let mallory = app.bearer("mallory", Role::Member).await;
    let node = IsoNode::start(&app, "iso-net", vec![], Default::default()).await;
    let (port, accepted) = outside_listener().await;
    let a = app
        .submit_ok(
            &alice,
            job(
                "echo listening; busybox nc -l -p 7000; echo a-got-a-connection",
                &[],
            ),
        )
        .await;
    wait_status(&app, &alice, a, &["running"], 30).await;
    wait_log(&app, &alice, a, "listening").await;
    let a_ip = ip_of(&container_of(&app, a).await.unwrap());
    assert!(!a_ip.is_empty(), "job A has an address on gpuq's network");
    let probe = format!(
        "echo probe | busybox nc -w 3 {a_ip} 7000; echo neighbour=$?; \
         gw=$(busybox ip route | busybox awk '/default/ {{print $3}}'); \
         echo out | busybox nc -w 3 $gw {port}; echo outside=$?"
    );
    let b = app.submit_ok(&mallory, job(&probe, &[])).await;
    let v = wait_status(&app, &mallory, b, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let text = log(&app, &mallory, b).await;
    assert!(
        text.contains("neighbour=1"),
        "the neighbour's port answered: {text}"
    );
    assert!(text.contains("outside=0"), "jobs still reach out: {text}");
    assert!(accepted.load(Ordering::SeqCst) >= 1);
    let a_log = log(&app, &alice, a).await;
    assert!(!a_log.contains("a-got-a-connection"), "{a_log}");
    assert_eq!(facts_of(&app, a).await.networks, ["gpuq-jobs"]);
    cancel_and_wait(&app, &alice, a).await;
    node.stop().await;
}

/// Under the `none` network policy a job has loopback only: neither the host nor anyone else.
#[sqlx::test(migrations = false)]
async fn under_network_none_a_job_reaches_nothing(pool: PgPool) {
    let (app, admin, mallory) = TestApp::with_admin_and_member(pool, "mallory").await;
    app.set_policy(&admin, json!({ "network": "none" })).await;
    let node = IsoNode::start(&app, "iso-none", vec![], Default::default()).await;
    let (port, accepted) = outside_listener().await;
    // Every address of the host (its own, Docker's bridges): none may be reachable.
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .unwrap();
    let hosts: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|a| !a.contains(':'))
        .map(str::to_owned)
        .collect();
    assert!(!hosts.is_empty());
    let probe = format!(
        "busybox ip -o link | busybox awk '{{print \"if=\" $2}}'; \
         for h in {}; do echo out | busybox nc -w 2 $h {port} && echo reached=$h; done; echo done",
        hosts.join(" ")
    );
    let id = app.submit_ok(&mallory, job(&probe, &[])).await;
    let v = wait_status(&app, &mallory, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let text = log(&app, &mallory, id).await;
    let ifs: Vec<&str> = text.lines().filter(|l| l.starts_with("if=")).collect();
    assert!(ifs.contains(&"if=lo:"), "{text}");
    assert!(
        !ifs.iter().any(|l| l.starts_with("if=eth")),
        "no network interface but loopback: {text}"
    );
    assert!(text.contains("done"), "{text}");
    assert!(!text.contains("reached="), "{text}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    node.stop().await;
}

/// What a job that tries to fill Docker's disk leaves there, and what it printed. The job runs as
/// root (its image is in `root_images`, the strongest writer there is), tries `/` and `/etc`, then
/// writes 64 MiB to `/tmp`; the container's writable layer (`SizeRw`, on the
/// disk that every job and dockerd share) is read while it still runs.
async fn disk_fill(app: &TestApp, member: &str) -> (i64, String) {
    let script = "for d in / /etc; do busybox touch $d/planted && echo wrote $d; done; \
                  busybox dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; \
                  echo filled $(busybox du -k /tmp/fill); echo done-writing; sleep 60";
    let id = app.submit_ok(member, job(script, &[])).await;
    wait_log(app, member, id, "done-writing").await;
    let container = container_of(app, id).await.unwrap();
    let size = docker_cli(&["inspect", "--size", "-f", "{{.SizeRw}}", &container]);
    let text = log(app, member, id).await;
    cancel_and_wait(app, member, id).await;
    (size.trim().parse().unwrap(), text)
}

/// A member's job writes as much as it can where it can. With the default read-only root, nothing
/// it writes lands on Docker's disk: `/` and `/etc` refuse it, and `/tmp` stops at the policy's
/// size. The same job under a writable root (the A/B: the test can fail) plants its
/// files and puts its 64 MiB on Docker's disk.
#[sqlx::test(migrations = false)]
async fn a_job_cannot_fill_dockers_disk(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let image = job("", &[])["image"].as_str().unwrap().to_string();
    app.set_policy(&admin, json!({ "root_images": [image], "tmp_mib": 8 }))
        .await;
    let node = IsoNode::start(&app, "att-disk", vec![], Default::default()).await;

    let (layer, text) = disk_fill(&app, &member).await;
    assert!(
        !text.contains("wrote"),
        "a read-only root took a file: {text}"
    );
    assert!(text.contains("No space left on device"), "{text}");
    let kib: u64 = text
        .split("filled ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no size of /tmp/fill: {text}"));
    assert!(
        kib <= 8 * 1024,
        "/tmp held {kib} KiB, over its 8 MiB: {text}"
    );
    assert!(
        layer < 1 << 20,
        "{layer} bytes landed on Docker's disk: {text}"
    );

    app.set_policy(
        &admin,
        json!({ "root_images": [image], "read_only_rootfs": false }),
    )
    .await;
    let (layer, text) = disk_fill(&app, &member).await;
    assert!(text.contains("wrote /etc"), "{text}");
    assert!(layer >= 64 << 20, "only {layer} bytes in the layer: {text}");
    node.stop().await;
}

/// A job that runs as its owner's uid (not root) can still use `/tmp` under a read-only root: the
/// tmpfs keeps the image's `/tmp` mode (1777 in the test image, as in every distribution's), and
/// `$HOME`, where tools keep their caches, is that `/tmp`.
#[sqlx::test(migrations = false)]
async fn a_job_as_its_owner_writes_to_tmp_under_a_read_only_root(pool: PgPool) {
    let (app, _admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let node = IsoNode::start(&app, "att-tmp", vec![], Default::default()).await;
    let script = "echo hi > /tmp/mine && echo read back $(busybox cat /tmp/mine); \
                  echo tmp mode $(busybox stat -c %a /tmp); \
                  busybox touch /planted || echo refused; \
                  busybox mkdir -p $HOME/.cache && echo cache in $HOME";
    let id = app.submit_ok(&member, job(script, &[])).await;
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let text = log(&app, &member, id).await;
    // Each fact on a line of its own: dockerd interleaves the job's stderr with its stdout.
    assert!(text.contains("read back hi\n"), "{text}");
    assert!(text.contains("tmp mode 1777\n"), "{text}");
    assert!(
        text.contains("Read-only file system") && text.contains("refused"),
        "{text}"
    );
    node.stop().await;
}
