//! The listener: HTTP/1.1 connections with bounds a client cannot stretch. `axum::serve` has none,
//! so a client sending its headers a byte at a time (slowloris), or a keep-alive connection left
//! idle, holds a connection and its task for ever, and nothing limits how many there are.
//!
//! - a request's head must arrive whole within `read_timeout`, counted from when the connection
//!   is ready for it (opened, or its previous response sent): so an idle keep-alive connection is
//!   closed after the same time (hyper's `header_read_timeout`);
//! - its body must arrive whole within `read_timeout` of the handler starting to read it;
//! - at most `max_connections` connections are served at once; further ones wait in the kernel's
//!   backlog until one closes (and are refused by the kernel once that backlog is full).

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// The default of `--http-read-timeout-s`.
pub const DEFAULT_READ_TIMEOUT_S: u64 = 30;
/// The default of `--http-max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The listener's bounds.
#[derive(Debug, Clone, Copy)]
pub struct ListenLimits {
    /// Longest wait for a request's head (and the longest idle time of a keep-alive connection),
    /// and for its body.
    pub read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ListenLimits {
    fn default() -> Self {
        ListenLimits {
            read_timeout: Duration::from_secs(DEFAULT_READ_TIMEOUT_S),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes; then stops
/// accepting, lets the open connections finish their requests, and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let router = router.layer(axum::middleware::from_fn_with_state(
        limits.read_timeout,
        body_deadline,
    ));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut stop = stop_rx.clone();
    loop {
        // A slot first, then the connection: past the cap, connections wait in the backlog.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        // Small answers go out at once: without it a response written in two parts (the head,
        // then a streamed body, as the session proxy passes one on) waits out the client's
        // delayed ACK, 40 ms on Linux.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY on a connection");
        }
        let service = router
            .clone()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req.map(Body::new)
            });
        let mut stop = stop_rx.clone();
        let read_timeout = limits.read_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(read_timeout);
            // With upgrades: the sessions listener passes WebSockets through (`http::sessions`).
            let conn = builder
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.changed() => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    drop(listener);
    // Every open connection holds a slot: all slots back means all connections are done.
    let _ = slots
        .acquire_many(limits.max_connections.max(1) as u32)
        .await;
}

/// Middleware: a request body must arrive whole within the read timeout, counted from the moment
/// the request reached the router (a client trickling its body byte by byte is cut off).
async fn body_deadline(
    axum::extract::State(timeout): axum::extract::State<Duration>,
    req: Request,
    next: Next,
) -> Response {
    let has_body = req
        .headers()
        .contains_key(axum::http::header::CONTENT_LENGTH)
        || req
            .headers()
            .contains_key(axum::http::header::TRANSFER_ENCODING);
    if !has_body {
        return next.run(req).await;
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let (parts, body) = req.into_parts();
    let data = body.into_data_stream();
    let bounded = futures_util::stream::unfold(Some(data), move |data| async move {
        let mut data = data?;
        match tokio::time::timeout_at(deadline, data.next()).await {
            Ok(Some(chunk)) => Some((chunk, Some(data))),
            Ok(None) => None,
            Err(_) => Some((
                Err(axum::Error::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the request body did not arrive within the read timeout",
                ))),
                None,
            )),
        }
    });
    let req = Request::from_parts(parts, Body::from_stream(bounded));
    next.run(req).await
}
