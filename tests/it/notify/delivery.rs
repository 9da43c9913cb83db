//! Deliveries that arrive: a failure's signed webhook and mail, retries with one key, a receiver
//! that never answers, a `kill -9` between send and mark, and the trigger's rows.

use super::*;
use crate::support::{api_as_admin, json_of, post_job, Node, Serve};
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};

#[sqlx::test(migrations = false)]
async fn a_failing_job_sends_a_signed_webhook_and_a_mail_and_a_success_nothing(pool: PgPool) {
    let receiver = Receiver::start(Vec::new()).await;
    let sink = SmtpSink::start().await;
    let app = TestApp::new(pool).await;
    ensure_sim_devices(1).unwrap();
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "n1").await;
    let admin = app.bearer("root", Role::Admin).await;
    app.set_policy(
        &admin,
        json!({ "webhook_allowlist": [receiver.addr.to_string()] }),
    )
    .await;
    let member = app.bearer("alice", Role::Member).await;
    let r = put(
        &app,
        &member,
        json!({ "email": "alice@example.org", "on": ["failed"],
                "webhooks": [{ "url": receiver.url(), "format": "generic", "secret": SECRET }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let node = Node::start(&app, "n1", LaunchMode::Fenced).await;
    let worker = Worker::start(&app, quick(Some(sink.config())), false);

    // A success first: alice did not ask for `succeeded`, so it writes nothing and sends nothing.
    let ok = app
        .submit_ok(
            &member,
            json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 }),
        )
        .await;
    crate::support::wait_status(&app, &member, ok, &["succeeded"], 60).await;
    let script = "echo starting; echo the-last-words >&2; exit 3";
    let spec = json!({ "image": IMAGE, "command": ["sh", "-c", script], "min_vram_mb": 1000,
                       "name": "doomed" });
    let bad = app.submit_ok(&member, spec).await;

    let seen = receiver.wait_for(1, 60).await;
    let hook = &seen[0];
    assert!(
        verify(hook, SECRET),
        "the signature does not verify: {hook:?}"
    );
    assert!(!verify(hook, "another-secret-entirely"), "any key verifies");
    let body = hook.json();
    assert_eq!(body["event"], "failed", "{body}");
    assert_eq!(body["job"]["id"], bad.to_string());
    assert_eq!(body["job"]["name"], "doomed");
    assert_eq!(body["job"]["exit_code"], 3, "{body}");
    assert!(
        body["job"]["reason"].as_str().is_some(),
        "no reason: {body}"
    );
    assert!(
        body["log_tail"]
            .as_str()
            .unwrap()
            .contains("the-last-words"),
        "{body}"
    );
    assert_eq!(
        body["job"]["url"],
        format!("https://gpuq.example.org/jobs/{bad}")
    );
    let key = hook.header("idempotency-key");
    assert_eq!(body["idempotency_key"], key);
    assert_eq!(hook.header("x-gpuq-event"), "failed");

    let mails = sink.wait_for(1, 30).await;
    let mail = &mails[0];
    assert!(mail.contains("Subject: [gpuq] job doomed failed"), "{mail}");
    assert!(mail.contains("Exit code: 3"), "{mail}");
    assert!(mail.contains("the-last-words"), "{mail}");
    assert!(mail.contains(&format!("/jobs/{bad}")), "{mail}");
    assert!(mail.contains("X-RcptTo: alice@example.org"), "{mail}");
    let d = deliveries_until(&app, &member, 30, |d| {
        d.as_array().unwrap().iter().all(|x| x["state"] == "sent")
    })
    .await;
    assert_eq!(d.as_array().unwrap().len(), 2, "{d}");
    let mail_key = d
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["channel"] == "email")
        .unwrap()["idempotency_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(mail.contains(&format!("<{mail_key}@gpuq>")), "{mail}");

    let for_success: i64 =
        sqlx::query_scalar("SELECT count(*) FROM notification_outbox WHERE job_id = $1")
            .bind(ok)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        for_success, 0,
        "a success alice did not ask for was written"
    );
    assert_eq!(receiver.seen().len(), 1, "more than the failure was posted");
    worker.stop().await;
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_500_is_retried_with_the_same_idempotency_key_until_a_200(pool: PgPool) {
    let receiver = Receiver::start(vec![Answer::Status(500)]).await;
    let (app, _admin, member) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    let r = put(
        &app,
        &member,
        json!({ "on": ["cancelled"], "webhooks": [{ "url": receiver.url(), "format": "slack" }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let worker = Worker::start(&app, quick(None), true);
    let job = cancelled_job(&app, &member).await;
    let seen = receiver.wait_for(2, 30).await;
    assert_eq!(
        seen[0].header("idempotency-key"),
        seen[1].header("idempotency-key")
    );
    assert_eq!(seen[0].body, seen[1].body, "a retry sent another message");
    let text = seen[1].json()["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains(&job.to_string()) && text.contains("cancelled"),
        "{text}"
    );
    let d = deliveries_until(&app, &member, 10, |d| d[0]["state"] == "sent").await;
    assert_eq!(d[0]["attempts"], 2, "{d}");
    assert!(d[0]["last_error"].as_str().unwrap().contains("500"), "{d}");
    assert_eq!(d[0]["idempotency_key"], seen[0].header("idempotency-key"));
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_receiver_that_never_answers_ends_failed_with_the_reason(pool: PgPool) {
    let receiver = Receiver::start(vec![Answer::Hang; 10]).await;
    let (app, _admin, member) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    let r = put(
        &app,
        &member,
        json!({ "on": ["cancelled"], "webhooks": [{ "url": receiver.url() }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let worker = Worker::start(&app, quick(None), true);
    cancelled_job(&app, &member).await;
    let d = deliveries_until(&app, &member, 30, |d| d[0]["state"] == "failed").await;
    assert_eq!(
        d[0]["attempts"], 3,
        "not the bounded number of attempts: {d}"
    );
    let why = d[0]["last_error"].as_str().unwrap();
    assert!(why.contains("no answer in time"), "{why}");
    assert_eq!(receiver.seen().len(), 3);
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn an_outbox_row_survives_kill9_between_send_and_mark_and_is_sent_again(pool: PgPool) {
    // The first request is taken in and never answered: gpuq is killed while it waits, so it
    // sent the message but never marked it. The restarted process sends it again, same key.
    let receiver = Receiver::start(vec![Answer::Hang]).await;
    let app = TestApp::new(pool).await;
    let serve = Serve::new(
        &app.pool,
        &["--notify-lease-s", "2", "--notify-retry-first-ms", "100"],
    );
    let first = serve.start("a.log").await;
    let (client, admin) = api_as_admin(serve.port).await;
    let base = serve.base();
    let policy = json_of(
        client
            .put(format!("{base}/api/v1/settings/launch-policy"))
            .header("authorization", &admin)
            .json(&json!({ "webhook_allowlist": [receiver.addr.to_string()] })),
    )
    .await;
    assert_eq!(
        policy["webhook_allowlist"][0],
        receiver.addr.to_string(),
        "{policy}"
    );
    let saved = json_of(
        client
            .put(format!("{base}/api/v1/me/notifications"))
            .header("authorization", &admin)
            .json(&json!({ "on": ["cancelled"],
                           "webhooks": [{ "url": receiver.url(), "secret": SECRET }] })),
    )
    .await;
    assert_eq!(saved["webhooks"][0]["secret_set"], true, "{saved}");
    let spec = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 });
    let job = post_job(&client, serve.port, &admin, &spec).await;
    let cancel = client
        .post(format!("{base}/api/v1/jobs/{job}/cancel"))
        .header("authorization", &admin)
        .send()
        .await
        .unwrap();
    assert!(cancel.status().is_success());
    let seen = receiver.wait_for(1, 30).await;
    first.kill9();
    let state: (String, i32) =
        sqlx::query_as("SELECT state, attempts FROM notification_outbox WHERE job_id = $1")
            .bind(job)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        state,
        ("pending".to_owned(), 1),
        "the row was lost or marked"
    );

    let _second = serve.start("b.log").await;
    let again = receiver.wait_for(2, 30).await;
    assert_eq!(
        seen[0].header("idempotency-key"),
        again[1].header("idempotency-key")
    );
    assert!(verify(&again[1], SECRET));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (state, attempts): (String, i32) =
            sqlx::query_as("SELECT state, attempts FROM notification_outbox WHERE job_id = $1")
                .bind(job)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        if state == "sent" {
            assert_eq!(attempts, 2);
            break;
        }
        assert!(Instant::now() < deadline, "never marked sent: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(receiver.seen().len(), 2, "sent more than twice");
}

/// The outbox rows a status change of `job` wrote: (event, channel).
async fn rows_of(pool: &PgPool, job: Uuid) -> Vec<(String, String)> {
    sqlx::query_as("SELECT event, channel FROM notification_outbox WHERE job_id = $1 ORDER BY id")
        .bind(job)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Moves a job as the lifecycle would (the trigger sees only the row's change).
async fn set(pool: &PgPool, job: Uuid, sql: &str) {
    sqlx::query(&format!("UPDATE jobs SET {sql} WHERE id = $1"))
        .bind(job)
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_trigger_writes_one_row_per_place_for_exactly_the_events_asked_for(pool: PgPool) {
    let (app, _admin, member) = app_with(pool, "n1", &["127.0.0.1:9".into()]).await;
    let r = put(
        &app,
        &member,
        json!({ "email": "alice@example.org", "on": ["failed", "started_after_wait"],
                "started_after_wait_minutes": 5,
                "webhooks": [{ "url": "http://127.0.0.1:9/a" }, { "url": "http://127.0.0.1:9/b", "format": "slack" }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let spec = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 1000 });

    // Started after 10 minutes of waiting (more than 5): told, to the mail and both webhooks.
    let late = app.submit_ok(&member, spec.clone()).await;
    set(
        &app.pool,
        late,
        "created_at = now() - interval '10 minutes'",
    )
    .await;
    set(&app.pool, late, "status = 'running', started_at = now()").await;
    let rows = rows_of(&app.pool, late).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter().all(|(e, _)| e == "started_after_wait"),
        "{rows:?}"
    );
    // Its success was not asked for: nothing more.
    set(&app.pool, late, "status = 'succeeded', finished_at = now()").await;
    assert_eq!(rows_of(&app.pool, late).await.len(), 3);

    // Started after a short wait: not told.
    let quick_start = app.submit_ok(&member, spec.clone()).await;
    set(
        &app.pool,
        quick_start,
        "status = 'running', started_at = now()",
    )
    .await;
    assert!(rows_of(&app.pool, quick_start).await.is_empty());
    // Stopped for VRAM overuse: a failure of its own kind, heard by who asked for `failed`.
    set(
        &app.pool,
        quick_start,
        "status = 'failed', stop_cause = 'vram_overuse', finished_at = now()",
    )
    .await;
    let rows = rows_of(&app.pool, quick_start).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|(e, _)| e == "vram_overuse"), "{rows:?}");
    assert_eq!(
        rows.iter().filter(|(_, c)| c == "email").count(),
        1,
        "{rows:?}"
    );

    // A cancel (not asked for) and another user's failure (no settings): nothing.
    let cancelled = cancelled_job(&app, &member).await;
    assert!(rows_of(&app.pool, cancelled).await.is_empty());
    let bob = app.bearer("bob", Role::Member).await;
    let his = app.submit_ok(&bob, spec).await;
    set(&app.pool, his, "status = 'failed', finished_at = now()").await;
    assert!(rows_of(&app.pool, his).await.is_empty());
}

/// A relay as a company runs one: STARTTLS required, AUTH required (over TLS only), its
/// certificate signed by the company's own CA, which the admin gives gpuq (`--smtp-ca-file`).
/// With the right password the mail goes through encrypted; a wrong password, plain text, or the
/// relay's certificate without its CA (a stranger on the relay's address) gets no mail through,
/// and each delivery ends `failed` saying why.
#[sqlx::test(migrations = false)]
async fn a_relay_that_requires_starttls_and_auth_takes_the_mail_and_nothing_less(pool: PgPool) {
    let relay = StrictRelay::start("gpuq-relay", "relay-password-1").await;
    let (app, _admin, member) = app_with(pool, "n1", &[]).await;
    let r = put(
        &app,
        &member,
        json!({ "email": "alice@example.org", "on": ["cancelled"] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let refused = [
        (
            "a wrong password",
            relay.config(SmtpTls::StartTls, Some(("gpuq-relay", "wrong")), true),
        ),
        (
            "plain text",
            relay.config(
                SmtpTls::None,
                Some(("gpuq-relay", "relay-password-1")),
                true,
            ),
        ),
        (
            "a certificate gpuq was not told to trust",
            relay.config(
                SmtpTls::StartTls,
                Some(("gpuq-relay", "relay-password-1")),
                false,
            ),
        ),
    ];
    for (what, cfg) in refused {
        let worker = Worker::start(&app, quick(Some(cfg)), true);
        let job = cancelled_job(&app, &member).await;
        let d = deliveries_until(&app, &member, 60, |d| {
            d.as_array()
                .unwrap()
                .iter()
                .any(|x| x["job_id"] == job.to_string() && x["state"] == "failed")
        })
        .await;
        let row = d
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["job_id"] == job.to_string())
            .unwrap()
            .clone();
        assert!(
            row["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("SMTP relay")),
            "{what}: {row}"
        );
        worker.stop().await;
        assert!(relay.mails().is_empty(), "{what}: a mail got through");
    }
    let worker = Worker::start(
        &app,
        quick(Some(relay.config(
            SmtpTls::StartTls,
            Some(("gpuq-relay", "relay-password-1")),
            true,
        ))),
        true,
    );
    let job = cancelled_job(&app, &member).await;
    deliveries_until(&app, &member, 60, |d| {
        d.as_array()
            .unwrap()
            .iter()
            .any(|x| x["job_id"] == job.to_string() && x["state"] == "sent")
    })
    .await;
    let mails = relay.mails();
    assert_eq!(mails.len(), 1, "{mails:?}");
    assert!(mails[0].contains(&format!("/jobs/{job}")), "{}", mails[0]);
    assert!(
        mails[0].contains("X-RcptTo: alice@example.org"),
        "{}",
        mails[0]
    );
    worker.stop().await;
}
