//! Property tests for the job spec parser, through the public API only.

use std::collections::BTreeMap;

use gpuq::model::spec::{
    quote_argv, split_command, JobSpec, RawCommand, RawJobSpec, SpecLimits, VramNeed,
};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

// ---------- (1) quote_argv / split_command round trip ----------

/// Characters that stress the quoting rules.
fn nasty_arg() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 \t\n'\"\\\\$`|&;<>()#=~*?\\[\\]{}!%@:,./_+-]{0,12}"
}

proptest! {
    #[test]
    fn quote_then_split_is_identity_printable(argv in vec("\\PC{0,16}", 0..8)) {
        prop_assert_eq!(split_command(&quote_argv(&argv)), Ok(argv));
    }

    #[test]
    fn quote_then_split_is_identity_nasty(argv in vec(nasty_arg(), 0..8)) {
        prop_assert_eq!(split_command(&quote_argv(&argv)), Ok(argv));
    }

    #[test]
    fn quote_then_split_is_identity_any(argv in vec(any::<String>(), 0..6)) {
        prop_assert_eq!(split_command(&quote_argv(&argv)), Ok(argv));
    }

    /// Safe words need no quoting, so ordinary commands stay readable.
    #[test]
    fn plain_words_are_not_quoted(argv in vec("[a-z0-9_./-]{1,10}", 1..6)) {
        prop_assert_eq!(quote_argv(&argv), argv.join(" "));
    }

    #[test]
    fn split_never_panics(line in "\\PC{0,64}") {
        let _ = split_command(&line);
    }
}

// ---------- (2) parse never panics ----------

fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        (-1e6f64..1e6).prop_map(serde_json::Value::from),
        (-3i64..12).prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::from),
        "[a-z/:.]{0,12}".prop_map(serde_json::Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            btree_map("[A-Za-z_]{0,6}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The spec's field names, then one that is none of them.
const FIELD_NAMES: &str =
    "image command gpu_count min_vram_mb env volumes workload name timeout_s priority exclusive requeue_on_node_loss port other";

/// Objects whose keys are mostly real field names, so parsing gets deep.
fn json_spec_object() -> impl Strategy<Value = String> {
    vec(
        (
            prop::sample::select(FIELD_NAMES.split(' ').collect::<Vec<_>>()),
            json_value(),
        ),
        0..12,
    )
    .prop_map(|pairs| {
        let body: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}:{}", serde_json::Value::from(*k), v))
            .collect();
        format!("{{{}}}", body.join(","))
    })
}

fn any_raw() -> impl Strategy<Value = RawJobSpec> {
    let command = prop_oneof![
        vec(any::<String>(), 0..4).prop_map(RawCommand::Argv),
        any::<String>().prop_map(RawCommand::Line),
    ];
    (
        (
            any::<String>(),
            command,
            option::of(any::<i64>()),
            option::of(any::<i64>()),
        ),
        (
            option::of(btree_map(any::<String>(), any::<String>(), 0..4)),
            option::of(vec(any::<String>(), 0..4)),
            option::of(any::<String>()),
            option::of(any::<String>()),
        ),
        (
            option::of(any::<i64>()),
            option::of(any::<i64>()),
            option::of(any::<bool>()),
            option::of(any::<bool>()),
        ),
    )
        .prop_map(
            |(
                (image, command, gpu_count, min_vram_mb),
                (env, volumes, workload, name),
                (timeout_s, priority, exclusive, requeue_on_node_loss),
            )| RawJobSpec {
                image,
                command,
                gpu_count,
                min_vram_mb,
                env,
                volumes,
                workload,
                name,
                timeout_s,
                priority,
                exclusive,
                requeue_on_node_loss,
                port: None,
            },
        )
}

proptest! {
    #[test]
    fn from_json_never_panics_on_text(text in "\\PC{0,80}") {
        let _ = JobSpec::from_json(&text, &SpecLimits::default());
    }

    #[test]
    fn from_json_never_panics_on_json_tokens(text in "[{}\\[\\]\",:0-9a-z_. -]{0,80}") {
        let _ = JobSpec::from_json(&text, &SpecLimits::default());
    }

    #[test]
    fn from_json_never_panics_on_spec_shaped_objects(text in json_spec_object()) {
        let _ = JobSpec::from_json(&text, &SpecLimits::default());
    }

    #[test]
    fn parse_never_panics_on_arbitrary_raw(raw in any_raw()) {
        let _ = JobSpec::parse(raw, &SpecLimits::default());
    }

    /// Both entry points must agree, or the API and a server embedding
    /// `RawJobSpec` in a larger request would accept different specs.
    #[test]
    fn from_json_agrees_with_parse(raw in prop_oneof![any_raw(), valid_ish_raw()]) {
        let text = serde_json::to_string(&raw).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let limits = SpecLimits::default();
        prop_assert_eq!(JobSpec::from_json(&text, &limits), JobSpec::parse(raw, &limits));
    }
}

proptest! {
    /// The derived `RawJobSpec` deserializer and `from_json` accept the
    /// same bodies and produce the same specs.
    #[test]
    fn from_json_agrees_with_derived_deserializer(text in json_spec_object()) {
        let limits = SpecLimits::default();
        let via_json = JobSpec::from_json(&text, &limits);
        match serde_json::from_str::<RawJobSpec>(&text) {
            Ok(raw) => prop_assert_eq!(via_json, JobSpec::parse(raw, &limits)),
            Err(e) => prop_assert!(via_json.is_err(), "derive refused ({}) but from_json accepted", e),
        }
    }
}

// ---------- (3) parse(to_raw(s)) == s ----------

fn image() -> impl Strategy<Value = String> {
    let registry = prop::sample::select(vec![
        "",
        "ghcr.io/",
        "localhost:5000/",
        "registry.example.com:443/",
    ]);
    let component = "[a-z0-9]([a-z0-9._-]{0,6}[a-z0-9])?";
    let tag = option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,8}");
    let digest = option::of("[0-9a-f]{64}");
    (registry, vec(component, 1..4), tag, digest).prop_map(|(r, path, tag, digest)| {
        let mut s = format!("{r}{}", path.join("/"));
        if let Some(t) = tag {
            s = format!("{s}:{t}");
        }
        if let Some(d) = digest {
            s = format!("{s}@sha256:{d}");
        }
        s
    })
}

fn path() -> impl Strategy<Value = String> {
    (vec("/{1,2}([a-z]{1,4}|[a-z]{1,4}|\\.)", 1..4), "/?")
        .prop_map(|(parts, tail)| parts.concat() + &tail)
}

/// Mostly-valid specs, so the round-trip property is exercised on
/// accepted specs (prop_assume! fails the test if too few are accepted).
fn valid_ish_raw() -> impl Strategy<Value = RawJobSpec> {
    let command = prop_oneof![
        vec("\\PC{1,8}", 1..5).prop_map(RawCommand::Argv),
        vec("[a-z]\\PC{0,8}", 1..5).prop_map(|argv| RawCommand::Line(quote_argv(&argv))),
        "[a-z]{1,5}( +[a-z0-9'\"=.-]{0,5}){0,4}".prop_map(RawCommand::Line),
    ];
    let env = btree_map("[A-Z_][A-Z0-9_]{0,8}", "\\PC{0,10}", 0..4);
    let volume = (path(), path(), prop::sample::select(vec!["", ":ro", ":rw"]))
        .prop_map(|(h, c, m)| format!("/home{h}:/mnt{c}{m}"));
    (
        (image(), command, option::of(0i64..=8), 0u8..3),
        ("[a-z0-9][a-z0-9_.-]{0,10}", 1i64..=1_048_576),
        (option::of(env), option::of(vec(volume, 0..4))),
        (option::of(" ?\\PC{1,20} ?"), option::of(1i64..=604_800)),
        (
            option::of(-100i64..=100),
            option::of(any::<bool>()),
            option::of(any::<bool>()),
        ),
    )
        .prop_map(
            |(
                (image, command, gpu_count, vram_kind),
                (workload, mb),
                (env, volumes),
                (name, timeout_s),
                (priority, exclusive, requeue_on_node_loss),
            )| {
                let gpu = gpu_count.unwrap_or(1) > 0;
                RawJobSpec {
                    image,
                    command,
                    gpu_count,
                    min_vram_mb: (gpu && vram_kind == 1).then_some(mb),
                    workload: (gpu && vram_kind != 1).then_some(workload),
                    env,
                    volumes,
                    name,
                    timeout_s,
                    priority,
                    exclusive: exclusive.map(|e| e && gpu),
                    requeue_on_node_loss,
                    port: None,
                }
            },
        )
}

proptest! {
    #[test]
    fn to_raw_round_trips(raw in valid_ish_raw()) {
        let limits = SpecLimits::default();
        let parsed = JobSpec::parse(raw, &limits);
        prop_assume!(parsed.is_ok());
        let spec = parsed.unwrap();
        prop_assert_eq!(JobSpec::parse(spec.to_raw(), &limits), Ok(spec.clone()));

        // Its own JSON round-trips, and is an acceptable request body.
        let text = serde_json::to_string(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: JobSpec = serde_json::from_str(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &spec);
        prop_assert_eq!(JobSpec::from_json(&text, &limits), Ok(spec.clone()));

        // Invariants a holder of a JobSpec relies on.
        prop_assert_eq!(spec.gpu_count() == 0, spec.vram() == &VramNeed::None);
        prop_assert!(!spec.exclusive() || spec.gpu_count() > 0);
        prop_assert!(!spec.command().is_empty() && !spec.command()[0].is_empty());
        prop_assert!(!spec.name().trim().is_empty() && spec.name() == spec.name().trim());
        let containers: std::collections::BTreeSet<_> = spec.volumes().iter().map(|v| v.container()).collect();
        prop_assert_eq!(containers.len(), spec.volumes().len());
        for v in spec.volumes() {
            for p in [v.host(), v.container()] {
                prop_assert!(p.starts_with('/') && !p.contains("//") && !p.contains("/./"));
                prop_assert!(p == "/" || !p.ends_with('/'));
            }
        }
    }
}

// ---------- (4) reserved env keys, any letter case ----------

fn random_case(s: &str, flips: &[bool]) -> String {
    s.chars()
        .zip(flips.iter().chain(std::iter::repeat(&false)))
        .map(|(c, up)| {
            if *up {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

fn env_spec(key: &str) -> RawJobSpec {
    RawJobSpec {
        image: "app".into(),
        command: RawCommand::Line("run".into()),
        gpu_count: None,
        min_vram_mb: None,
        env: Some(BTreeMap::from([
            ("OK".to_owned(), "1".to_owned()),
            (key.to_owned(), "x".to_owned()),
        ])),
        volumes: None,
        workload: Some("w".into()),
        name: None,
        timeout_s: None,
        priority: None,
        exclusive: None,
        requeue_on_node_loss: None,
        port: None,
    }
}

proptest! {
    #[test]
    fn reserved_prefixes_refused_in_any_case(
        prefix in prop::sample::select(vec!["NVIDIA_", "CUDA_MPS_", "GPUQ_", "DOCKER_"]),
        flips in vec(any::<bool>(), 16),
        suffix in "[A-Za-z0-9_]{0,12}",
    ) {
        let key = random_case(prefix, &flips) + &suffix;
        let err = JobSpec::parse(env_spec(&key), &SpecLimits::default()).unwrap_err();
        prop_assert_eq!(err.field, format!("env.{key}"));
        prop_assert!(err.message.contains("is reserved"), "{}", err.message);
    }

    #[test]
    fn reserved_names_refused_in_any_case(
        name in prop::sample::select(vec!["CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"]),
        flips in vec(any::<bool>(), 24),
    ) {
        let key = random_case(name, &flips);
        let err = JobSpec::parse(env_spec(&key), &SpecLimits::default()).err();
        prop_assert_eq!(err.map(|e| e.field), Some(format!("env.{key}")));
    }

    /// The reserved list must not catch ordinary names.
    #[test]
    fn ordinary_env_keys_accepted(key in "[A-Z][A-Z0-9_]{0,12}") {
        let upper = key.to_ascii_uppercase();
        prop_assume!(!["NVIDIA_", "CUDA_MPS_", "GPUQ_", "DOCKER_"].iter().any(|p| upper.starts_with(p)));
        prop_assume!(!["CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"].contains(&upper.as_str()));
        prop_assert!(JobSpec::parse(env_spec(&key), &SpecLimits::default()).is_ok());
    }
}
