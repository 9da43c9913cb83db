use serde_json::json;

use super::cli::{parse, submit};
use crate::client::request::{jobs_query, parse_env, parse_spec, submit_body};
use crate::client::ClientCommand;

#[test]
fn minimal_submit_sends_only_image_and_command() {
    let body = submit_body(&submit(&["--image", "alpine", "--", "true"])).expect("maps");
    assert_eq!(body, json!({"image": "alpine", "command": ["true"]}));
}

#[test]
fn all_flags_are_mapped() {
    let args = submit(&[
        "--image",
        "pytorch:2.4",
        "--gpus",
        "2",
        "--vram-mib",
        "40000",
        "--env",
        "A=1",
        "--env",
        "B=x=y",
        "--env",
        "EMPTY=",
        "--volume",
        "/data:/data:ro",
        "--volume",
        "/tmp:/tmp",
        "--name",
        "train",
        "--timeout",
        "3600",
        "--priority",
        "7",
        "--exclusive",
        "--requeue-on-node-loss",
        "--json",
        "--",
        "python",
        "train.py",
    ]);
    assert!(args.json);
    let body = submit_body(&args).expect("maps");
    assert_eq!(
        body,
        json!({
            "image": "pytorch:2.4", "command": ["python", "train.py"], "gpu_count": 2,
            "min_vram_mb": 40000, "env": {"A": "1", "B": "x=y", "EMPTY": ""},
            "volumes": ["/data:/data:ro", "/tmp:/tmp"], "name": "train", "timeout_s": 3600,
            "priority": 7, "exclusive": true, "requeue_on_node_loss": true
        })
    );
}

#[test]
fn workload_is_mapped() {
    let body = submit_body(&submit(&[
        "--image",
        "i",
        "--workload",
        "llm-7b",
        "--",
        "x",
    ]));
    assert_eq!(
        body.expect("maps"),
        json!({"image": "i", "command": ["x"], "workload": "llm-7b"})
    );
}

#[test]
fn argv_after_double_dash_is_preserved_exactly() {
    let argv = [
        "sh",
        "-c",
        "echo \"$HOME\" --gpus 3 && exit 2",
        "--json",
        "--",
        "",
        "  spaced  ",
        "-5",
        "--image=other",
    ];
    let mut args = vec!["--image", "i", "--"];
    args.extend_from_slice(&argv);
    let parsed = submit(&args);
    assert_eq!(parsed.image.as_deref(), Some("i"));
    assert!(!parsed.json);
    assert_eq!(parsed.gpus, None);
    let body = submit_body(&parsed).expect("maps");
    assert_eq!(body["command"], json!(argv));
}

#[test]
fn env_without_equals_is_an_error_naming_the_flag() {
    let err = submit_body(&submit(&["--image", "i", "--env", "NOVALUE", "--", "x"]))
        .expect_err("must fail")
        .to_string();
    assert!(err.contains("--env"), "{err}");
    assert!(err.contains("NOVALUE"), "{err}");
    let err = parse_env("=v").expect_err("empty name").to_string();
    assert!(err.contains("--env"), "{err}");
    assert_eq!(
        parse_env("K=a=b").expect("ok"),
        ("K".to_owned(), "a=b".to_owned())
    );
}

#[test]
fn later_env_value_wins() {
    let body = submit_body(&submit(&[
        "--image", "i", "--env", "A=1", "--env", "A=2", "--", "x",
    ]));
    assert_eq!(body.expect("maps")["env"], json!({"A": "2"}));
}

#[test]
fn spec_file_is_sent_as_is_but_must_be_an_object() {
    let text = r#"{"image": "i", "command": ["a"], "future_field": [1, 2]}"#;
    let spec = parse_spec(text, "spec.json").expect("object");
    assert_eq!(spec["future_field"], json!([1, 2]));
    let err = parse_spec("[1]", "spec.json")
        .expect_err("array")
        .to_string();
    assert!(err.contains("spec.json"), "{err}");
    assert!(parse_spec("{oops", "spec.json").is_err());
}

#[test]
fn jobs_query_has_only_given_params() {
    let jobs = |args: &[&str]| {
        let mut full = vec!["jobs"];
        full.extend_from_slice(args);
        match parse(&full).expect("parses").cmd {
            ClientCommand::Jobs(j) => jobs_query(&j),
            other => panic!("not jobs: {other:?}"),
        }
    };
    assert!(jobs(&[]).is_empty());
    let q = jobs(&[
        "--status",
        "queued,running",
        "--owner",
        "bob",
        "--mine",
        "--page",
        "2",
        "--per-page",
        "10",
    ]);
    let expected: Vec<(&str, String)> = vec![
        ("status", "queued,running".into()),
        ("owner", "bob".into()),
        ("mine", "true".into()),
        ("page", "2".into()),
        ("per_page", "10".into()),
    ];
    assert_eq!(q, expected);
}

#[test]
fn a_number_the_server_cannot_hold_is_refused_naming_the_flag() {
    let huge = u64::MAX.to_string();
    let err = submit_body(&submit(&["--image", "i", "--vram-mib", &huge, "--", "x"]))
        .expect_err("too large")
        .to_string();
    assert!(err.contains("--vram-mib") && err.contains(&huge), "{err}");
    let err = submit_body(&submit(&["--image", "i", "--timeout", &huge, "--", "x"]))
        .expect_err("too large")
        .to_string();
    assert!(err.contains("--timeout"), "{err}");
}

#[test]
fn sweeps_map_to_lists_and_bad_ones_are_refused() {
    use crate::client::request::sweep_body;
    let body = sweep_body(&["lr=1e-3,3e-4".into(), "bs=32".into()]).expect("maps");
    assert_eq!(body, json!({"lr": ["1e-3", "3e-4"], "bs": ["32"]}));
    assert!(sweep_body(&["lr".into()]).is_err());
    assert!(sweep_body(&["=1".into()]).is_err());
    assert!(sweep_body(&["lr=1".into(), "lr=2".into()]).is_err());
}

#[test]
fn wait_takes_ids_and_any_excludes_all() {
    let cli = parse(&["wait", "--any", "--timeout", "5", "abcd", "ef01"]).expect("parses");
    match cli.cmd {
        ClientCommand::Wait(w) => {
            assert!(w.any && !w.all);
            assert_eq!(w.timeout, Some(5));
            assert_eq!(w.ids, ["abcd", "ef01"]);
        }
        other => panic!("not wait: {other:?}"),
    }
    assert!(parse(&["wait"]).is_err());
    assert!(parse(&["wait", "--any", "--all", "abcd"]).is_err());
    // --follow needs --wait.
    assert!(parse(&["submit", "--image", "x", "--follow", "--", "true"]).is_err());
    let s = submit(&[
        "--image",
        "x",
        "--after-ok",
        "a1b2",
        "--after-ok",
        "c3d4",
        "--array",
        "0-9%2",
        "--wait",
        "--",
        "true",
    ]);
    assert_eq!(s.after_ok, ["a1b2", "c3d4"]);
    assert_eq!(s.array.as_deref(), Some("0-9%2"));
    assert!(s.wait);
}
