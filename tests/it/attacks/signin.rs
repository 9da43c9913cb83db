//! Guessing passwords and stretching tokens.
//!
//! The attacker is anonymous (guessing) or a member holding only an API token (minting).

use crate::support::{Reply, TestApp, PASSWORD};
use futures_util::future::join_all;
use gpuq::model::Role;
use gpuq::server::auth::service::{BACKOFF_MAX_S, MAX_FAILURES};
use serde_json::json;
use sqlx::PgPool;

/// 40 wrong guesses for one account, all at once: each is recorded before any password is checked,
/// so at most [`MAX_FAILURES`] reach the check, and then even the right password waits out the
/// backoff. (Before the change, the failure count was read before any failure was written: 37 of
/// 40 were checked.)
#[sqlx::test(migrations = false)]
async fn forty_parallel_guesses_check_only_a_handful(pool: PgPool) {
    // A bound on hashing far above 40, so that only the throttle can hold the guesses back.
    let app = TestApp::with_hash_limit(pool, 64).await;
    app.add_user("admin2", Role::Admin).await;
    let guesses: Vec<String> = (0..40).map(|i| format!("guess number {i}")).collect();
    let replies = join_all(guesses.iter().map(|g| app.token("admin2", g))).await;

    let checked = app.hashing.checks();
    assert!(
        checked as i64 <= MAX_FAILURES,
        "{checked} of 40 parallel guesses had their password checked"
    );
    let wrong = replies.iter().filter(|r| r.status == 401).count();
    let throttled = replies.iter().filter(|r| r.status == 429).count();
    assert_eq!(
        wrong as u64, checked,
        "every checked guess was answered 401"
    );
    assert_eq!(
        wrong + throttled,
        40,
        "the rest were refused unchecked (429)"
    );
    for r in replies.iter().filter(|r| r.status == 429) {
        let retry: i64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry > 0 && retry <= BACKOFF_MAX_S, "{retry}");
    }
    // Refused guesses leave no trace that would stretch the backoff; checked ones count.
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM login_attempts WHERE NOT ok")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(recorded as u64, checked);

    // In-flight guesses count as failures, so a burst may leave fewer than the free tries checked;
    // a few more sequential guesses use the rest up.
    let mut spent = checked;
    loop {
        let next = app.token("admin2", "one more guess").await;
        if next.status == 429 {
            break;
        }
        assert_eq!(next.status, 401, "{}", next.text);
        spent += 1;
        assert!(spent as i64 <= MAX_FAILURES, "{spent} guesses were checked");
    }
    let checked = app.hashing.checks();

    // While backed off, even the right password is refused, unchecked.
    let right = app.token("admin2", PASSWORD).await;
    assert_eq!(right.status, 429, "{}", right.text);
    assert_eq!(app.hashing.checks(), checked);

    // The backoff is bounded: once the delay has passed (here: the failures made older than the
    // longest delay), the owner gets in; there is no hard lockout to keep them out.
    app.exec_with(
        "UPDATE login_attempts SET at = at - make_interval(secs => $1)",
        BACKOFF_MAX_S as f64 + 1.0,
    )
    .await;
    let back = app.token("admin2", PASSWORD).await;
    assert_eq!(back.status, 201, "{}", back.text);
}

/// Past the free tries, each further guess waits longer (exponentially), up to a bound.
#[sqlx::test(migrations = false)]
async fn the_backoff_grows_with_each_checked_failure(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("gina", Role::Member).await;
    for _ in 0..MAX_FAILURES {
        assert_eq!(app.token("gina", "wrong password").await.status, 401);
    }
    let mut last_retry = 0;
    for _ in 0..4 {
        let refused = app.token("gina", "wrong password").await;
        assert_eq!(refused.status, 429);
        let retry: i64 = refused.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            retry > last_retry && retry <= BACKOFF_MAX_S,
            "{retry} after {last_retry}"
        );
        last_retry = retry;
        // Let the delay pass; the next guess is checked, fails, and doubles the delay.
        app.exec_with(
            "UPDATE login_attempts SET at = at - make_interval(secs => $1)",
            retry as f64 + 1.0,
        )
        .await;
        assert_eq!(app.token("gina", "wrong password").await.status, 401);
    }
}

/// A flood of sign-ins for many names (so no per-account backoff applies) beyond the bound on
/// concurrent password checks: the excess is answered 503 with Retry-After, never queued.
#[sqlx::test(migrations = false)]
async fn a_flood_beyond_the_hashing_bound_gets_503(pool: PgPool) {
    let app = TestApp::with_hash_limit(pool, 1).await;
    let names: Vec<String> = (0..30).map(|i| format!("stranger{i}")).collect();
    let replies = join_all(names.iter().map(|n| app.token(n, "some password"))).await;
    let busy: Vec<_> = replies.iter().filter(|r| r.status == 503).collect();
    assert!(!busy.is_empty(), "no request was refused as busy");
    for r in &busy {
        assert_eq!(r.json()["kind"], "busy", "{}", r.text);
        let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry >= 1, "{retry}");
    }
    assert!(replies.iter().all(|r| r.status == 401 || r.status == 503));
    assert_eq!(
        app.hashing.checks() as usize,
        replies.iter().filter(|r| r.status == 401).count()
    );
    // Busy refusals are not held against anyone.
    app.add_user("stranger0", Role::Member).await;
    assert_eq!(app.token("stranger0", PASSWORD).await.status, 201);
}

/// A member holding only an API token tries to mint more (which would outlive its revocation):
/// refused on the server function and on the REST route.
#[sqlx::test(migrations = false)]
async fn a_token_cannot_mint_tokens(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let bearer = app.bearer("mallory", Role::Member).await;

    let via_server_fn = app
        .server_fn(
            "create_token",
            "name=spare",
            None,
            &[("authorization", bearer.as_str())],
        )
        .await;
    assert_eq!(via_server_fn.status, 403, "{}", via_server_fn.text);
    assert!(
        via_server_fn.text.contains("cannot create tokens"),
        "{}",
        via_server_fn.text
    );

    let via_rest = app
        .post_json(
            "/api/v1/tokens",
            &bearer,
            json!({ "username": "mallory", "password": PASSWORD, "name": "spare" }),
        )
        .await;
    assert_eq!(via_rest.status, 403, "{}", via_rest.text);
    assert!(via_rest.json()["error"]
        .as_str()
        .unwrap()
        .contains("cannot create tokens"));

    let tokens = app.get("/api/v1/tokens", &bearer).await;
    assert_eq!(
        tokens.json().as_array().unwrap().len(),
        1,
        "{}",
        tokens.text
    );

    // From a signed-in browser session it works.
    let cookie = app.login("mallory", PASSWORD).await;
    let from_session = app
        .server_fn("create_token", "name=laptop", Some(&cookie), &[])
        .await;
    assert_eq!(from_session.status, 200, "{}", from_session.text);
}

/// Asks for a token of `ivan`'s named `name` that expires after `days`.
async fn ivans_token(app: &TestApp, name: &str, days: i64) -> Reply {
    let body =
        json!({ "username": "ivan", "password": PASSWORD, "name": name, "expires_in_days": days });
    app.api("POST", "/api/v1/tokens", None, Some(body)).await
}

/// A member keeps using a token past its expiry: refused with 401, and the token list shows it
/// expired.
#[sqlx::test(migrations = false)]
async fn an_expired_token_is_refused(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("ivan", Role::Member).await;
    let made = ivans_token(&app, "short", 1).await;
    assert_eq!(made.status, 201, "{}", made.text);
    assert!(made.json()["expires_at"].is_string());
    let bearer = format!("Bearer {}", made.json()["token"].as_str().unwrap());
    assert_eq!(app.get("/api/v1/me", &bearer).await.status, 200);

    app.exec("UPDATE api_tokens SET expires_at = now() - interval '1 second'")
        .await;
    let refused = app.get("/api/v1/me", &bearer).await;
    assert_eq!(refused.status, 401, "{}", refused.text);

    let cookie = app.login("ivan", PASSWORD).await;
    let list = app.get("/api/v1/tokens", &cookie).await;
    let token = &list.json()[0];
    assert_eq!(token["name"], "short");
    assert_eq!(token["expired"], true, "{}", list.text);

    for days in [0, 100_000] {
        let bad = ivans_token(&app, "x", days).await;
        assert_eq!(bad.status, 400, "{}", bad.text);
        assert_eq!(bad.json()["field"], "expires_in_days");
    }
}

/// A link to the sign-in page whose `next` points off-site (`//evil`, `https://evil`, `/\evil`):
/// after signing in the browser stays on this site.
#[sqlx::test(migrations = false)]
async fn sign_in_does_not_redirect_off_site(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("judy", Role::Member).await;
    let password = PASSWORD.replace(' ', "+");
    for (next, expected) in [
        ("%2F%2Fevil.example%2Fx", "/"),
        ("https%3A%2F%2Fevil.example", "/"),
        ("%2F%5Cevil.example", "/"),
        ("%2Fjobs%3Fstatus%3Drunning", "/jobs?status=running"),
    ] {
        let reply = app
            .server_fn(
                "login",
                &format!("username=judy&password={password}&next={next}"),
                None,
                &[],
            )
            .await;
        assert!(reply.status.as_u16() < 400, "{}", reply.text);
        assert_eq!(reply.headers["location"], expected, "next={next}");
    }
}
