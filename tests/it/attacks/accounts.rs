//! What follows an account: its job uid and its sign-in.
//!
//! The attacker is a new member who would inherit a moved user's job uid (and so their files), and
//! a stranger probing which accounts exist and are disabled.

use crate::support::isolation::{job, job_ids_of, log, IsoNode};
use crate::support::{wait_status, TestApp, PASSWORD};
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
