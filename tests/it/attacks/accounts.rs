//! What follows an account: its job uid, its disabling, its sign-in and its live stream.
//!
//! The attacker is a new member who would inherit a moved user's job uid (and so their files), a
//! disabled member whose jobs would keep running, a stranger probing which accounts exist and are
//! disabled, a member reading other users' edits off the live stream, a demoted manager whose
//! open stream would keep carrying everyone's jobs, and a disabled or demoted user whose open log
//! follows would keep going.

use crate::support::isolation::{container_of, job, job_ids_of, log, IsoNode};
use crate::support::{read_stream_until, true_job, wait_status, TestApp, PASSWORD};
use axum::body::Body;
use gpuq::model::Role;
use gpuq::server::db::job_uids::JobUidRange;
use gpuq::server::runtime::{Docker, RuntimeError};
use http_body_util::BodyExt;
use serde_json::json;
use sqlx::PgPool;
use std::time::Duration;

async fn user_id(app: &TestApp, name: &str) -> uuid::Uuid {
    app.scalar_of("SELECT id FROM users WHERE username = $1", name)
        .await
}

/// Runs `script` as `bearer`'s job and returns its log; the job must succeed.
async fn run_ok(app: &TestApp, bearer: &str, script: &str) -> String {
    let id = app.submit_ok(bearer, job(script, &[])).await;
    let v = wait_status(app, bearer, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    log(app, bearer, id).await
}

/// Reads a live stream until it ends (panics if it is still open after `secs`); returns what it
/// carried meanwhile.
async fn read_until_closed(body: &mut Body, secs: u64) -> String {
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .unwrap_or_else(|_| panic!("the stream is still open after {secs} s; got: {seen}"));
        match frame {
            None => return seen,
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    seen.push_str(&String::from_utf8_lossy(&data));
                }
            }
            Some(Err(e)) => panic!("the stream failed instead of ending: {e}"),
        }
    }
}

/// Alice's jobs ran as a uid of the range; an admin moves her to her site uid. The next new user
/// must not get her old uid (the files her jobs wrote belong to it) nor share her gid, and no
/// admin edit can hand the old uid to someone else either. (Before: bob got 270000, and both
/// had gid 270000.)
#[sqlx::test(migrations = false)]
async fn a_job_uid_once_given_is_never_given_again(pool: PgPool) {
    let (app, admin, alice) = TestApp::with_admin_and_member(pool, "alice").await;
    let range = JobUidRange {
        first: 270_000,
        last: 270_001,
    };
    let node = IsoNode::start(&app, "acct-uids", vec![], range).await;
    let text = run_ok(&app, &alice, "echo ids=$(id -u):$(id -g)").await;
    assert!(text.contains("ids=270000:270000"), "{text}");
    let (old_uid, old_gid) = (270_000, 270_000);

    let a = user_id(&app, "alice").await;
    let moved = app.update_user(&admin, a, json!({ "job_uid": 4242 })).await;
    assert_eq!(moved.status, 204, "{}", moved.text);
    assert_eq!(
        job_ids_of(&app, "alice").await,
        (Some(4242), Some(4242)),
        "the gid moves with the uid"
    );

    let bob = app.bearer("bob", Role::Member).await;
    let text = run_ok(&app, &bob, "echo ids=$(id -u):$(id -g)").await;
    let (uid, gid) = job_ids_of(&app, "bob").await;
    let (uid, gid) = (uid.unwrap(), gid.unwrap());
    assert_ne!(uid, old_uid, "bob got alice's old uid: {text}");
    assert_ne!(gid, old_gid, "bob shares alice's old gid: {text}");
    assert_eq!((uid, gid), (270_001, 270_001));
    assert!(text.contains("ids=270001:270001"), "{text}");

    // Not by an admin's hand either: the old uid is refused, naming whose it was.
    let b = user_id(&app, "bob").await;
    let r = app
        .update_user(&admin, b, json!({ "job_uid": old_uid }))
        .await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(
        r.text.contains("job_uid") && r.text.contains("alice"),
        "{}",
        r.text
    );
    // Alice herself may go back to it.
    let back = app
        .update_user(&admin, a, json!({ "job_uid": old_uid }))
        .await;
    assert_eq!(back.status, 204, "{}", back.text);

    // The range is spent: a third user's job fails rather than reuse either uid.
    let carol = app.bearer("carol", Role::Member).await;
    let id = app.submit_ok(&carol, job("id -u", &[])).await;
    let v = wait_status(&app, &carol, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(job_ids_of(&app, "carol").await, (None, None));
    // The record of given uids is append-only.
    let erase = sqlx::query("DELETE FROM job_uids_issued")
        .execute(&app.pool)
        .await;
    assert!(erase.is_err(), "the record of given uids was erased");
    node.stop().await;
}

/// A member has a job running in a container and another waiting; an admin disables her. Her
/// running job is stopped and ends with reason `user_disabled`, its container is removed, her
/// waiting job is held (no pass admits it, and it says why), and her open live stream ends.
/// Enabling her again lets the held job run. (Before: the job kept running.)
#[sqlx::test(migrations = false)]
async fn disabling_a_member_stops_her_jobs_holds_her_queue_and_ends_her_stream(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "dora").await;
    // One job without GPUs at a time on the node, so the second waits for the first.
    app.set_policy(&admin, json!({ "max_cpu_jobs_per_node": 1 }))
        .await;
    let node = IsoNode::start(&app, "acct-disable", vec![], Default::default()).await;
    let running = app
        .submit_ok(&member, job("echo started; sleep 600", &[]))
        .await;
    wait_status(&app, &admin, running, &["running"], 60).await;
    let waiting = app.submit_ok(&member, job("echo second", &[])).await;
    let container = container_of(&app, running).await.expect("a container");
    let mut stream = app.live_stream(&member).await;

    let dora = user_id(&app, "dora").await;
    let r = app
        .update_user(&admin, dora, json!({ "disabled": true }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);

    read_until_closed(&mut stream, 20).await;
    let ended = wait_status(
        &app,
        &admin,
        running,
        &["succeeded", "failed", "cancelled"],
        30,
    )
    .await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["status_reason"], "user_disabled", "{ended}");
    assert_eq!(ended["stop_cause"], "user_disabled", "{ended}");
    let docker = Docker::connect().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match docker.inspect(&container).await {
            Err(RuntimeError::NotFound(_)) => break,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "the container is still there: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The node's place is free now; several passes later the held job still waits, saying why.
    let passes: i64 = app.scalar("SELECT passes FROM scheduler_state").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while app
        .scalar::<i64>("SELECT passes FROM scheduler_state")
        .await
        < passes + 3
    {
        assert!(tokio::time::Instant::now() < deadline, "no pass ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = app.job(&admin, waiting).await;
    assert_eq!(held["status"], "queued", "{held}");
    assert!(
        held["wait_reason"]
            .as_str()
            .is_some_and(|r| r.contains("user_disabled")),
        "{held}"
    );
    let kinds: Vec<String> = app
        .column_of(
            "SELECT kind FROM job_events WHERE job_id = $1 ORDER BY id",
            waiting,
        )
        .await;
    assert!(kinds.contains(&"held".to_owned()), "{kinds:?}");

    let r = app
        .update_user(&admin, dora, json!({ "disabled": false }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let done = wait_status(&app, &admin, waiting, &["succeeded", "failed"], 60).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    node.stop().await;
}

/// A job admitted (its cards reserved) but not yet started when its owner is disabled goes back
/// to the queue with its cards released, and no pass admits it until the owner is enabled.
#[sqlx::test(migrations = false)]
async fn a_disabled_members_admitted_job_gives_its_card_back_and_waits(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "acct-admitted").await;
    let (admin, member) = app.admin_and_member("ezra").await;
    let id = app.submit_ok(&member, true_job(1000)).await;
    app.pass().await;
    assert_eq!(app.job(&admin, id).await["status"], "admitted");
    let ezra = user_id(&app, "ezra").await;
    let r = app
        .update_user(&admin, ezra, json!({ "disabled": true }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let v = app.job(&admin, id).await;
    assert_eq!(v["status"], "queued", "{v}");
    assert!(crate::support::ledger_violations(&app.pool)
        .await
        .is_empty());
    let reserved: i64 = app
        .scalar("SELECT sum(reserved_mib)::bigint FROM gpus")
        .await;
    assert_eq!(reserved, 0, "the card was given back");
    app.pass().await;
    assert_eq!(app.job(&admin, id).await["status"], "queued");
    app.update_user(&admin, ezra, json!({ "disabled": false }))
        .await;
    app.pass().await;
    assert_eq!(app.job(&admin, id).await["status"], "admitted");
    assert!(crate::support::ledger_violations(&app.pool)
        .await
        .is_empty());
}

/// A stranger who knows a password (a former colleague's) must not learn that the account
/// exists and is disabled: its right password is answered exactly as a wrong one, by the API and
/// by the sign-in page. Only the audit trail says why. (Before: 403 "this account is disabled".)
#[sqlx::test(migrations = false)]
async fn a_disabled_accounts_right_password_answers_like_a_wrong_one(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    let gone = app.add_user("gone", Role::Member).await;
    let r = app
        .update_user(&admin, gone, json!({ "disabled": true }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);

    let right = app.token("gone", PASSWORD).await;
    let wrong = app.token("gone", "not the password").await;
    let unknown = app.token("nobody", PASSWORD).await;
    assert_eq!(right.status, 401, "{}", right.text);
    assert_eq!(right.status, wrong.status);
    assert_eq!(right.text, wrong.text);
    assert_eq!(right.text, unknown.text);

    let page_right = app.login_reply("gone", PASSWORD, None).await;
    let page_wrong = app.login_reply("gone", "not the password", None).await;
    assert_eq!(page_right.status, page_wrong.status);
    assert_eq!(page_right.text, page_wrong.text);
    assert!(page_right.session_cookie().is_none());

    let sql = "SELECT count(*) FROM audit_events \
               WHERE kind = 'auth.sign_in_failed' AND detail->>'reason' = $1";
    let disabled: i64 = app.scalar_of(sql, "disabled").await;
    assert_eq!(disabled, 2, "the trail tells the admin why");

    // Enabled again, the same password works.
    app.update_user(&admin, gone, json!({ "disabled": false }))
        .await;
    assert_eq!(app.token("gone", PASSWORD).await.status, 201);
}

/// An admin edits alice (role, disabling, job uid). Bob, a member, must not read that off his
/// live stream; the admins' streams carry it.
#[sqlx::test(migrations = false)]
async fn a_members_stream_does_not_carry_other_users_edits(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "acct-edits").await;
    let admin = app.bearer("root", Role::Admin).await;
    let bob = app.bearer("bob", Role::Member).await;
    let alice = app.add_user("alice", Role::Member).await;
    let (stop, notifier) = app.start_notifier();
    let mut bobs = app.live_stream(&bob).await;
    let mut admins = app.live_stream(&admin).await;
    for edit in [
        json!({ "role": "manager" }),
        json!({ "disabled": true }),
        json!({ "job_uid": 5151 }),
    ] {
        let r = app.update_user(&admin, alice, edit).await;
        assert_eq!(r.status, 204, "{}", r.text);
    }
    let heard = read_stream_until(&mut admins, "alice", 10).await;
    assert!(heard.contains("user.update"), "{heard}");
    // Bob's own job is the probe: every edit was announced before it.
    let his = app.submit_ok(&bob, true_job(1000)).await;
    let seen = read_stream_until(&mut bobs, &his.to_string(), 10).await;
    assert!(
        !seen.contains("alice") && !seen.contains("user."),
        "another user's edit on a member's stream: {seen}"
    );
    stop.send(true).unwrap();
    notifier.await.unwrap();
}

/// Mel, a manager, has her live stream open and sees alice's jobs. An admin demotes her to
/// member: from then on the same open stream carries only `queue` for alice's jobs.
#[sqlx::test(migrations = false)]
async fn a_demoted_managers_open_stream_stops_carrying_others_jobs(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "acct-demote").await;
    let admin = app.bearer("root", Role::Admin).await;
    let alice = app.bearer("alice", Role::Member).await;
    let mel = app.bearer("mel", Role::Manager).await;
    let (stop, notifier) = app.start_notifier();
    let mut mels = app.live_stream(&mel).await;
    let first = app.submit_ok(&alice, true_job(1000)).await;
    read_stream_until(&mut mels, &first.to_string(), 10).await;

    let m = user_id(&app, "mel").await;
    let r = app
        .update_user(&admin, m, json!({ "role": "member" }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    // Her own edit reaches her (her pages refetch what a member sees).
    read_stream_until(&mut mels, "user.update", 10).await;

    let second = app.submit_ok(&alice, true_job(1000)).await;
    let seen = read_stream_until(&mut mels, "event: queue", 10).await;
    let own = app.submit_ok(&mel, true_job(1000)).await;
    let seen = seen + &read_stream_until(&mut mels, &own.to_string(), 10).await;
    assert!(
        !seen.contains(&second.to_string()),
        "a demoted manager's stream carried another member's job: {seen}"
    );
    stop.send(true).unwrap();
    notifier.await.unwrap();
}

/// Opens a follow of job `id`'s log as `bearer`.
async fn follow(app: &TestApp, bearer: &str, id: uuid::Uuid) -> Body {
    let path = format!("/api/v1/jobs/{id}/logs?follow=true");
    let (status, body) = app.stream(&path, bearer).await;
    assert_eq!(status, 200, "following {id}");
    body
}

/// Dora follows her own waiting job's log; Mel and Max, managers, follow Alice's. An admin
/// disables Dora and Mel and demotes Max to member: each of their follows ends, while the jobs
/// wait on and an admin's follow of the same log stays open. (Before: every follow stayed open
/// until its job ended, and a disabled member's held job never ends.)
#[sqlx::test(migrations = false)]
async fn a_disabled_or_demoted_users_log_follows_end(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "acct-follow").await;
    let admin = app.bearer("root", Role::Admin).await;
    let alice = app.bearer("alice", Role::Member).await;
    let dora = app.bearer("dora", Role::Member).await;
    let mel = app.bearer("mel", Role::Manager).await;
    let max = app.bearer("max", Role::Manager).await;
    let (stop, notifier) = app.start_notifier();
    // The notifier listens once a live stream hears its probe.
    let _events = app.live_stream(&admin).await;
    let hers = app.submit_ok(&alice, true_job(1000)).await;
    let own = app.submit_ok(&dora, true_job(1000)).await;
    let mut doras = follow(&app, &dora, own).await;
    let mut mels = follow(&app, &mel, hers).await;
    let mut maxs = follow(&app, &max, hers).await;
    let mut admins = follow(&app, &admin, hers).await;

    for (name, edit, body) in [
        ("dora", json!({ "disabled": true }), &mut doras),
        ("mel", json!({ "disabled": true }), &mut mels),
        ("max", json!({ "role": "member" }), &mut maxs),
    ] {
        let id = user_id(&app, name).await;
        let r = app.update_user(&admin, id, edit).await;
        assert_eq!(r.status, 204, "{}", r.text);
        read_until_closed(body, 10).await;
    }
    // The follows ended for their viewers, not because the jobs did.
    for id in [hers, own] {
        assert_eq!(app.job(&admin, id).await["status"], "queued");
    }
    let still = tokio::time::timeout(Duration::from_millis(500), admins.frame()).await;
    assert!(still.is_err(), "the admin's follow ended too: {still:?}");
    stop.send(true).unwrap();
    notifier.await.unwrap();
}

/// The account and subordinate-id files of a typical shared host: system accounts, a hundred
/// people with the accounts and rootless-container ranges `useradd` gives them (65536 ids each
/// from 100000 in `/etc/subuid` and `/etc/subgid`), `nobody`.
fn typical_host(file: &str) -> Option<String> {
    let people = 1000..1100u32;
    let text = match file {
        "/etc/passwd" => {
            let mut t = "root:x:0:0::/root:/bin/sh\ndaemon:x:1:1::/:/usr/sbin/nologin\n\
                         postgres:x:108:114::/var/lib/postgresql:/bin/bash\n"
                .to_string();
            for uid in people {
                t.push_str(&format!("u{uid}:x:{uid}:{uid}::/home/u{uid}:/bin/bash\n"));
            }
            t + "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"
        }
        "/etc/group" => {
            let mut t = "root:x:0:\ndocker:x:999:\n".to_string();
            for gid in people {
                t.push_str(&format!("u{gid}:x:{gid}:\n"));
            }
            t + "nogroup:x:65534:\n"
        }
        "/etc/subuid" | "/etc/subgid" => people
            .enumerate()
            .map(|(i, uid)| format!("u{uid}:{}:65536\n", 100_000 + 65_536 * i as u64))
            .collect(),
        _ => return None,
    };
    Some(text)
}

/// On a typical host the uids jobs get by default are no one else's. Before, the default
/// 200000-299999 was also what `useradd` gave the second and third people for their rootless
/// containers (`u1001:165536:65536`, `u1002:231072:65536`): a member's job ran as uid 200000,
/// which is uid 34464 inside u1001's podman containers, so each owned the other's files. The
/// doctor finds such clashes; the default range (what `gpuq serve` and the doctor use without the
/// flag) has none, and fits the 31 bits uids are safe in.
#[test]
fn the_default_job_uid_range_is_no_one_elses_on_a_typical_host() {
    use clap::Parser;
    use gpuq::server::cli::{Cli, Command};
    use gpuq::server::doctor::uids::clashes;

    let before: Vec<String> = clashes(JobUidRange::BEFORE, typical_host)
        .iter()
        .map(|c| format!("{} in {}", c.entry, c.file))
        .collect();
    assert!(
        before.contains(&"u1001 165536-231071 in /etc/subuid".to_string()),
        "{before:?}"
    );
    let found = clashes(JobUidRange::DEFAULT, typical_host);
    assert!(found.is_empty(), "the default range clashes: {found:?}");
    const { assert!(JobUidRange::DEFAULT.last < 1 << 31) };
    // The default is what `gpuq serve` (and so the doctor) uses without the flag.
    let Command::Serve(serve) = Cli::try_parse_from(["gpuq", "serve"]).unwrap().command else {
        panic!("not `gpuq serve`");
    };
    assert_eq!(
        serve.job_uid_range.parse::<JobUidRange>(),
        Ok(JobUidRange::DEFAULT)
    );
}

/// An installation upgraded from the old default range: alice's jobs ran as uid 200000 and keep
/// it (her files on shared folders stay hers); bob, new, gets the first uid of the new default.
#[sqlx::test(migrations = false)]
async fn an_upgraded_installation_keeps_the_uids_it_gave(pool: PgPool) {
    use gpuq::server::db::job_uids;
    let (app, _admin, alice) = TestApp::with_admin_and_member(pool, "alice").await;
    let bob = app.bearer("bob", Role::Member).await;
    let hers = app.submit_ok(&alice, job("true", &[])).await;
    let his = app.submit_ok(&bob, job("true", &[])).await;
    // What the earlier gpuq allocated for her first job.
    let before = job_uids::for_job(&app.pool, hers, JobUidRange::BEFORE)
        .await
        .unwrap();
    assert_eq!(before.map(|i| i.uid), Some(200_000));

    let range = JobUidRange::DEFAULT;
    let now = job_uids::for_job(&app.pool, hers, range).await.unwrap();
    assert_eq!(now, before, "alice's uid moved with the default");
    let new = job_uids::for_job(&app.pool, his, range).await.unwrap();
    assert_eq!(
        new.map(|i| (i.uid, i.gid)),
        Some((range.first, range.first))
    );
}
