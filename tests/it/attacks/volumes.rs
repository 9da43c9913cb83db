//! The start race on volumes: runc resolves a bind's source path when it mounts, after gpuq's
//! check, so whoever can rename an entry on that path can swap the checked folder for a symlink in
//! between. A member's own running job can do that to its own tree thousands of times a second.

use crate::support::docker::docker_cli;
use crate::support::isolation::{container_of, job, log, IsoNode, IMAGE};
use crate::support::{wait_status, TestApp};
use serde_json::json;
use sqlx::PgPool;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Launches of jobs that mount the flipping folder (the issue asks for at least 200).
const FLIP_LAUNCHES: usize = 200;
/// Launches of jobs that mount their own (locked) folder while the flip goes on.
const OWN_LAUNCHES: usize = 60;

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A container, removed when dropped (a failed assertion included).
struct Flipper(String);

impl Drop for Flipper {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .output();
    }
}

/// A container outside gpuq, as a job uid, with `dir` mounted at `/t`, flipping `/t/flip` between
/// the real folder and a symlink to `/` as fast as it can (a member's own running job could do the
/// same; this one needs no launch of its own to be in place before the others).
fn flipper(dir: &Path) -> Flipper {
    let script = "cd /t; while :; do busybox mv flip real.d; busybox ln -s / flip; busybox rm flip; busybox mv real.d flip; done";
    Flipper(docker_cli(&[
        "run",
        "-d",
        "--network",
        "none",
        "--user",
        "250123:250123",
        "--label",
        "gpuq.test=flipper",
        "--mount",
        &format!("type=bind,source={},target=/t", dir.display()),
        IMAGE,
        "sh",
        "-c",
        script,
    ]))
}

/// The member's folder `alice` holds `flip`, a folder with a marker. At submit only root can
/// change `alice`, so the jobs that mount `alice/flip` are accepted and queue. Then `alice` becomes
/// writable by others (as if its owner's job could rename in it) and a job flips `alice/flip`
/// between the folder and a symlink to `/` without pause. 200 launches of jobs that mount the
/// flipping path, and 60 of jobs that mount `alice` itself, follow: none may see anything but
/// the folder that was checked. The flipping path is refused at launch every time (its folder
/// can be changed by others); `alice` is mounted every time, and each job sees its own marker.
#[sqlx::test(migrations = false)]
async fn no_launch_mounts_anything_but_the_folder_checked_while_a_job_flips_it(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let root = tempfile::tempdir().unwrap();
    let scratch = root.path().join("scratch");
    let alice = scratch.join("alice");
    let flip = alice.join("flip");
    std::fs::create_dir_all(&flip).unwrap();
    for d in [&scratch, &alice] {
        chmod(d, 0o755);
    }
    chmod(&flip, 0o777);
    std::fs::write(flip.join("marker"), "own-folder-7e1\n").unwrap();
    std::fs::write(alice.join("marker"), "alice-folder-3c9\n").unwrap();
    let allow = json!({
        "volume_allowlist": [{ "path": scratch.to_str().unwrap() }],
        "max_queued_per_user": 1000,
    });
    app.set_policy(&admin, allow).await;

    let show = "cat /data/marker; ls /data; echo end-of-listing";
    let flip_vol = [format!("{}:/data", flip.display())];
    let mut flipping = Vec::new();
    for _ in 0..FLIP_LAUNCHES {
        flipping.push(app.submit_ok(&member, job(show, &flip_vol)).await);
    }
    // Now `alice` can be changed by others, and the flip starts.
    chmod(&alice, 0o777);
    let flipper = flipper(&alice);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let own_vol = [format!("{}:/data", alice.display())];
    let mut own = Vec::new();
    for _ in 0..OWN_LAUNCHES {
        own.push(app.submit_ok(&member, job(show, &own_vol)).await);
    }
    let node = IsoNode::start(&app, "iso-flip", vec![], Default::default()).await;

    let mut refused = 0;
    for id in &flipping {
        let v = wait_status(&app, &member, *id, &["failed", "succeeded"], 300).await;
        if v["status"] == "failed" {
            let reason = v["status_reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains("volumes[0]") && reason.contains("could be swapped"),
                "{reason}"
            );
            assert_eq!(container_of(&app, *id).await, None, "no container was made");
            refused += 1;
        } else {
            let text = log(&app, &member, *id).await;
            assert!(
                !text.contains("bin") && !text.contains("etc"),
                "a launch saw the host root: {text}"
            );
            assert!(
                text.contains("own-folder-7e1"),
                "not its own folder: {text}"
            );
        }
    }
    assert_eq!(
        refused, FLIP_LAUNCHES,
        "every launch of the flipping path is refused"
    );
    for id in &own {
        let v = wait_status(&app, &member, *id, &["failed", "succeeded"], 300).await;
        let text = log(&app, &member, *id).await;
        assert_eq!(v["status"], "succeeded", "{v} {text}");
        assert!(
            text.contains("alice-folder-3c9") && text.contains("end-of-listing"),
            "it saw its own folder: {text}"
        );
        assert!(!text.contains("bin") && !text.contains("etc"), "{text}");
    }
    drop(flipper);
    node.stop().await;
    // The flip never made anything of root's inside the member's tree (dockerd creates a missing
    // `Binds` source as root; gpuq binds as `Mounts`, which refuse a missing source).
    for entry in std::fs::read_dir(&alice).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        assert!(
            ["flip", "real.d", "marker"].contains(&name.to_str().unwrap()),
            "{name:?} appeared in the member's folder"
        );
    }
}

/// A folder below one the member's own job uid owns is refused at submit, naming the folder she
/// could change, so she hears at once and learns what to mount instead.
#[sqlx::test(migrations = false)]
async fn a_folder_inside_one_the_member_can_change_is_refused_at_submit(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let root = tempfile::tempdir().unwrap();
    let scratch = root.path().join("scratch");
    let proj = scratch.join("alice").join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    chmod(&scratch, 0o755);
    nix::unistd::chown(
        &scratch.join("alice"),
        Some(nix::unistd::Uid::from_raw(250_777)),
        None,
    )
    .unwrap();
    let allow = json!({ "volume_allowlist": [{ "path": scratch.to_str().unwrap() }] });
    app.set_policy(&admin, allow).await;
    let r = app
        .api(
            "POST",
            "/api/v1/jobs",
            Some(&member),
            Some(job("ls /data", &[format!("{}:/data", proj.display())])),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("volumes[0]") && r.text.contains("uid 250777"),
        "{}",
        r.text
    );
    // Her own folder itself is fine.
    let ok = job(
        "ls /data",
        &[format!("{}:/data", scratch.join("alice").display())],
    );
    app.submit_ok(&member, ok).await;
}

/// An admin cannot allow a tree that others can change, nor name one through a symlink: what a
/// rule covers could be changed under it.
#[sqlx::test(migrations = false)]
async fn an_allowlist_rule_inside_a_tree_others_can_write_is_refused(pool: PgPool) {
    let (app, admin, _member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let root = tempfile::tempdir().unwrap();
    let open = root.path().join("open");
    let inner = open.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    chmod(&open, 0o777);
    let put = |path: &Path| json!({ "volume_allowlist": [{ "path": path.to_str().unwrap() }] });
    let r = app
        .api(
            "PUT",
            "/api/v1/settings/launch-policy",
            Some(&admin),
            Some(put(&inner)),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("volume_allowlist[0]") && r.text.contains("everyone"),
        "{}",
        r.text
    );
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&open, &link).unwrap();
    let r = app
        .api(
            "PUT",
            "/api/v1/settings/launch-policy",
            Some(&admin),
            Some(put(&link)),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("resolves to"), "{}", r.text);
}

/// The most specific rule wins: a read-only rule for a folder inside a read-write tree holds
/// whichever order the admin wrote them in.
#[sqlx::test(migrations = false)]
async fn a_read_only_rule_inside_a_read_write_tree_holds_in_any_order(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let secure = data.join("secure");
    std::fs::create_dir_all(&secure).unwrap();
    let rules = json!({ "volume_allowlist": [
        { "path": data.to_str().unwrap() },
        { "path": secure.to_str().unwrap(), "read_only": true },
    ]});
    app.set_policy(&admin, rules).await;
    let r = app
        .api(
            "POST",
            "/api/v1/jobs",
            Some(&member),
            Some(job(
                "touch /data/x",
                &[format!("{}:/data", secure.display())],
            )),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("read-only"), "{}", r.text);
}

/// A minimal image: busybox, a `/tmp` of mode 0755 owned by root, and `VOLUME /cache`. Made with
/// `docker import` (nothing is pulled) where the machine has no image of this name and revision
/// yet, and kept: made again on every run, each run would leave the last one behind untagged.
fn minimal_image_with_a_volume() -> &'static str {
    const NAME: &str = "gpuq-test/minimal-volume:latest";
    /// Changed whenever what the image holds changes, so that a kept one of old is made again.
    const REVISION: &str = "1";
    static MADE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        let kept = std::process::Command::new("docker")
            .args([
                "image",
                "inspect",
                "-f",
                "{{index .Config.Labels \"org.gpuq.test-image\"}}",
                NAME,
            ])
            .output()
            .unwrap();
        if kept.status.success() && String::from_utf8_lossy(&kept.stdout).trim() == REVISION {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        chmod(&dir.path().join("tmp"), 0o755);
        std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
        std::os::unix::fs::symlink("busybox", bin.join("sh")).unwrap();
        let tar = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "tar -C {} -c . | docker import --change 'VOLUME /cache' \
                 --change 'LABEL org.gpuq.test-image={REVISION}' - {NAME}",
                dir.path().display()
            ))
            .output()
            .unwrap();
        assert!(tar.status.success(), "{tar:?}");
    });
    NAME
}

/// A non-root job of an image whose `/tmp` is root's 0755 can still write its `/tmp` and `$HOME`,
/// and the image's `VOLUME` gets no anonymous Docker volume (unbounded, on Docker's disk, left
/// behind): a bounded tmpfs the job's uid owns covers it.
#[sqlx::test(migrations = false)]
async fn an_images_tmp_and_declared_volume_are_bounded_tmpfs_the_job_can_write(pool: PgPool) {
    let (app, _admin, member) = TestApp::with_admin_and_member(pool, "mallory").await;
    let image = minimal_image_with_a_volume();
    let node = IsoNode::start(&app, "att-minimal", vec![], Default::default()).await;
    let script = "echo x > /tmp/a && echo tmp-ok; echo y > $HOME/b && echo home-ok; \
                  busybox dd if=/dev/zero of=/cache/big bs=1M count=2 2>/dev/null && echo cache-ok; \
                  busybox grep -E ' /(cache|tmp) ' /proc/mounts; echo listed; busybox sleep 30";
    let spec = json!({ "image": image, "command": ["sh", "-c", script], "gpu_count": 0 });
    let id = app.submit_ok(&member, spec).await;
    wait_status(&app, &member, id, &["running"], 60).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let text = loop {
        let text = log(&app, &member, id).await;
        if text.contains("listed") || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    for want in [
        "tmp-ok",
        "home-ok",
        "cache-ok",
        "tmpfs /cache tmpfs",
        "tmpfs /tmp tmpfs",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let facts = crate::support::isolation::facts_of(&app, id).await;
    assert!(
        facts.mounts.iter().all(|m| m.kind != "volume"),
        "an anonymous volume: {:?}",
        facts.mounts
    );
    crate::support::cancel_and_wait(&app, &member, id).await;
    node.stop().await;
}

/// Docker's data root is often moved off `/var/lib/docker` (to `/data/docker`, say), where an
/// admin may allowlist the tree around it. A member asks for it: submit cannot know this node's
/// Docker, but the runner, which reads `DockerRootDir` when it starts, refuses the launch.
#[sqlx::test(migrations = false)]
async fn a_moved_docker_data_root_is_never_mounted(pool: PgPool) {
    let dockerd = crate::support::nvml::NvidiaDocker::start();
    let tree = dockerd.socket().parent().unwrap().to_path_buf();
    let data_root = tree.join("data");
    assert!(data_root.join("image").exists(), "{}", data_root.display());
    let app = TestApp::with_sim_devices(pool, 2).await;
    let (admin, member) = app.admin_and_member("mallory").await;
    let allow = json!({
        "volume_allowlist": [{ "path": tree.to_str().unwrap() }],
        "network": "none",
    });
    app.set_policy(&admin, allow).await;
    let id = app
        .submit_ok(
            &member,
            job("ls /d/volumes", &[format!("{}:/d", data_root.display())]),
        )
        .await;
    let socket = dockerd.socket().display().to_string();
    let serve =
        crate::support::Serve::runner(&app.pool, "moved-root", &["--docker-socket", &socket]);
    let _server = serve.start("a.log").await;
    let v = wait_status(&app, &member, id, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "failed", "Docker's data root was mounted: {v}");
    let reason = v["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("never mount") && reason.contains(data_root.to_str().unwrap()),
        "{reason}"
    );
    assert_eq!(container_of(&app, id).await, None);
}
