//! The edges of the server: security headers on every answer, the `__Host-` cookie and HSTS behind
//! HTTPS, the sign-in gate of the pages, what `/readyz` tells strangers, where the first admin
//! password goes, and what the CLI prints of other people's strings.

use crate::support::{api_as_admin, database_url, free_port, start_server, TestApp, PASSWORD};
use axum::http::header;
use gpuq::model::Role;
use gpuq::server::http::HttpOptions;
use serde_json::json;
use sqlx::PgPool;

fn assert_security_headers(what: &str, headers: &axum::http::HeaderMap) {
    let csp = headers
        .get(header::CONTENT_SECURITY_POLICY)
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"))
        .to_str()
        .unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
    assert!(csp.contains("object-src 'none'"), "{what}: {csp}");
    assert!(!csp.contains("'unsafe-eval'"), "{what}: {csp}");
    assert!(
        !csp.contains("script-src 'self' 'unsafe-inline'"),
        "{what}: {csp}"
    );
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
    assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "{what}");
    assert!(headers.contains_key(header::REFERRER_POLICY), "{what}");
}

#[sqlx::test(migrations = false)]
async fn security_headers_are_on_every_response(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let bearer = app.bearer("nora", Role::Member).await;
    let cookie = app.login("nora", PASSWORD).await;
    let answers = [
        ("healthz", app.api("GET", "/healthz", None, None).await),
        ("readyz", app.api("GET", "/readyz", None, None).await),
        ("api 200", app.get("/api/v1/me", &bearer).await),
        ("api 401", app.api("GET", "/api/v1/me", None, None).await),
        (
            "api 404",
            app.api("GET", "/api/v1/nothing", None, None).await,
        ),
        (
            "api 400",
            app.post_json("/api/v1/jobs", &bearer, json!({})).await,
        ),
        ("login page", app.page("/login", None).await),
        ("page redirect", app.page("/jobs", None).await),
        ("page", app.page("/jobs", Some(&cookie)).await),
        ("missing file", app.page("/pkg/no-such-file.js", None).await),
        (
            "server fn error",
            app.server_fn("list_users", "", Some(&cookie), &[]).await,
        ),
        (
            "cross-site refusal",
            app.server_fn(
                "logout",
                "",
                Some(&cookie),
                &[("origin", "http://evil.example")],
            )
            .await,
        ),
    ];
    for (what, reply) in &answers {
        assert_security_headers(what, &reply.headers);
        // Without --secure-cookies there is no HTTPS to insist on.
        assert!(
            !reply
                .headers
                .contains_key(header::STRICT_TRANSPORT_SECURITY),
            "{what}"
        );
    }
}

#[sqlx::test(migrations = false)]
async fn pages_scripts_carry_the_nonce_of_their_policy(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("olga", Role::Member).await;
    let cookie = app.login("olga", PASSWORD).await;
    let mut nonces = Vec::new();
    for (path, cookie) in [("/login", None), ("/", Some(cookie.as_str()))] {
        let page = app.page(path, cookie).await;
        assert_eq!(page.status, 200, "{path}: {}", page.text);
        let csp = page.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        let nonce = csp
            .split("'nonce-")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .unwrap_or_else(|| panic!("{path}: no nonce in {csp}"))
            .to_owned();
        let scripts = page.text.matches("<script").count();
        assert!(scripts > 0, "{path}: no scripts");
        let nonced = page.text.matches(&format!("nonce=\"{nonce}\"")).count();
        assert!(
            nonced >= scripts,
            "{path}: {nonced} of {scripts} scripts carry the policy's nonce: {}",
            page.text
        );
        nonces.push(nonce);
    }
    assert_ne!(nonces[0], nonces[1], "a fresh nonce per response");
}

#[sqlx::test(migrations = false)]
async fn secure_cookies_use_the_host_prefix_and_hsts(pool: PgPool) {
    let app = TestApp::with_options(
        pool,
        HttpOptions {
            secure_cookies: true,
            ..HttpOptions::default()
        },
    )
    .await;
    app.add_user("pia", Role::Member).await;
    let reply = app.login_reply("pia", PASSWORD, None).await;
    assert!(reply.status.as_u16() < 400, "{}", reply.text);
    let set_cookie = reply.set_cookie_header();
    assert!(
        set_cookie.starts_with("__Host-gpuq_session="),
        "{set_cookie}"
    );
    for flag in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(flag), "{flag}: {set_cookie}");
    }
    assert!(!set_cookie.contains("Domain"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let me = app.get("/api/v1/me", &cookie).await;
    assert_eq!(me.status, 200, "{}", me.text);
    for reply in [&reply, &me, &app.page("/login", None).await] {
        let hsts = reply.headers[header::STRICT_TRANSPORT_SECURITY]
            .to_str()
            .unwrap();
        assert!(hsts.contains("max-age="), "{hsts}");
    }
}

#[sqlx::test(migrations = false)]
async fn strangers_get_a_303_to_sign_in_and_come_back(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("quinn", Role::Member).await;
    for path in [
        "/jobs?status=queued",
        "/account",
        "/admin",
        "/submit",
        "/usage",
    ] {
        let page = app.page(path, None).await;
        assert_eq!(page.status, 303, "{path}: {}", page.text);
        let location = page.headers[header::LOCATION].to_str().unwrap();
        assert!(location.starts_with("/login?next=/"), "{path}: {location}");
        assert!(page.text.is_empty(), "{path}: no page is rendered");
    }
    assert_eq!(
        app.page("/jobs?status=queued", None).await.headers[header::LOCATION],
        "/login?next=/jobs%3Fstatus%3Dqueued"
    );
    // A forged or stale cookie is no sign-in.
    let forged = app.page("/jobs", Some("gpuq_session=forged")).await;
    assert_eq!(forged.status, 303);
    // The sign-in page itself, and static files, stay open.
    assert_eq!(app.page("/login", None).await.status, 200);
    let cookie = app.login("quinn", PASSWORD).await;
    assert_eq!(app.page("/jobs", Some(&cookie)).await.status, 200);
}

#[sqlx::test(migrations = false)]
async fn readyz_shows_details_to_admins_only(pool: PgPool) {
    let (app, admin, member) = TestApp::with_admin_and_member(pool, "rita").await;
    let anonymous = app.api("GET", "/readyz", None, None).await;
    assert_eq!(anonymous.status, 200);
    assert_eq!(anonymous.json(), json!({ "status": "ready" }));
    let as_member = app.get("/readyz", &member).await;
    assert_eq!(as_member.json(), json!({ "status": "ready" }));
    let as_admin = app.get("/readyz", &admin).await;
    assert_eq!(
        as_admin.json()["checks"]["database"],
        "ok",
        "{}",
        as_admin.text
    );

    app.pool.close().await;
    let down = app.api("GET", "/readyz", None, None).await;
    assert_eq!(down.status, 503);
    assert_eq!(
        down.json(),
        json!({ "status": "not ready" }),
        "no raw error for strangers"
    );
}

#[sqlx::test(migrations = false)]
async fn the_first_admin_password_goes_to_a_private_file_not_the_log(pool: PgPool) {
    use std::os::unix::fs::PermissionsExt;

    let app = TestApp::new(pool).await;
    let data = std::env::temp_dir().join(format!("gpuq-bootstrap-{}", uuid::Uuid::new_v4()));
    let log = data.with_extension("log");
    let port = free_port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--database-url", &database_url(&app.pool)])
        .args(["--data-dir", data.to_str().unwrap()])
        .args(["--gpu-source", "sim", "--sim-gpus", "1x24576:RTX"])
        .args(["--node", "boot", "--runner", "false"])
        .env_remove("GPUQ_BOOTSTRAP_ADMIN_PASSWORD")
        .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start gpuq serve");
    let _server = crate::support::server::Server(child);
    let file = data.join("bootstrap-admin-password");
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let up = client
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if up {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server not up: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let password = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    assert!(password.len() >= 16);
    let logged = std::fs::read_to_string(&log).unwrap()
        + &std::fs::read_to_string(log.with_extension("out")).unwrap();
    assert!(!logged.contains(&password), "the password is in the log");
    assert!(
        logged.contains(file.to_str().unwrap()),
        "the log says where the password is: {logged}"
    );
    assert_eq!(app.token("admin", &password).await.status, 201);
    let _ = std::fs::remove_dir_all(&data);
}

#[sqlx::test(migrations = false)]
async fn the_cli_strips_other_peoples_control_characters_unless_raw(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let port = free_port();
    let log = std::env::temp_dir().join(format!("gpuq-cli-raw-{port}.log"));
    let _server = start_server(&database_url(&app.pool), port, &log, &[]).await;
    let member = app.bearer("sam", Role::Member).await;
    let id = app
        .submit_ok(
            &member,
            json!({
                "image": "gpuq-test/busybox:latest",
                "command": ["echo", "\u{1b}]0;pwned\u{7}\u{1b}[2Jhello\u{9b}31m"],
                "min_vram_mb": 1000
            }),
        )
        .await;
    let (_, admin) = api_as_admin(port).await;
    let token = admin.trim_start_matches("Bearer ");
    let show = |raw: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"));
        cmd.args(["show", &id.to_string()]).args([
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--token",
            token,
        ]);
        if raw {
            cmd.arg("--raw");
        }
        cmd.output().expect("gpuq show")
    };
    let clean = show(false);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let text = String::from_utf8(clean.stdout).unwrap();
    assert!(text.contains("hello"), "{text}");
    assert!(
        !text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "control characters reached the terminal: {text:?}"
    );
    assert!(
        !text.contains("pwned"),
        "the escape's payload is dropped too: {text:?}"
    );
    let raw = show(true);
    let text = String::from_utf8(raw.stdout).unwrap();
    assert!(
        text.contains("\u{1b}]0;pwned\u{7}"),
        "--raw prints as is: {text:?}"
    );
}

/// A refusal rides in the URL when a form posts without the WASM bundle, and any member can write
/// such a link to another's page ("not allowed: your password expired, mail it to …"): the page is
/// only rendered after a 303 that cuts the refusal down to its kind, with no words from the link.
#[sqlx::test(migrations = false)]
async fn a_forged_refusal_in_a_page_link_is_cut_down_before_the_page_renders(pool: PgPool) {
    use gpuq::model::{AppError, LINK_TEXT};
    use leptos::server_fn::error::ServerFnUrlError;
    use leptos::server_fn::ServerFn;

    let app = TestApp::new(pool).await;
    app.add_user("rae", Role::Member).await;
    let cookie = app.login("rae", PASSWORD).await;
    let bait = "your password expired: mail it to help@evil.example";
    let forged = ServerFnUrlError::new(
        <gpuq::api::ChangePassword as ServerFn>::PATH,
        AppError::Forbidden(bait.into()),
    )
    .to_url("http://gpuq.test/account")
    .unwrap();
    let link = format!("{}?{}", forged.path(), forged.query().unwrap());
    // Without the cut, the account page shows the words (the action reads them from the URL).
    let reply = app.page(&link, Some(&cookie)).await;
    assert_eq!(reply.status, 303, "{}", reply.text);
    let location = reply.headers[header::LOCATION].to_str().unwrap().to_owned();
    assert!(location.starts_with("/account?__path="), "{location}");
    let page = app.page(&location, Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(!page.text.contains("evil.example"), "{}", page.text);
    assert!(
        page.text.contains(LINK_TEXT),
        "the refusal's kind is still shown"
    );
    // What the server itself sends back (a refusal without words of its own) is left alone.
    let plain = ServerFnUrlError::new("/api/login", AppError::BadCredentials)
        .to_url("http://gpuq.test/login")
        .unwrap();
    let plain = format!("{}?{}", plain.path(), plain.query().unwrap());
    let page = app.page(&plain, None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("wrong username or password"),
        "{}",
        page.text
    );
}

/// Building a router generates the pages' route list, and generating it raises a process-wide flag
/// under which no page data loads (Leptos's `SuppressResourceLoad`). A page whose data started
/// loading on another thread in that window waited forever: one render in about thirty runs of this
/// module, on CI too. The list is now generated once per process; without that, 15 of 40 renders
/// here hung.
#[sqlx::test(migrations = false)]
async fn pages_render_while_other_routers_are_built(pool: PgPool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let app = TestApp::new(pool.clone()).await;
    app.add_user("olga", Role::Member).await;
    let cookie = app.login("olga", PASSWORD).await;
    let stop = Arc::new(AtomicBool::new(false));
    let builder = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut built = 0;
                while !stop.load(Ordering::Relaxed) {
                    drop(TestApp::migrated(pool.clone()));
                    built += 1;
                }
                built
            })
        })
    };
    let mut hung = 0;
    for _ in 0..40 {
        let render = app.page("/", Some(&cookie));
        match tokio::time::timeout(std::time::Duration::from_secs(5), render).await {
            Ok(page) => assert_eq!(page.status, 200, "{}", page.text),
            Err(_) => hung += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let built = builder.join().unwrap();
    assert!(built > 0, "no router was built meanwhile");
    assert_eq!(
        hung, 0,
        "{hung} of 40 renders hung while {built} routers were built"
    );
}
