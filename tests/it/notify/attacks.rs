//! What a member might try: webhooks aimed inward (refused at save, at send, and through a
//! redirect), bad settings, and someone else's settings or deliveries.

use super::*;

#[sqlx::test(migrations = false)]
async fn every_forbidden_webhook_target_is_refused_at_save(pool: PgPool) {
    let (app, admin, member) = app_with(pool, "n1", &[]).await;
    sqlx::query(
        "INSERT INTO nodes (name, version, advertise_url, runs_jobs) \
         VALUES ('gpu7', '0', 'http://203.0.113.7:3000', true)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    for url in [
        "http://127.0.0.1/hook",
        "http://127.1.2.3:8080/",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://0.0.0.0:3000/",
        "http://224.0.0.1/",
        "http://[::1]/",
        "http://[fc00::1]/",
        "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://203.0.113.7:9000/",
        "http://2130706433/",
        "http://0x7f.0.0.1/",
        "ftp://example.org/",
        "file:///etc/passwd",
        "http://user:pw@1.1.1.1/",
    ] {
        let r = put(
            &app,
            &member,
            json!({ "on": ["failed"], "webhooks": [{ "url": url }] }),
        )
        .await;
        assert_eq!(r.status, 400, "{url} accepted: {}", r.text);
        assert_eq!(r.json()["field"], "webhooks[0].url", "{url}: {}", r.text);
        assert!(r.text.contains(url), "{url} not named: {}", r.text);
    }
    // The node's own address is refused as such.
    let r = put(
        &app,
        &member,
        json!({ "webhooks": [{ "url": "http://203.0.113.7:9000/" }] }),
    )
    .await;
    assert!(r.text.contains("gpuq node"), "{}", r.text);
    // An admin's allowlist opens exactly what it names.
    app.set_policy(
        &admin,
        json!({ "webhook_allowlist": ["10.0.0.0/8", "127.0.0.1:8080"] }),
    )
    .await;
    for url in ["http://10.0.0.1/", "http://127.0.0.1:8080/x"] {
        let r = put(&app, &member, json!({ "webhooks": [{ "url": url }] })).await;
        assert_eq!(r.status, 200, "{url}: {}", r.text);
    }
    for url in ["http://127.0.0.1:8081/x", "http://192.168.1.1/"] {
        let r = put(&app, &member, json!({ "webhooks": [{ "url": url }] })).await;
        assert_eq!(r.status, 400, "{url}: {}", r.text);
    }
    // A bad allowlist entry is refused, naming it.
    let r = app
        .api(
            "PUT",
            "/api/v1/settings/launch-policy",
            Some(&admin),
            Some(json!({ "webhook_allowlist": ["10.0.0.0/99"] })),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "webhook_allowlist[0]", "{}", r.text);
}

#[sqlx::test(migrations = false)]
async fn settings_are_checked_field_by_field_and_secrets_never_shown(pool: PgPool) {
    let (app, _admin, member) = app_with(pool, "n1", &["127.0.0.1:9".into()]).await;
    for (body, field) in [
        (json!({ "email": "not-an-address" }), "email"),
        (json!({ "email": "a@b@c" }), "email"),
        (json!({ "on": ["exploded"] }), "body"),
        (
            json!({ "started_after_wait_minutes": 0 }),
            "started_after_wait_minutes",
        ),
        (
            json!({ "webhooks": [{ "url": "http://127.0.0.1:9/", "secret": "short" }] }),
            "webhooks[0].secret",
        ),
        (
            json!({ "webhooks": [{ "url": "http://127.0.0.1:9/", "format": "teams" }] }),
            "body",
        ),
    ] {
        let r = put(&app, &member, body.clone()).await;
        assert_eq!(r.status, 400, "{body} accepted: {}", r.text);
        let named = r.json()["field"].as_str().unwrap_or_default().to_owned();
        assert!(
            named == field || (field == "body" && !named.is_empty()),
            "{body}: {}",
            r.text
        );
    }
    let r = put(
        &app,
        &member,
        json!({ "email": "alice@example.org", "on": ["failed", "started_after_wait"],
                "started_after_wait_minutes": 5,
                "webhooks": [{ "url": "http://127.0.0.1:9/", "secret": SECRET }] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains(SECRET), "the secret came back: {}", r.text);
    // Saved again without the secret: it is kept (write-only, not wiped by a re-save).
    let r = put(
        &app,
        &member,
        json!({ "webhooks": [{ "url": "http://127.0.0.1:9/" }], "on": ["failed"] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got = app
        .api("GET", "/api/v1/me/notifications", Some(&member), None)
        .await;
    assert!(
        !got.text.contains(SECRET),
        "the secret is shown: {}",
        got.text
    );
    let v = got.json();
    assert_eq!(v["webhooks"][0]["secret_set"], true, "{v}");
    assert_eq!(v["on"], json!(["failed"]));
    let stored: Option<String> =
        sqlx::query_scalar("SELECT secret FROM notification_webhooks LIMIT 1")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(stored.as_deref(), Some(SECRET));
    let unsigned = app.api("GET", "/api/v1/me/notifications", None, None).await;
    assert_eq!(unsigned.status, 401);
}

#[sqlx::test(migrations = false)]
async fn another_member_cannot_read_or_change_my_settings_or_deliveries(pool: PgPool) {
    let receiver = Receiver::start(Vec::new()).await;
    let (app, _admin, alice) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    let mallory = app.bearer("mallory", Role::Member).await;
    let mine = json!({ "email": "alice@example.org", "on": ["cancelled"],
                       "webhooks": [{ "url": receiver.url(), "secret": SECRET }] });
    assert_eq!(put(&app, &alice, mine).await.status, 200);
    let worker = Worker::start(&app, quick(None), true);
    cancelled_job(&app, &alice).await;
    deliveries_until(&app, &alice, 30, |d| d[0]["state"] == "sent").await;

    // Mallory's view is her own: none of alice's address, URL or deliveries.
    let hers = app
        .api("GET", "/api/v1/me/notifications", Some(&mallory), None)
        .await;
    assert_eq!(hers.status, 200);
    assert!(
        !hers.text.contains("alice") && !hers.text.contains("/hook"),
        "{}",
        hers.text
    );
    let d = deliveries(&app, &mallory).await;
    assert_eq!(d, json!([]), "mallory sees deliveries: {d}");
    // Her own save changes only hers; there is no route that names another user.
    let r = put(
        &app,
        &mallory,
        json!({ "email": "mallory@example.org", "on": ["failed"] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    for path in [
        "/api/v1/users/alice/notifications",
        "/api/v1/me/notifications?user=alice",
    ] {
        let r = app.api("GET", path, Some(&mallory), None).await;
        assert!(!r.text.contains("alice@example.org"), "{path}: {}", r.text);
    }
    let a = app
        .api("GET", "/api/v1/me/notifications", Some(&alice), None)
        .await
        .json();
    assert_eq!(a["email"], "alice@example.org", "{a}");
    assert_eq!(a["webhooks"][0]["url"], receiver.url());
    assert_eq!(
        deliveries(&app, &alice).await.as_array().unwrap().len(),
        2,
        "a mail and a webhook"
    );
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_name_that_resolves_to_loopback_is_refused_at_send(pool: PgPool) {
    let receiver = Receiver::start(Vec::new()).await;
    // Even with the receiver's own address and port allowlisted, a *name* that resolves there is
    // judged by the address it resolves to when the delivery is sent.
    let (app, _admin, member) = app_with(pool, "n1", &[receiver.addr.to_string()]).await;
    assert_eq!(
        put(&app, &member, json!({ "on": ["cancelled"] }))
            .await
            .status,
        200
    );
    // The URL as a name whose DNS changed since it was saved would be: written as stored.
    let by_name = format!("http://localhost:{}/hook", receiver.addr.port());
    let user: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'alice'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO notification_webhooks (user_id, position, url, format) VALUES ($1, 0, $2, 'generic')",
    )
    .bind(user)
    .bind(&by_name)
    .execute(&app.pool)
    .await
    .unwrap();
    let worker = Worker::start(&app, quick(None), true);
    cancelled_job(&app, &member).await;
    let d = deliveries_until(&app, &member, 30, |d| d[0]["state"] == "failed").await;
    let why = d[0]["last_error"].as_str().unwrap();
    assert!(why.contains("loopback"), "{why}");
    assert_eq!(
        d[0]["attempts"], 1,
        "a refused destination is not retried: {d}"
    );
    assert!(receiver.seen().is_empty(), "the request went out");
    worker.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_redirect_is_a_failed_attempt_never_followed_inward(pool: PgPool) {
    // The allowlisted receiver answers every delivery with a redirect to the cloud metadata
    // address: gpuq must not follow it (that would bypass the destination check).
    let receiver = Receiver::start(vec![
        Answer::Redirect(
            "http://169.254.169.254/latest/meta-data/"
        );
        3
    ])
    .await;
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
    let why = d[0]["last_error"].as_str().unwrap();
    assert!(why.contains("redirects are not followed"), "{why}");
    assert_eq!(
        receiver.seen().len(),
        3,
        "every attempt reached the receiver only"
    );
    worker.stop().await;
}
