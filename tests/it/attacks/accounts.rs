//! What follows an account: its job uid, its sign-in and its live stream.
//!
//! The attacker is a new member who would inherit a moved user's job uid (and so their files), a
//! stranger probing which accounts exist and are disabled, a member reading other users' edits off
//! the live stream, and a demoted manager whose open stream would keep carrying everyone's jobs.

use crate::support::isolation::{job, job_ids_of, log, IsoNode};
use crate::support::{read_stream_until, true_job, wait_status, TestApp, PASSWORD};
use gpuq::model::Role;
use gpuq::server::db::job_uids::JobUidRange;
use serde_json::json;
use sqlx::PgPool;

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
