//! Sending a node's log read elsewhere: whatever answers at a node's advertise URL replies with a
//! redirect, and the reading node follows it, carrying the reader's signed grant to a host of the
//! redirect's choosing. The peer client follows no redirects: a 3xx is a refusal.

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use gpuq::model::AppError;
use gpuq::server::peers::{ClusterSecret, Peers, GRANT_HEADER};
use std::sync::{Arc, Mutex};

/// Serves `router` on a loopback port; answers its base URL.
async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    base
}

#[tokio::test]
async fn a_redirecting_peer_is_not_followed() {
    // Where the redirect points: it records every grant that reaches it.
    let grants: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&grants);
    let elsewhere = serve(Router::new().fallback(move |headers: HeaderMap| {
        let seen = Arc::clone(&seen);
        async move {
            let grant = headers.get(GRANT_HEADER).and_then(|v| v.to_str().ok());
            seen.lock().unwrap().push(grant.unwrap_or("-").to_owned());
            "someone else's log"
        }
    }))
    .await;
    let target = format!("{elsewhere}/stolen");
    let redirector = serve(Router::new().route(
        "/internal/v1/jobs/{id}/logs",
        get(move || {
            let target = target.clone();
            async move { (StatusCode::TEMPORARY_REDIRECT, [("location", target)]).into_response() }
        }),
    ))
    .await;

    let secret = ClusterSecret::new(&"s".repeat(40)).unwrap();
    let peers = Peers::new("reader", Some(secret));
    let (job, user) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    for follow in [false, true] {
        let answer = peers
            .log("owner", &redirector, job, user, Some(10), follow)
            .await;
        match answer {
            Err(AppError::Unavailable(m)) => assert!(m.contains("307"), "{m}"),
            Err(other) => panic!("{other:?}"),
            Ok(r) => panic!("the redirect was followed to {} ({})", r.url(), r.status()),
        }
    }
    assert!(
        grants.lock().unwrap().is_empty(),
        "the grant reached the redirect's target: {:?}",
        grants.lock().unwrap()
    );
}
