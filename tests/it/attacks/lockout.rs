//! Using the sign-in throttle as a weapon: locking the admin out with wrong guesses.
//!
//! The attacker is anonymous. Before: after 55 wrong passwords for made-up names from one address,
//! the admin's right password got 429 from that address, and behind a reverse proxy every client
//! has that address; and five wrong guesses at `admin` from anywhere refused the admin's right
//! password from everywhere.

use crate::support::{Reply, TestApp, PASSWORD};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request};
use gpuq::model::Role;
use gpuq::server::auth::service::{CLIENT_MAX_FAILURES, MAX_FAILURES, NAME_MAX_FAILURES};
use gpuq::server::http::HttpOptions;
use serde_json::json;
use sqlx::PgPool;
use std::net::SocketAddr;

/// The reverse proxy the tests' apps trust.
const PROXY: &str = "10.0.0.1";

async fn proxied_app(pool: PgPool) -> TestApp {
    let opts = HttpOptions {
        trusted_proxies: vec![format!("{PROXY}/32").parse().unwrap()],
        ..HttpOptions::default()
    };
    TestApp::custom(pool, opts, |_| {}).await
}

/// `POST /api/v1/tokens` for `name` from the TCP peer `peer`, with `forwarded` as its
/// `X-Forwarded-For` if any.
async fn sign_in(
    app: &TestApp,
    peer: &str,
    forwarded: Option<&str>,
    name: &str,
    password: &str,
) -> Reply {
    let peer = SocketAddr::new(peer.parse().unwrap(), 40_000);
    let mut req = Request::post("/api/v1/tokens")
        .header(header::CONTENT_TYPE, "application/json")
        .extension(ConnectInfo(peer));
    if let Some(f) = forwarded {
        req = req.header("x-forwarded-for", f);
    }
    let body = json!({ "username": name, "password": password, "name": "t" });
    app.send(req.body(Body::from(body.to_string())).unwrap())
        .await
}

/// Through the proxy, as client `client`.
async fn via_proxy(app: &TestApp, client: &str, name: &str, password: &str) -> Reply {
    sign_in(app, PROXY, Some(client), name, password).await
}

#[sqlx::test(migrations = false)]
async fn a_strangers_guesses_do_not_lock_the_admin_out(pool: PgPool) {
    let app = proxied_app(pool).await;
    app.add_user("boss", Role::Admin).await;
    let stranger = "203.0.113.66";

    // 55 wrong passwords for made-up names through the proxy: the stranger's own budget runs out.
    let mut statuses = Vec::new();
    for i in 0..55 {
        statuses.push(
            via_proxy(&app, stranger, &format!("nobody{i}"), "wrong guess")
                .await
                .status
                .as_u16(),
        );
    }
    let wrong = statuses.iter().filter(|s| **s == 401).count() as i64;
    assert_eq!(wrong, CLIENT_MAX_FAILURES, "{statuses:?}");
    assert!(statuses[wrong as usize..].iter().all(|s| *s == 429));
    // The stranger cannot go on with `boss` either.
    assert_eq!(via_proxy(&app, stranger, "boss", "wrong").await.status, 429);

    // The admin, from another client behind the same proxy, and from outside it: in at once.
    let through = via_proxy(&app, "198.51.100.7", "boss", PASSWORD).await;
    assert_eq!(through.status, 201, "{}", through.text);
    let direct = sign_in(&app, "192.0.2.10", None, "boss", PASSWORD).await;
    assert_eq!(direct.status, 201, "{}", direct.text);

    // A second stranger aims at `boss` itself: backed off after the free tries, and the admin's
    // right password from a client that has not failed still gets in.
    let aimed = "203.0.113.77";
    for _ in 0..MAX_FAILURES {
        assert_eq!(via_proxy(&app, aimed, "boss", "wrong").await.status, 401);
    }
    assert_eq!(via_proxy(&app, aimed, "boss", "wrong").await.status, 429);
    let still = via_proxy(&app, "198.51.100.7", "boss", PASSWORD).await;
    assert_eq!(still.status, 201, "{}", still.text);
    // The admin's success does not reset the stranger's backoff.
    assert_eq!(via_proxy(&app, aimed, "boss", PASSWORD).await.status, 429);
}

/// Guessing one account from many addresses: each fresh client's first guess is checked, but
/// past [`NAME_MAX_FAILURES`] on the name, a client that has failed on it waits; one that has not
/// (the owner) does not.
#[sqlx::test(migrations = false)]
async fn guessing_from_many_addresses_backs_off_only_those_that_failed(pool: PgPool) {
    let app = proxied_app(pool).await;
    app.add_user("boss", Role::Admin).await;
    for i in 0..NAME_MAX_FAILURES {
        let client = format!("203.0.113.{}", i + 1);
        assert_eq!(via_proxy(&app, &client, "boss", "wrong").await.status, 401);
    }
    let again = via_proxy(&app, "203.0.113.1", "boss", "another guess").await;
    assert_eq!(again.status, 429, "{}", again.text);
    // Even with the right password, a client that failed waits: it may be the guesser.
    assert_eq!(
        via_proxy(&app, "203.0.113.2", "boss", PASSWORD)
            .await
            .status,
        429
    );
    let owner = via_proxy(&app, "198.51.100.7", "boss", PASSWORD).await;
    assert_eq!(owner.status, 201, "{}", owner.text);
}

/// A client that is not a trusted proxy writes `X-Forwarded-For` itself, a fresh address per
/// guess, to look like many clients: the header is ignored, and its guesses count as its own.
/// Through the proxy, what a client writes to the left of what the proxy appended is ignored too.
#[sqlx::test(migrations = false)]
async fn a_forged_forwarded_for_is_ignored(pool: PgPool) {
    let app = proxied_app(pool).await;
    let forger = "192.0.2.66";
    let mut statuses = Vec::new();
    for i in 0..55 {
        let forged = format!("198.51.100.{i}");
        let r = sign_in(&app, forger, Some(&forged), &format!("nobody{i}"), "wrong").await;
        statuses.push(r.status.as_u16());
    }
    let wrong = statuses.iter().filter(|s| **s == 401).count() as i64;
    assert_eq!(wrong, CLIENT_MAX_FAILURES, "{statuses:?}");
    let clients: Vec<String> = sqlx::query_scalar("SELECT DISTINCT client FROM login_attempts")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(clients, [forger]);

    app.exec("DELETE FROM login_attempts").await;
    let r = sign_in(
        &app,
        PROXY,
        Some("198.51.100.200, 203.0.113.9"),
        "nobody",
        "wrong",
    )
    .await;
    assert_eq!(r.status, 401);
    let clients: Vec<String> = sqlx::query_scalar("SELECT DISTINCT client FROM login_attempts")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(clients, ["203.0.113.9"]);
}
