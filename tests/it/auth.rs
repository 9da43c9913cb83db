//! Sign-in, tokens, throttling, disabled users, roles and the cross-site check, against the real
//! router and a real Postgres database.

use crate::support::{true_job, TestApp, ORIGIN, PASSWORD};
use gpuq::model::Role;
use gpuq::server::auth::service::{self, MAX_FAILURES};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrations = false)]
async fn token_authenticates_until_revoked(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("alice", Role::Manager).await;

    let created = app.token("alice", PASSWORD).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let body = created.json();
    let token = body["token"].as_str().unwrap().to_owned();
    assert_eq!(body["name"], "test");
    let bearer = format!("Bearer {token}");

    let me = app.get("/api/v1/me", &bearer).await;
    assert_eq!(me.status, 200);
    assert_eq!(me.json()["username"], "alice");
    assert_eq!(me.json()["role"], "manager");

    let stored: Vec<u8> = sqlx::query_scalar("SELECT token_sha256 FROM api_tokens")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_ne!(stored, token.as_bytes(), "the token itself is never stored");

    let id = body["id"].as_str().unwrap();
    let revoked = app.delete(&format!("/api/v1/tokens/{id}"), &bearer).await;
    assert_eq!(revoked.status, 204, "{}", revoked.text);
    let after = app.get("/api/v1/me", &bearer).await;
    assert_eq!(after.status, 401);
    assert_eq!(after.json()["error"], "not signed in");
}

#[sqlx::test(migrations = false)]
async fn without_credentials_the_api_answers_401_json(pool: PgPool) {
    let app = TestApp::new(pool).await;
    for auth in [
        None,
        Some("Bearer gpuq_nope"),
        Some("Bearer "),
        Some("gpuq_session=forged"),
    ] {
        let reply = app.api("GET", "/api/v1/me", auth, None).await;
        assert_eq!(reply.status, 401, "{auth:?}");
        assert_eq!(reply.json()["kind"], "unauthorized");
    }
    let unknown = app.api("GET", "/api/v1/nothing-here", None, None).await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"].is_string());
}

#[sqlx::test(migrations = false)]
async fn wrong_password_and_unknown_user_look_the_same(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("bob", Role::Member).await;
    let wrong = app.token("bob", "not the password").await;
    let unknown = app.token("nobody", "not the password").await;
    assert_eq!(wrong.status, 401);
    assert_eq!(unknown.status, 401);
    assert_eq!(wrong.json(), unknown.json());
    assert_eq!(wrong.json()["error"], "wrong username or password");
}

#[sqlx::test(migrations = false)]
async fn repeated_failures_are_throttled_for_existing_and_unknown_names(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("carol", Role::Member).await;
    for name in ["carol", "ghost"] {
        for _ in 0..MAX_FAILURES {
            assert_eq!(app.token(name, "wrong password").await.status, 401);
        }
        // Now even the right password is refused until the window passes.
        let refused = app.token(name, PASSWORD).await;
        assert_eq!(refused.status, 429, "{name}: {}", refused.text);
        assert_eq!(refused.json()["kind"], "throttled");
        let retry: u64 = refused.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry > 0 && retry <= 15 * 60, "{retry}");
    }
    // Another name is unaffected.
    app.add_user("dave", Role::Member).await;
    assert_eq!(app.token("dave", PASSWORD).await.status, 201);
    // After the window, carol gets in again.
    app.exec("UPDATE login_attempts SET at = at - interval '16 minutes'")
        .await;
    assert_eq!(app.token("carol", PASSWORD).await.status, 201);
}

#[sqlx::test(migrations = false)]
async fn a_success_clears_earlier_failures(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("erin", Role::Member).await;
    for _ in 0..MAX_FAILURES - 1 {
        app.token("erin", "wrong password").await;
    }
    assert_eq!(app.token("erin", PASSWORD).await.status, 201);
    for _ in 0..MAX_FAILURES - 1 {
        app.token("erin", "wrong password").await;
    }
    assert_eq!(app.token("erin", PASSWORD).await.status, 201);
}

#[sqlx::test(migrations = false)]
async fn disabling_a_user_stops_sessions_and_tokens_at_once(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("root", Role::Admin).await;
    let member = app.add_user("frank", Role::Member).await;
    let admin = format!(
        "Bearer {}",
        app.token("root", PASSWORD).await.json()["token"]
            .as_str()
            .unwrap()
    );
    let token = format!(
        "Bearer {}",
        app.token("frank", PASSWORD).await.json()["token"]
            .as_str()
            .unwrap()
    );
    let cookie = app.login("frank", PASSWORD).await;
    assert_eq!(app.get("/api/v1/me", &token).await.status, 200);
    assert_eq!(app.get("/api/v1/me", &cookie).await.status, 200);

    let patch = app
        .update_user(&admin, member, json!({ "disabled": true }))
        .await;
    assert_eq!(patch.status, 204, "{}", patch.text);

    assert_eq!(app.get("/api/v1/me", &token).await.status, 401);
    assert_eq!(app.get("/api/v1/me", &cookie).await.status, 401);
    // The right password of a disabled account is answered as a wrong one (see
    // `attacks::accounts`): nothing tells a stranger the account exists.
    let again = app.token("frank", PASSWORD).await;
    assert_eq!(again.status, 401, "{}", again.text);
    assert_eq!(again.json()["error"], "wrong username or password");

    app.update_user(&admin, member, json!({ "disabled": false }))
        .await;
    assert_eq!(app.get("/api/v1/me", &token).await.status, 200);
}

#[sqlx::test(migrations = false)]
async fn roles_are_checked_on_the_server(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("gina", Role::Admin).await;
    app.add_user("hank", Role::Manager).await;
    app.add_user("ivy", Role::Member).await;

    for (name, allowed) in [("gina", true), ("hank", false), ("ivy", false)] {
        let bearer = format!(
            "Bearer {}",
            app.token(name, PASSWORD).await.json()["token"]
                .as_str()
                .unwrap()
        );
        let rest = app.get("/api/v1/users", &bearer).await;
        assert_eq!(
            rest.status,
            if allowed { 200 } else { 403 },
            "{name}: {}",
            rest.text
        );
        let create = app
            .post_json("/api/v1/users", &bearer, json!({ "username": format!("new-{name}"), "role": "member", "password": PASSWORD }))
            .await;
        assert_eq!(
            create.status,
            if allowed { 201 } else { 403 },
            "{name}: {}",
            create.text
        );

        let cookie = app.login(name, PASSWORD).await;
        let server_fn = app.server_fn("list_users", "", Some(&cookie), &[]).await;
        if allowed {
            assert_eq!(server_fn.status, 200, "{}", server_fn.text);
            assert!(server_fn.text.contains("\"hank\""));
        } else {
            assert!(server_fn.status.is_server_error() || server_fn.status.is_client_error());
            assert!(server_fn.text.contains("forbidden"), "{}", server_fn.text);
        }
    }
    let anonymous = app.server_fn("server_status", "", None, &[]).await;
    assert!(
        anonymous.text.contains("unauthorized"),
        "{}",
        anonymous.text
    );
    let listed = app.api("GET", "/api/v1/users", None, None).await;
    assert_eq!(listed.status, 401);
}

#[sqlx::test(migrations = false)]
async fn bad_requests_name_the_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("root", Role::Admin).await;
    let admin = format!(
        "Bearer {}",
        app.token("root", PASSWORD).await.json()["token"]
            .as_str()
            .unwrap()
    );
    let cases = [
        (
            json!({ "username": "x", "password": "y", "name": "t", "extra": 1 }),
            "extra",
        ),
        (json!({ "username": "x", "name": "t" }), "password"),
    ];
    for (body, field) in cases {
        let reply = app.api("POST", "/api/v1/tokens", None, Some(body)).await;
        assert_eq!(reply.status, 400, "{}", reply.text);
        assert_eq!(reply.json()["field"], field, "{}", reply.text);
    }
    let short = app.create_user(&admin, "kim", "member", "short").await;
    assert_eq!(short.status, 400);
    assert_eq!(short.json()["field"], "password");
    let bad_name = app
        .create_user(&admin, "Kim Smith", "member", PASSWORD)
        .await;
    assert_eq!(bad_name.json()["field"], "username");
    let bad_role = app.create_user(&admin, "kim", "root", PASSWORD).await;
    assert_eq!(bad_role.status, 400);
    let dup = app.create_user(&admin, "root", "member", PASSWORD).await;
    assert_eq!(dup.status, 409);
}

#[sqlx::test(migrations = false)]
async fn login_sets_a_strict_http_only_cookie_and_rotates_the_session(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("jane", Role::Member).await;
    let first = app.login_reply("jane", PASSWORD, None).await;
    let flags = first.set_cookie_header();
    assert!(flags.contains("HttpOnly"), "{flags}");
    assert!(flags.contains("SameSite=Strict"), "{flags}");
    let cookie = first.session_cookie().unwrap();

    let second = app.login_reply("jane", PASSWORD, Some(&cookie)).await;
    let rotated = second
        .session_cookie()
        .expect("a new session id at sign-in");
    assert_ne!(rotated, cookie);
    // The old id no longer authenticates; the new one does.
    assert_eq!(app.get("/api/v1/me", &cookie).await.status, 401);
    assert_eq!(app.get("/api/v1/me", &rotated).await.status, 200);

    let out = app.server_fn("logout", "", Some(&rotated), &[]).await;
    assert!(out.status.as_u16() < 400, "{}", out.text);
    assert_eq!(app.get("/api/v1/me", &rotated).await.status, 401);
}

#[sqlx::test(migrations = false)]
async fn cross_site_state_changes_are_refused(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("kate", Role::Member).await;
    let cookie = app.login("kate", PASSWORD).await;

    let evil_origin = app
        .server_fn(
            "logout",
            "",
            Some(&cookie),
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(evil_origin.status, 403, "{}", evil_origin.text);
    assert_eq!(evil_origin.json()["kind"], "cross_site");
    let cross_site = app
        .server_fn(
            "logout",
            "",
            Some(&cookie),
            &[("sec-fetch-site", "cross-site"), ("origin", ORIGIN)],
        )
        .await;
    assert_eq!(cross_site.status, 403);
    let no_proof = app
        .server_fn("logout", "", Some(&cookie), &[("x-none", "1")])
        .await;
    assert_eq!(no_proof.status, 403);
    // The session survived every refused attempt.
    assert_eq!(app.get("/api/v1/me", &cookie).await.status, 200);

    // A login forged from another site is refused too.
    let forged_login = app
        .server_fn(
            "login",
            &format!("username=kate&password={}", PASSWORD.replace(' ', "+")),
            None,
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(forged_login.status, 403);

    // Same origin by Origin header alone is accepted.
    let same = app
        .server_fn("logout", "", Some(&cookie), &[("origin", ORIGIN)])
        .await;
    assert!(same.status.as_u16() < 400, "{}", same.text);
}

#[sqlx::test(migrations = false)]
async fn first_start_creates_one_admin(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let generated = service::bootstrap_admin(&app.pool, None).await.unwrap();
    let password = generated.expect("a generated password on first start");
    assert!(password.len() >= 16);
    assert_eq!(app.token("admin", &password).await.status, 201);
    // Second start: nothing is created or printed.
    assert_eq!(
        service::bootstrap_admin(&app.pool, Some("another-password"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(app.token("admin", "another-password").await.status, 401);
}

#[sqlx::test(migrations = false)]
async fn configured_bootstrap_password_is_used(pool: PgPool) {
    let app = TestApp::new(pool).await;
    assert_eq!(
        service::bootstrap_admin(&app.pool, Some("s3cret-admin-pw"))
            .await
            .unwrap(),
        None
    );
    let me = app.token("admin", "s3cret-admin-pw").await;
    assert_eq!(me.status, 201);
    let bearer = format!("Bearer {}", me.json()["token"].as_str().unwrap());
    assert_eq!(app.get("/api/v1/me", &bearer).await.json()["role"], "admin");
}

#[sqlx::test(migrations = false)]
async fn probes_report_health_and_readiness(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let health = app.api("GET", "/healthz", None, None).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    let admin = app.bearer("root", Role::Admin).await;
    let ready = app.get("/readyz", &admin).await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json()["checks"]["database"], "ok");
    app.pool.close().await;
    let down = app.api("GET", "/readyz", None, None).await;
    assert_eq!(down.status, 503);
    assert_eq!(down.json()["status"], "not ready");
}

#[sqlx::test(migrations = false)]
async fn pages_render_on_the_server(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("lena", Role::Member).await;
    let login = app.page("/login", None).await;
    assert_eq!(login.status, 200);
    assert!(login.text.contains("<h1>Sign in</h1>"), "{}", login.text);
    // The dashboard sends strangers to the sign-in page.
    let anonymous = app.page("/", None).await;
    assert!(
        anonymous.status.is_redirection(),
        "{} {}",
        anonymous.status,
        anonymous.text
    );
    assert_eq!(anonymous.headers["location"], "/login");
    let cookie = app.login("lena", PASSWORD).await;
    let dash = app.page("/", Some(&cookie)).await;
    assert_eq!(dash.status, 200);
    assert!(dash.text.contains("Welcome, lena"), "{}", dash.text);
}

#[sqlx::test(migrations = false)]
async fn the_openapi_document_describes_every_route(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let doc = app.api("GET", "/api/v1/openapi.json", None, None).await;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    assert_eq!(doc["info"]["title"], "gpuq");
    let routes = [
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/api/v1/openapi.json"),
        ("get", "/api/v1/events"),
        ("get", "/api/v1/me"),
        ("post", "/api/v1/me/password"),
        ("post", "/api/v1/tokens"),
        ("get", "/api/v1/tokens"),
        ("delete", "/api/v1/tokens/{id}"),
        ("get", "/api/v1/users"),
        ("post", "/api/v1/users"),
        ("patch", "/api/v1/users/{id}"),
        ("post", "/api/v1/jobs"),
        ("get", "/api/v1/jobs"),
        ("get", "/api/v1/jobs/{id}"),
        ("post", "/api/v1/jobs/{id}/cancel"),
        ("post", "/api/v1/jobs/{id}/resubmit"),
        ("get", "/api/v1/jobs/{id}/logs"),
        ("get", "/api/v1/gpus"),
        ("patch", "/api/v1/gpus/{uuid}"),
        ("put", "/api/v1/gpus/{uuid}/sim"),
        ("get", "/api/v1/nodes"),
        ("patch", "/api/v1/nodes/{name}"),
        ("delete", "/api/v1/nodes/{name}"),
        ("get", "/api/v1/manifest"),
        ("put", "/api/v1/manifest/{workload}"),
        ("delete", "/api/v1/manifest/{workload}"),
        ("post", "/api/v1/manifest/{workload}/rename"),
        ("get", "/api/v1/manifest/history"),
        ("get", "/api/v1/manifest/suggestions"),
        ("post", "/api/v1/manifest/suggestions/apply"),
        ("get", "/api/v1/settings/launch-policy"),
        ("put", "/api/v1/settings/launch-policy"),
        ("get", "/api/v1/usage"),
        ("get", "/api/v1/usage/samples.csv"),
        ("get", "/api/v1/usage/jobs.csv"),
        ("get", "/api/v1/fair-share"),
        ("get", "/api/v1/registries"),
        ("put", "/api/v1/registries/{host}"),
        ("delete", "/api/v1/registries/{host}"),
        ("get", "/api/v1/me/notifications"),
        ("put", "/api/v1/me/notifications"),
        ("get", "/api/v1/me/notifications/deliveries"),
        ("get", "/api/v1/me/budget"),
        ("get", "/api/v1/jobs/{id}/events"),
        ("get", "/api/v1/jobs/{id}/session"),
        ("get", "/api/v1/arrays/{id}"),
        ("post", "/api/v1/arrays/{id}/cancel"),
        ("post", "/api/v1/arrays/{id}/resubmit"),
        ("get", "/api/v1/teams"),
        ("post", "/api/v1/teams"),
        ("patch", "/api/v1/teams/{name}"),
    ];
    let paths = doc["paths"].as_object().unwrap();
    let documented: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(
        documented,
        routes.len(),
        "{:?}",
        paths.keys().collect::<Vec<_>>()
    );
    for (method, path) in routes {
        assert!(
            paths[path][method].is_object(),
            "{method} {path} is not documented"
        );
    }
    for schema in [
        "RawJobSpec",
        "JobView",
        "GpuView",
        "ErrorBody",
        "ManifestView",
        "ManifestSuggestions",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
    // Every documented route answers (no 404 from the router) — auth aside.
    for (method, path) in routes {
        let concrete = path
            .replace("{id}", "00000000-0000-0000-0000-000000000000")
            .replace("{uuid}", "GPU-00000000-0000-0000-0000-000000000000")
            .replace("{workload}", "w")
            .replace("{host}", "r.example");
        let reply = app
            .api(
                &method.to_uppercase(),
                &concrete,
                Some("Bearer gpuq_x"),
                None,
            )
            .await;
        assert_ne!(reply.status, 404, "{method} {path}: {}", reply.text);
        assert_ne!(reply.status, 405, "{method} {path}");
    }
}

/// Who may call what: every REST route × anonymous, the owning member, another member, a manager
/// and an admin. The table must name every route the OpenAPI document lists, so a new route
/// without an entry fails this test.
#[sqlx::test(migrations = false)]
async fn every_route_allows_exactly_the_roles_it_should(pool: PgPool) {
    let (app, cards) = TestApp::with_cards(pool, "2x24576:NVIDIA GeForce RTX 3090", "roles").await;
    let (owner, manager, admin) = app.member_manager_admin("alice").await;
    let other = app.bearer("bob", Role::Member).await;
    let spec = true_job(1000);
    let job = app.submit_ok(&owner, spec.clone()).await;
    let mut array_spec = spec.clone();
    array_spec["array"] = json!("0-1");
    let array = app.submit(&owner, array_spec).await.json()["array_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let card = gpuq::model::gpu_id(&cards[0]);
    let bob_id = app.get("/api/v1/me", &other).await.json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let token_id = |bearer: &str| {
        let bearer = bearer.to_owned();
        let app = &app;
        async move {
            let list = app.get("/api/v1/tokens", &bearer).await.json();
            list[0]["id"].as_str().unwrap().to_owned()
        }
    };
    // Who is allowed: [anonymous, owner, other member, manager, admin].
    const ALL: [bool; 5] = [false, true, true, true, true];
    const ADMIN: [bool; 5] = [false, false, false, false, true];
    const OWNER_ADMIN: [bool; 5] = [false, true, false, false, true];
    const OWNER_MANAGER: [bool; 5] = [false, true, false, true, true];
    const OWNER: [bool; 5] = [false, true, false, false, false];
    const ANYONE: [bool; 5] = [true; 5];
    const MANAGER: [bool; 5] = [false, false, false, true, true];
    let policy = app
        .get("/api/v1/settings/launch-policy", &admin)
        .await
        .json();
    let table: Vec<(&str, String, Option<serde_json::Value>, [bool; 5])> = vec![
        ("GET", "/healthz".into(), None, ANYONE),
        ("GET", "/readyz".into(), None, ANYONE),
        ("GET", "/api/v1/openapi.json".into(), None, ANYONE),
        ("GET", "/api/v1/me".into(), None, ALL),
        (
            "POST",
            "/api/v1/me/password".into(),
            Some(json!({ "current_password": "wrong-one", "new_password": "long-enough-1" })),
            ALL,
        ),
        ("GET", "/api/v1/tokens".into(), None, ALL),
        ("GET", "/api/v1/users".into(), None, ADMIN),
        (
            "POST",
            "/api/v1/users".into(),
            Some(json!({ "username": "x", "role": "member", "password": "short" })),
            ADMIN,
        ),
        (
            "PATCH",
            format!("/api/v1/users/{bob_id}"),
            Some(json!({ "disabled": false })),
            ADMIN,
        ),
        ("POST", "/api/v1/jobs".into(), Some(spec.clone()), ALL),
        ("GET", "/api/v1/jobs".into(), None, ALL),
        ("GET", format!("/api/v1/jobs/{job}"), None, ALL),
        (
            "GET",
            format!("/api/v1/jobs/{job}/logs"),
            None,
            OWNER_MANAGER,
        ),
        (
            "POST",
            format!("/api/v1/jobs/{job}/cancel"),
            None,
            OWNER_ADMIN,
        ),
        ("POST", format!("/api/v1/jobs/{job}/resubmit"), None, OWNER),
        ("GET", "/api/v1/gpus".into(), None, ALL),
        ("GET", "/api/v1/nodes".into(), None, ALL),
        (
            "PATCH",
            "/api/v1/nodes/roles".into(),
            Some(json!({ "state": "drained" })),
            ADMIN,
        ),
        ("DELETE", "/api/v1/nodes/roles".into(), None, ADMIN),
        (
            "PATCH",
            format!("/api/v1/gpus/{card}"),
            Some(json!({ "state": "online" })),
            ADMIN,
        ),
        (
            "PUT",
            format!("/api/v1/gpus/{card}/sim"),
            Some(json!({ "external_mib": 0 })),
            ADMIN,
        ),
        ("GET", "/api/v1/manifest".into(), None, ALL),
        (
            "PUT",
            "/api/v1/manifest/w".into(),
            Some(json!({ "vram_mib": { "NVIDIA GeForce RTX 3090": 1000 } })),
            ADMIN,
        ),
        ("DELETE", "/api/v1/manifest/w".into(), None, ADMIN),
        (
            "POST",
            "/api/v1/manifest/w/rename".into(),
            Some(json!({ "to": "w2" })),
            ADMIN,
        ),
        ("GET", "/api/v1/manifest/history".into(), None, ALL),
        ("GET", "/api/v1/manifest/suggestions".into(), None, ALL),
        (
            "POST",
            "/api/v1/manifest/suggestions/apply".into(),
            Some(json!({ "workload": "w", "gpu_model": "none" })),
            ADMIN,
        ),
        ("GET", "/api/v1/settings/launch-policy".into(), None, ALL),
        (
            "PUT",
            "/api/v1/settings/launch-policy".into(),
            Some(policy),
            ADMIN,
        ),
        ("GET", "/api/v1/usage".into(), None, MANAGER),
        ("GET", "/api/v1/usage/samples.csv".into(), None, MANAGER),
        ("GET", "/api/v1/usage/jobs.csv".into(), None, MANAGER),
        ("GET", "/api/v1/fair-share".into(), None, ALL),
        ("GET", "/api/v1/registries".into(), None, ADMIN),
        (
            "PUT",
            "/api/v1/registries/r.example".into(),
            Some(json!({ "username": "u", "password": "p" })),
            ADMIN,
        ),
        ("DELETE", "/api/v1/registries/r.example".into(), None, ADMIN),
        ("GET", "/api/v1/me/notifications".into(), None, ALL),
        ("GET", "/api/v1/me/budget".into(), None, ALL),
        (
            "PUT",
            "/api/v1/me/notifications".into(),
            Some(json!({ "on": ["failed"] })),
            ALL,
        ),
        (
            "GET",
            "/api/v1/me/notifications/deliveries".into(),
            None,
            ALL,
        ),
        (
            "GET",
            format!("/api/v1/jobs/{job}/events"),
            None,
            OWNER_MANAGER,
        ),
        // A batch job is no session: 404 for everyone signed in. Who may open a session (its
        // owner; admins only by policy) is tested with real sessions in `sessions::`.
        ("GET", format!("/api/v1/jobs/{job}/session"), None, ALL),
        ("GET", format!("/api/v1/arrays/{array}"), None, ALL),
        ("GET", "/api/v1/teams".into(), None, MANAGER),
        (
            "POST",
            "/api/v1/teams".into(),
            Some(json!({ "name": "Not A Name" })),
            ADMIN,
        ),
        (
            "PATCH",
            "/api/v1/teams/roles".into(),
            Some(json!({ "weight": 2 })),
            ADMIN,
        ),
        (
            "POST",
            format!("/api/v1/arrays/{array}/cancel"),
            None,
            OWNER_ADMIN,
        ),
        (
            "POST",
            format!("/api/v1/arrays/{array}/resubmit"),
            None,
            OWNER,
        ),
    ];
    let callers = [
        None,
        Some(&owner),
        Some(&other),
        Some(&manager),
        Some(&admin),
    ];
    let names = ["anonymous", "owner", "other member", "manager", "admin"];
    for (method, path, body, allowed) in &table {
        for (i, caller) in callers.iter().enumerate() {
            let reply = app
                .api(method, path, caller.map(|s| s.as_str()), body.clone())
                .await;
            let refused = matches!(reply.status.as_u16(), 401 | 403);
            assert_eq!(
                !refused, allowed[i],
                "{method} {path} as {}: {} {}",
                names[i], reply.status, reply.text
            );
            if refused {
                let expected = if caller.is_none() { 401 } else { 403 };
                assert_eq!(reply.status, expected, "{method} {path} as {}", names[i]);
            }
        }
    }
    // Token routes act on the caller's own tokens: another user's token is not found, not revoked.
    let alices = token_id(&owner).await;
    let r = app
        .delete(&format!("/api/v1/tokens/{alices}"), &other)
        .await;
    assert_eq!(r.status, 404);
    let r = app
        .api("DELETE", &format!("/api/v1/tokens/{alices}"), None, None)
        .await;
    assert_eq!(r.status, 401);
    // Token creation is by password, open to anyone who has one.
    assert_eq!(app.token("bob", PASSWORD).await.status, 201);
    // The SSE stream is for signed-in users.
    assert_eq!(app.stream("/api/v1/events", "Bearer nope").await.0, 401);
    // Every documented route has an entry above (or a check just above).
    let doc = app
        .api("GET", "/api/v1/openapi.json", None, None)
        .await
        .json();
    let mut covered: Vec<String> = table
        .iter()
        .map(|(m, p, ..)| format!("{} {}", m.to_lowercase(), p))
        .collect();
    covered.extend(
        [
            "delete /api/v1/tokens/{id}",
            "post /api/v1/tokens",
            "get /api/v1/events",
            // Arrays have ids of their own: their rows above name the owner's array.
            "get /api/v1/arrays/{id}",
            "post /api/v1/arrays/{id}/cancel",
            "post /api/v1/arrays/{id}/resubmit",
        ]
        .map(String::from),
    );
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", &job.to_string())
                .replace("{uuid}", &card)
                .replace("{workload}", "w")
                .replace("{name}", "roles")
                .replace("{host}", "r.example");
            let users_path = path.replace("{id}", &bob_id);
            let key = format!("{method} {concrete}");
            let alt = format!("{method} {users_path}");
            assert!(
                covered.contains(&key)
                    || covered.contains(&alt)
                    || covered.contains(&format!("{method} {path}")),
                "route {method} {path} has no entry in the role table"
            );
        }
    }
}

/// An admin or manager route checks the caller's role before it reads the path or the body: a
/// member probing one with a malformed card id, body or range gets 403, and learns nothing of
/// what the route would accept. An admin sending the same gets the 400 that names the field.
#[sqlx::test(migrations = false)]
async fn a_member_learns_nothing_from_a_routes_input_rules(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (member, manager, admin) = app.member_manager_admin("ivy").await;
    let bad_json = json!({ "bogus_field": true });
    // (method, path, body, the caller the route is for)
    let probes: [(&str, &str, Option<serde_json::Value>, &str); 10] = [
        (
            "PATCH",
            "/api/v1/gpus/not-a-card",
            Some(json!({ "state": "online" })),
            &admin,
        ),
        (
            "PUT",
            "/api/v1/gpus/not-a-card/sim",
            Some(json!({ "external_mib": 0 })),
            &admin,
        ),
        ("PUT", "/api/v1/manifest/w", Some(bad_json.clone()), &admin),
        (
            "POST",
            "/api/v1/manifest/w/rename",
            Some(bad_json.clone()),
            &admin,
        ),
        (
            "PUT",
            "/api/v1/settings/launch-policy",
            Some(bad_json.clone()),
            &admin,
        ),
        ("PATCH", "/api/v1/nodes/n1", Some(bad_json.clone()), &admin),
        ("POST", "/api/v1/users", Some(bad_json.clone()), &admin),
        (
            "POST",
            "/api/v1/manifest/suggestions/apply",
            Some(bad_json.clone()),
            &admin,
        ),
        ("GET", "/api/v1/usage?from=yesterday-ish", None, &manager),
        (
            "GET",
            "/api/v1/usage/jobs.csv?to=not-a-time",
            None,
            &manager,
        ),
    ];
    for (method, path, body, entitled) in probes {
        let probe = app.api(method, path, Some(&member), body.clone()).await;
        assert_eq!(
            probe.status, 403,
            "{method} {path} as a member: {}",
            probe.text
        );
        assert!(
            !probe.text.contains("bogus") && !probe.text.contains("field"),
            "{method} {path}: a member's refusal says nothing of the input: {}",
            probe.text
        );
        let entitled = app.api(method, path, Some(entitled), body).await;
        assert_eq!(
            entitled.status, 400,
            "{method} {path} as its role: the input is refused: {}",
            entitled.text
        );
    }
}

#[sqlx::test(migrations = false)]
async fn sign_ins_and_tokens_are_audited(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("tess", Role::Member).await;
    assert_eq!(app.token("tess", "wrong password").await.status, 401);
    let cookie = app.login("tess", PASSWORD).await;
    let made = app
        .signed_in_call(&cookie, "create_token", "name=ci&expires_in_days=30")
        .await;
    assert_eq!(made.status, 200, "{}", made.text);
    let bearer = format!("Bearer {}", made.json()["token"].as_str().unwrap());
    let id = made.json()["id"].as_str().unwrap().to_owned();
    // Used twice in a row: audited once (at most once per token per interval).
    for _ in 0..2 {
        assert_eq!(app.get("/api/v1/me", &bearer).await.status, 200);
    }
    let revoked = app.delete(&format!("/api/v1/tokens/{id}"), &cookie).await;
    assert_eq!(revoked.status, 204, "{}", revoked.text);

    let trail: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT kind, actor, subject FROM audit_events \
         WHERE kind LIKE 'auth.%' OR kind LIKE 'token.%' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let t = |k: &str, a: &str, s: &str| (k.to_owned(), a.to_owned(), s.to_owned());
    assert_eq!(
        trail,
        vec![
            t("auth.sign_in_failed", "anonymous", "tess"),
            t("auth.sign_in", "tess", "tess"),
            t("token.create", "tess", "ci"),
            t("token.use", "tess", "ci"),
            t("token.revoke", "tess", "ci"),
        ]
    );
}
