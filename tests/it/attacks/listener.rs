//! Holding the listener: a client that sends its request a byte at a time (slowloris, and its
//! slow-body variant), keep-alive connections left idle, and more connections than the server
//! should hold. Driven with raw TCP against the listener `gpuq serve` uses (`http::listen`).
//! Before, `axum::serve` had no read timeout and no connection cap: each of these held a
//! connection and its task for as long as the client liked.

use crate::support::TestApp;
use gpuq::server::http::listen::{serve, ListenLimits};
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long past the read timeout the server may take to act on it.
const SLACK: Duration = Duration::from_secs(3);

/// Serves the app on a loopback port with a 2 s read timeout and room for two connections.
async fn listening(app: &TestApp) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = ListenLimits {
        read_timeout: READ_TIMEOUT,
        max_connections: 2,
    };
    tokio::spawn(serve(
        listener,
        app.router(),
        limits,
        std::future::pending(),
    ));
    addr
}

/// Reads until the server closes the connection or `within` has passed; answers what was read
/// and whether it was closed.
async fn read_until_closed(
    stream: &mut (impl AsyncReadExt + Unpin),
    within: Duration,
) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + within;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&seen).into_owned(), true),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&seen).into_owned(), false),
        }
    }
}

/// Reads one whole small response (head and a `Content-Length` body).
async fn read_response(stream: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= len {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("a response within 10 s")
            .unwrap();
        assert!(n > 0, "closed before the response was whole: {text}");
        seen.extend_from_slice(&buf[..n]);
    }
}

const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: gpuq\r\n\r\n";

#[sqlx::test(migrations = false)]
async fn a_client_sending_its_headers_a_byte_at_a_time_is_dropped(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let addr = listening(&app).await;
    let (mut rd, mut wr) = TcpStream::connect(&addr).await.unwrap().into_split();
    let started = Instant::now();
    let drip = tokio::spawn(async move {
        let head = format!(
            "GET /healthz HTTP/1.1\r\nHost: gpuq\r\nX-Pad: {}",
            "a".repeat(10_000)
        );
        for b in head.bytes() {
            if wr.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let (seen, closed) = read_until_closed(&mut rd, READ_TIMEOUT + SLACK).await;
    assert!(
        closed,
        "the slow client still holds its connection after {:?}",
        started.elapsed()
    );
    assert!(!seen.contains(" 200 "), "{seen}");
    assert!(started.elapsed() >= READ_TIMEOUT - Duration::from_millis(200));
    drip.abort();

    // The slow-body variant: the head at once, then the body a byte at a time.
    let (mut rd, mut wr) = TcpStream::connect(&addr).await.unwrap().into_split();
    let started = Instant::now();
    wr.write_all(
        b"POST /api/v1/tokens HTTP/1.1\r\nHost: gpuq\r\nContent-Type: application/json\r\n\
          Content-Length: 5000\r\n\r\n{",
    )
    .await
    .unwrap();
    let drip = tokio::spawn(async move {
        for _ in 0..4999 {
            if wr.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let (seen, closed) = read_until_closed(&mut rd, READ_TIMEOUT + SLACK).await;
    assert!(
        closed || seen.starts_with("HTTP/1.1 4"),
        "the slow body is still being read after {:?}: {seen}",
        started.elapsed()
    );
    assert!(!seen.contains(" 201 "), "{seen}");
    drip.abort();
}

#[sqlx::test(migrations = false)]
async fn idle_keep_alive_connections_close_and_the_connection_cap_holds(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let addr = listening(&app).await;

    // Two keep-alive connections, each answered once, then left idle: they take both slots.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(&addr).await.unwrap();
        c.write_all(GET).await.unwrap();
        let answer = read_response(&mut c).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(c);
    }
    let idle_since = Instant::now();

    // A third client is not served while they hold the slots...
    let mut third = TcpStream::connect(&addr).await.unwrap();
    third.write_all(GET).await.unwrap();
    let answer = read_response(&mut third).await;
    let waited = idle_since.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        waited >= READ_TIMEOUT - Duration::from_millis(300),
        "served after {waited:?}, while two connections held both slots"
    );
    // ...and is served once the idle ones are closed by the server, which they now see.
    for mut c in held {
        let (rest, closed) = read_until_closed(&mut c, SLACK).await;
        assert!(
            closed,
            "an idle keep-alive connection is still open: {rest}"
        );
    }
    assert!(waited < READ_TIMEOUT + SLACK, "{waited:?}");
}
