use uuid::Uuid;

use crate::client::api::{map_error, match_prefix, path_segment, ApiClient, LOGIN_HINT};

#[test]
fn error_with_field() {
    let body = r#"{"error": "gpu_count must be at least 1", "kind": "invalid_request",
                   "field": "gpu_count", "extra": 1}"#;
    let err = map_error(400, body);
    assert_eq!(err.kind.as_deref(), Some("invalid_request"));
    assert_eq!(
        err.to_string(),
        "gpu_count must be at least 1 (field: gpu_count)"
    );
}

#[test]
fn error_without_field() {
    let err = map_error(404, r#"{"error": "job not found", "kind": "not_found"}"#);
    assert_eq!(err.to_string(), "job not found");
    let err = map_error(
        409,
        r#"{"error": "already finished", "kind": "conflict", "field": null}"#,
    );
    assert_eq!(err.to_string(), "already finished");
}

#[test]
fn unauthorized_adds_login_hint() {
    let err = map_error(401, r#"{"error": "invalid token", "kind": "unauthorized"}"#);
    assert_eq!(err.to_string(), format!("invalid token; {LOGIN_HINT}"));
    assert!(err.to_string().contains("gpuq login"));
}

#[test]
fn non_json_error_body_falls_back_to_status() {
    assert_eq!(map_error(502, "").to_string(), "HTTP 502 Bad Gateway");
    assert_eq!(
        map_error(500, "<html>oops</html>\n").to_string(),
        "HTTP 500 Internal Server Error: <html>oops</html>"
    );
}

#[test]
fn api_error_is_downcastable_from_anyhow() {
    let err: anyhow::Error =
        map_error(403, r#"{"error": "not yours", "kind": "forbidden"}"#).into();
    let api = err
        .downcast_ref::<crate::client::api::ApiError>()
        .expect("ApiError");
    assert_eq!(api.status, 403);
}

#[test]
fn id_prefix_matching() {
    let a = Uuid::parse_str("3f2b9c1e-8d4a-4b6f-9a01-2c3d4e5f6a7b").expect("uuid");
    let b = Uuid::parse_str("3f2b0000-0000-4000-8000-000000000000").expect("uuid");
    assert_eq!(match_prefix("3f2b9c1e", &[a, b]).expect("unique"), a);
    assert_eq!(match_prefix("3F2B9", &[a, b]).expect("case"), a);
    let err = match_prefix("3f2b", &[a, b])
        .expect_err("ambiguous")
        .to_string();
    assert!(err.contains("ambiguous"), "{err}");
    assert!(match_prefix("ffff", &[a, b]).is_err());
}

#[test]
fn client_rejects_bad_urls() {
    assert!(ApiClient::new("not a url", None).is_err());
    assert!(ApiClient::new("ftp://h", None).is_err());
    let c = ApiClient::new("http://h:3000/", Some("t".into())).expect("ok");
    assert_eq!(c.base_url(), "http://h:3000");
    assert!(!format!("{c:?}").contains("\"t\""));
}

#[tokio::test]
async fn unreachable_server_error_names_the_url() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let url = format!("http://127.0.0.1:{port}");
    let c = ApiClient::new(&url, Some("t".into())).expect("ok");
    let err = c.gpus().await.expect_err("refused").to_string();
    assert!(
        err.starts_with(&format!("cannot reach gpuq at {url}: ")),
        "{err}"
    );
}

#[test]
fn a_node_name_stays_one_path_segment() {
    for (name, segment) in [
        ("node-a_1.b~", "node-a_1.b~"),
        ("a/../b?x=1#y", "a%2F..%2Fb%3Fx%3D1%23y"),
        ("gpu box", "gpu%20box"),
        ("nœud", "n%C5%93ud"),
    ] {
        assert_eq!(path_segment(name), segment, "{name}");
    }
}
