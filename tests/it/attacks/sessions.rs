//! Riding a browser session: keeping a stolen cookie alive for ever by using it, and a cross-site
//! form that slips past the CSRF check by carrying a bogus `Authorization` header.

use crate::support::{TestApp, PASSWORD};
use gpuq::model::Role;
use gpuq::server::http::HttpOptions;
use sqlx::PgPool;
use std::time::{Duration, Instant};

/// A session kept busy (a request every 200 ms) still ends its lifetime after its sign-in. The
/// lifetime is 3 s here; the default is 7 days (`--session-lifetime-h`).
#[sqlx::test(migrations = false)]
async fn a_session_ends_its_lifetime_after_sign_in_however_busy(pool: PgPool) {
    let lifetime = Duration::from_secs(3);
    let app = TestApp::custom(pool, HttpOptions::default(), |ctx| {
        assert_eq!(ctx.session_lifetime, chrono::TimeDelta::days(7), "default");
        ctx.session_lifetime = chrono::TimeDelta::from_std(lifetime).unwrap();
    })
    .await;
    app.add_user("carol", Role::Member).await;
    let signed_in = Instant::now();
    let cookie = app.login("carol", PASSWORD).await;
    let ended = loop {
        let me = app.get("/api/v1/me", &cookie).await;
        if me.status == 401 {
            break signed_in.elapsed();
        }
        assert_eq!(me.status, 200, "{}", me.text);
        assert!(
            signed_in.elapsed() < lifetime + Duration::from_secs(5),
            "the busy session outlived its lifetime"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        ended >= lifetime,
        "ended after {ended:?}, before its lifetime"
    );
    // The pages say so too: back to the sign-in page.
    let page = app.page("/jobs", Some(&cookie)).await;
    assert_eq!(page.status, 303, "{}", page.text);
    // Signing in again starts a new lifetime.
    let fresh = app.login("carol", PASSWORD).await;
    assert_eq!(app.get("/api/v1/me", &fresh).await.status, 200);
}

/// A cross-site form post (no `Sec-Fetch-Site: same-origin`, a foreign `Origin`) that carries the
/// victim's session cookie and a junk `Authorization: Bearer` header: refused like the cookie
/// alone. (Before, any `Authorization` header skipped the check, and the log-out and sign-in
/// server functions act on the cookie's session whoever the bearer is.)
#[sqlx::test(migrations = false)]
async fn a_junk_bearer_header_does_not_exempt_a_cross_site_post(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("victor", Role::Member).await;
    let cookie = app.login("victor", PASSWORD).await;
    let cross_site = [
        ("authorization", "Bearer junk"),
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    for endpoint in ["logout", "create_token"] {
        let form = if endpoint == "logout" {
            ""
        } else {
            "name=stolen"
        };
        let r = app
            .server_fn(endpoint, form, Some(&cookie), &cross_site)
            .await;
        assert_eq!(r.status, 403, "{endpoint}: {}", r.text);
        assert!(r.text.contains("cross_site"), "{endpoint}: {}", r.text);
    }
    // The same with a gpuq token that is not valid, on the REST API.
    let mut req = axum::http::Request::post("/api/v1/me/password")
        .header("content-type", "application/json")
        .header("cookie", &cookie)
        .header("origin", "https://evil.example");
    req = req.header("authorization", "Bearer gpuq_not_a_real_token");
    let body = serde_json::json!({ "current_password": PASSWORD, "new_password": "pwned pwned" });
    let r = app
        .send(req.body(axum::body::Body::from(body.to_string())).unwrap())
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    // The victim is still signed in, with the same password.
    assert_eq!(app.get("/api/v1/me", &cookie).await.status, 200);
    let again = app.login("victor", PASSWORD).await;
    assert!(!again.is_empty());
    // A real token without a cookie (the CLI) is not checked, as before.
    let bearer = app.bearer("cli", Role::Member).await;
    let me = app
        .server_fn("logout", "", None, &[("authorization", bearer.as_str())])
        .await;
    assert!(me.status.as_u16() < 400, "{}", me.text);
}
