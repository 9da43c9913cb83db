//! Whole-spec tests: defaults, cross-field rules, and the JSON front door.
//! Per-field details live next to each field's parser.

use super::*;
use serde_json::json;

fn limits() -> SpecLimits {
    SpecLimits::default()
}

fn accept(value: serde_json::Value) -> JobSpec {
    match JobSpec::from_json(&value.to_string(), &limits()) {
        Ok(spec) => spec,
        Err(e) => panic!("refused {value}: {e}"),
    }
}

fn refuse(value: serde_json::Value) -> SpecError {
    refuse_text(&value.to_string())
}

fn refuse_text(text: &str) -> SpecError {
    match JobSpec::from_json(text, &limits()) {
        Ok(spec) => panic!("accepted {text}: {spec:?}"),
        Err(e) => e,
    }
}

/// Asserts the field exactly and that the message says the key words.
fn assert_refused(value: serde_json::Value, field: &str, needle: &str) {
    let e = refuse(value.clone());
    assert_eq!(e.field, field, "{value}: {e}");
    assert!(e.message.contains(needle), "{value}: {e}");
}

#[test]
fn minimal_gpu_job_gets_defaults() {
    let spec = accept(
        json!({"image": "ghcr.io/org/trainer:1.0", "command": "python train.py", "workload": "llm-7b"}),
    );
    assert_eq!(spec.image(), "ghcr.io/org/trainer:1.0");
    assert_eq!(spec.command(), ["python", "train.py"]);
    assert_eq!(spec.gpu_count(), 1);
    assert_eq!(spec.vram(), &VramNeed::Workload("llm-7b".into()));
    assert!(spec.env().is_empty() && spec.volumes().is_empty());
    assert_eq!(spec.name(), "trainer");
    assert_eq!(spec.timeout_s(), limits().default_timeout_s);
    assert_eq!(spec.priority(), 0);
    assert!(!spec.exclusive());
}

#[test]
fn full_spec_is_kept() {
    let spec = accept(json!({
        "image": "app", "command": ["a", "b c"], "gpu_count": 8, "min_vram_mb": 1_048_576,
        "env": {"B": "2", "A": "1"}, "volumes": ["/data:/data:ro"], "name": "  my job  ",
        "timeout_s": 604_800, "priority": -100, "exclusive": true
    }));
    assert_eq!(spec.command(), ["a", "b c"]);
    assert_eq!(spec.gpu_count(), 8);
    assert_eq!(spec.vram(), &VramNeed::PerCard(1_048_576));
    assert_eq!(spec.env().keys().collect::<Vec<_>>(), ["A", "B"]);
    assert_eq!(spec.volumes()[0].to_string(), "/data:/data:ro");
    assert_eq!(spec.name(), "my job");
    assert_eq!((spec.timeout_s(), spec.priority()), (604_800, -100));
    assert!(spec.exclusive());
    assert_eq!(JobSpec::parse(spec.to_raw(), &limits()), Ok(spec));
}

#[test]
fn cpu_only_job() {
    let spec =
        accept(json!({"image": "app", "command": "run", "gpu_count": 0, "exclusive": false}));
    assert_eq!((spec.gpu_count(), spec.vram()), (0, &VramNeed::None));
    assert_refused(
        json!({"image": "app", "command": "x", "gpu_count": 0, "workload": "w"}),
        "workload",
        "0 GPUs",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "gpu_count": 0, "min_vram_mb": 5}),
        "min_vram_mb",
        "0 GPUs",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "gpu_count": 0, "exclusive": true}),
        "exclusive",
        "0 GPUs",
    );
}

#[test]
fn gpu_count_range_and_shape() {
    let e = refuse(json!({"image": "app", "command": "x", "gpu_count": 9, "workload": "w"}));
    assert_eq!(
        e,
        SpecError::new(
            "gpu_count",
            "gpu_count must be a whole number between 0 and 8"
        )
    );
    for bad in [
        json!(-1),
        json!(1.5),
        json!(1.0),
        json!("2"),
        json!(true),
        json!(u64::MAX),
        json!(i64::MIN),
    ] {
        assert_refused(
            json!({"image": "app", "command": "x", "gpu_count": bad, "workload": "w"}),
            "gpu_count",
            "between 0 and 8",
        );
    }
    let tight = SpecLimits {
        max_gpu_count: 0,
        ..limits()
    };
    let e = JobSpec::from_json(r#"{"image":"app","command":"x"}"#, &tight).err();
    assert_eq!(e.map(|e| e.field), Some("gpu_count".into()));
}

#[test]
fn vram_need_exactly_one() {
    assert_refused(
        json!({"image": "app", "command": "x"}),
        "workload",
        "needs a workload type",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "min_vram_mb": 1}),
        "min_vram_mb",
        "choose one",
    );
    for bad in [json!(0), json!(-5), json!(1_048_577), json!(2.5)] {
        assert_refused(
            json!({"image": "app", "command": "x", "min_vram_mb": bad}),
            "min_vram_mb",
            "between 1 and 1048576 MiB",
        );
    }
    assert_eq!(
        accept(json!({"image": "app", "command": "x", "min_vram_mb": 1})).vram(),
        &VramNeed::PerCard(1)
    );
    let longest = "a".repeat(64);
    for good in ["w", "0", "llm-7b_v1.2", longest.as_str()] {
        let spec = accept(json!({"image": "app", "command": "x", "workload": good}));
        assert_eq!(spec.vram(), &VramNeed::Workload(good.into()));
    }
    let too_long = "a".repeat(65);
    for bad in [
        "",
        "-w",
        ".w",
        "_w",
        "Llm",
        "llm 7b",
        "llm/7b",
        too_long.as_str(),
    ] {
        assert_refused(
            json!({"image": "app", "command": "x", "workload": bad}),
            "workload",
            "1 to 64 characters",
        );
    }
}

#[test]
fn name_rules() {
    let longest = "é".repeat(128);
    assert_eq!(
        accept(json!({"image": "app", "command": "x", "workload": "w", "name": longest})).name(),
        longest
    );
    assert_eq!(
        accept(json!({"image": "app", "command": "x", "workload": "w", "name": "\t a b \n"}))
            .name(),
        "a b"
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "name": " \t "}),
        "name",
        "blank",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "name": "é".repeat(129)}),
        "name",
        "at most 128",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "name": "a\tb"}),
        "name",
        "printable",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "name": "a\u{7}b"}),
        "name",
        "printable",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "name": 5}),
        "name",
        "must be a string",
    );
}

#[test]
fn timeout_and_priority_ranges() {
    let base = |k: &str, v: serde_json::Value| json!({"image": "app", "command": "x", "workload": "w", k: v});
    assert_eq!(accept(base("timeout_s", json!(1))).timeout_s(), 1);
    for bad in [
        json!(0),
        json!(-1),
        json!(604_801),
        json!(1e3),
        json!(u64::MAX),
    ] {
        assert_refused(
            base("timeout_s", bad),
            "timeout_s",
            "between 1 and 604800 seconds",
        );
    }
    assert_eq!(accept(base("priority", json!(100))).priority(), 100);
    for bad in [json!(101), json!(-101), json!(i64::MAX), json!("1")] {
        assert_refused(base("priority", bad), "priority", "between -100 and 100");
    }
    let broken = SpecLimits {
        default_timeout_s: 0,
        ..limits()
    };
    let e = JobSpec::from_json(r#"{"image":"app","command":"x","workload":"w"}"#, &broken).err();
    assert!(
        e.is_some_and(|e| e.field == "timeout_s" && e.message.contains("set timeout_s explicitly"))
    );
}

#[test]
fn json_shape_errors_name_the_field() {
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "foo": 1}),
        "foo",
        "unknown field `foo`",
    );
    let e = refuse_text(r#"{"image":"app","command":"x","workload":"w","workload":"v"}"#);
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        ("workload", "workload is given more than once")
    );
    assert_refused(json!({"command": "x"}), "image", "required");
    assert_refused(json!({"image": null, "command": "x"}), "image", "required");
    assert_refused(
        json!({"image": 1, "command": "x"}),
        "image",
        "must be a string",
    );
    assert_refused(json!({"image": "app"}), "command", "required");
    assert_refused(
        json!({"image": "app", "command": 1}),
        "command",
        "list of strings",
    );
    assert_refused(
        json!({"image": "app", "command": ["a", 1]}),
        "command[1]",
        "must be strings",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "env": []}),
        "env",
        "object",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "env": {"A": 1}}),
        "env.A",
        "must be a string",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "volumes": "/a:/b"}),
        "volumes",
        "list of strings",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "volumes": ["/a:/b", 3]}),
        "volumes[1]",
        "must be strings",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "exclusive": "yes"}),
        "exclusive",
        "true or false",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": 1}),
        "workload",
        "must be a string",
    );
    for text in [
        "",
        "nope",
        "{",
        r#"{"image":"app"} x"#,
        "[1]",
        "5",
        "null",
        "\"s\"",
    ] {
        assert_eq!(refuse_text(text).field, "body", "{text}");
    }
    assert!(refuse_text("[]").message.contains("must be a JSON object"));
    assert!(refuse_text("{").message.contains("not valid JSON"));
}

#[test]
fn nulls_mean_absent() {
    let spec = accept(
        json!({"image": "app", "command": "x", "workload": "w", "gpu_count": null,
        "min_vram_mb": null, "env": null, "volumes": null, "name": null, "timeout_s": null,
        "priority": null, "exclusive": null}),
    );
    assert_eq!(
        spec,
        accept(json!({"image": "app", "command": "x", "workload": "w"}))
    );
}

#[test]
fn payload_limit() {
    let text = json!({"image": "app", "command": "x", "workload": "w"}).to_string();
    let exact = SpecLimits {
        max_payload_bytes: text.len(),
        ..limits()
    };
    assert!(JobSpec::from_json(&text, &exact).is_ok());
    let short = SpecLimits {
        max_payload_bytes: text.len() - 1,
        ..limits()
    };
    let e = JobSpec::from_json(&text, &short).err();
    assert!(e.is_some_and(|e| e.field == "body" && e.message.contains("at most")));
}

#[test]
fn errors_from_each_field_reach_the_caller() {
    assert_refused(
        json!({"image": "Bad", "command": "x", "workload": "w"}),
        "image",
        "lowercase",
    );
    assert_refused(
        json!({"image": "app", "command": "a | b", "workload": "w"}),
        "command",
        "without a shell",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "env": {"LD_PRELOAD": "/x.so"}}),
        "env.LD_PRELOAD",
        "reserved",
    );
    assert_refused(
        json!({"image": "app", "command": "x", "workload": "w", "volumes": ["/etc:/x"]}),
        "volumes[0]",
        "not allowed",
    );
    let few = SpecLimits {
        max_env: 0,
        max_volumes: 0,
        max_command_args: 1,
        ..limits()
    };
    let raw = |extra: serde_json::Value| {
        let mut v = json!({"image": "app", "command": "x", "workload": "w"});
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        JobSpec::from_json(&v.to_string(), &few)
            .err()
            .map(|e| e.field)
    };
    assert_eq!(raw(json!({"env": {"A": "1"}})), Some("env".into()));
    assert_eq!(raw(json!({"volumes": ["/a:/b"]})), Some("volumes".into()));
    assert_eq!(raw(json!({"command": "x y"})), Some("command".into()));
}

#[test]
fn error_display_and_serde() {
    let e = SpecError::new(
        "gpu_count",
        "gpu_count must be a whole number between 0 and 8",
    );
    assert_eq!(
        e.to_string(),
        "gpu_count: gpu_count must be a whole number between 0 and 8"
    );
    let text = serde_json::to_string(&e).unwrap_or_default();
    assert_eq!(serde_json::from_str::<SpecError>(&text).ok(), Some(e));
}

#[test]
fn to_raw_is_canonical_and_round_trips() {
    let spec = accept(
        json!({"image": "app:1", "command": "run 'a b'", "min_vram_mb": 100,
        "volumes": ["//d/./:/in/"], "env": {"K": "v"}}),
    );
    let raw = spec.to_raw();
    assert_eq!(
        raw.command,
        RawCommand::Argv(vec!["run".into(), "a b".into()])
    );
    assert_eq!(raw.volumes, Some(vec!["/d:/in".to_owned()]));
    assert_eq!(
        (raw.gpu_count, raw.name.as_deref(), raw.priority),
        (Some(1), Some("app"), Some(0))
    );
    assert_eq!(raw.exclusive, None);
    assert_eq!(JobSpec::parse(raw, &limits()), Ok(spec.clone()));
    let text = serde_json::to_string(&spec).unwrap_or_default();
    assert_eq!(
        serde_json::from_str::<JobSpec>(&text).ok(),
        Some(spec.clone())
    );
    assert_eq!(JobSpec::from_json(&text, &limits()), Ok(spec));
}

#[test]
fn deserializing_a_job_spec_rechecks_it() {
    let forged = r#"{"image":"app","command":["x"],"gpu_count":1,"workload":"w","env":{"NVIDIA_VISIBLE_DEVICES":"all"}}"#;
    let e = serde_json::from_str::<JobSpec>(forged)
        .err()
        .map(|e| e.to_string());
    assert!(e.is_some_and(|m| m.contains("reserved")));
    // Deployment limits are not applied when reading a stored spec.
    let big =
        r#"{"image":"app","command":["x"],"gpu_count":64,"workload":"w","timeout_s":99999999}"#;
    assert_eq!(
        serde_json::from_str::<JobSpec>(big)
            .map(|s| s.gpu_count())
            .ok(),
        Some(64)
    );
}

#[test]
fn too_many_env_variables_or_volumes_are_refused_naming_the_field_and_the_bound() {
    let limits = SpecLimits {
        max_env: 1,
        max_volumes: 1,
        ..limits()
    };
    let spec = |extra: serde_json::Value| {
        let mut body = serde_json::json!({ "image": "i", "command": ["x"], "min_vram_mb": 1000 });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        JobSpec::from_json(&body.to_string(), &limits).expect_err("over the bound")
    };
    let e = spec(serde_json::json!({ "env": { "A": "1", "B": "2" } }));
    assert_eq!(e.field, "env");
    assert_eq!(e.message, "env has 2 variables, but at most 1 are allowed");
    let e = spec(serde_json::json!({ "volumes": ["/a:/a", "/b:/b"] }));
    assert_eq!(e.field, "volumes");
    assert_eq!(
        e.message,
        "volumes has 2 entries, but at most 1 are allowed"
    );
    assert!(SpecError::at_most("env", "variables", 1, 1).is_ok());
}

#[test]
fn a_session_port_is_one_http_port_and_survives_the_round_trip() {
    let spec = accept(json!({"image": "app", "command": "serve", "workload": "w", "port": 8888}));
    assert_eq!(spec.port(), Some(8888));
    let again = JobSpec::parse(spec.to_raw(), &limits()).unwrap();
    assert_eq!(again, spec);
    let batch = accept(json!({"image": "app", "command": "serve", "workload": "w"}));
    assert_eq!(batch.port(), None);
    assert!(batch.to_raw().port.is_none());
    for bad in [
        json!(0),
        json!(65536),
        json!(-1),
        json!("8888"),
        json!(80.5),
    ] {
        assert_refused(
            json!({"image": "app", "command": "serve", "workload": "w", "port": bad}),
            "port",
            "between 1 and 65535",
        );
    }
}
