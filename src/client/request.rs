//! Pure mapping of command-line arguments to request bodies and queries.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::model::spec::{RawCommand, RawJobSpec};

use super::{JobsArgs, SubmitArgs};

/// Parses one `--env K=V` value. The split is at the first `=`, so values may
/// contain `=`; the name must be non-empty.
pub fn parse_env(item: &str) -> Result<(String, String)> {
    match item.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        Some(_) => bail!("--env {item:?}: the variable name is empty (expected K=V)"),
        None => bail!("--env {item:?}: expected K=V"),
    }
}

/// The `POST /api/v1/jobs` body for flag-style `gpuq submit`: the server's own [`RawJobSpec`] with
/// only the fields the user gave, and the command argv exactly as given after `--`.
pub fn submit_body(args: &SubmitArgs) -> Result<Value> {
    let Some(image) = &args.image else {
        bail!("--image is required (or use --file)");
    };
    if args.command.is_empty() {
        bail!("a command is required after `--` (or use --file)");
    }
    let env = args
        .env
        .iter()
        .map(|item| parse_env(item))
        .collect::<Result<BTreeMap<_, _>>>()?;
    let number =
        |flag: &str, n: u64| i64::try_from(n).with_context(|| format!("{flag} {n} is too large"));
    let spec = RawJobSpec {
        image: image.clone(),
        command: RawCommand::Argv(args.command.clone()),
        gpu_count: args.gpus.map(i64::from),
        min_vram_mb: args.vram_mib.map(|n| number("--vram-mib", n)).transpose()?,
        env: (!env.is_empty()).then_some(env),
        volumes: (!args.volume.is_empty()).then(|| args.volume.clone()),
        workload: args.workload.clone(),
        name: args.name.clone(),
        timeout_s: args.timeout.map(|n| number("--timeout", n)).transpose()?,
        priority: args.priority,
        exclusive: args.exclusive.then_some(true),
        requeue_on_node_loss: args.requeue_on_node_loss.then_some(true),
        port: args.port,
    };
    Ok(serde_json::to_value(spec)?)
}

/// Parses the text of a `--file` job spec; it is sent as is, but must be a
/// JSON object.
pub fn parse_spec(text: &str, origin: &str) -> Result<Value> {
    let value: Value =
        serde_json::from_str(text).with_context(|| format!("{origin} is not valid JSON"))?;
    if !value.is_object() {
        bail!("{origin}: the job spec must be a JSON object");
    }
    Ok(value)
}

/// Reads the `--file` job spec from `path` (`-` = standard input).
pub fn read_spec(path: &str) -> Result<Value> {
    if path == "-" {
        let text = std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?;
        parse_spec(&text, "standard input")
    } else {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
        parse_spec(&text, path)
    }
}

/// Query parameters of `GET /api/v1/jobs` for `gpuq jobs`: only those given.
pub fn jobs_query(args: &JobsArgs) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    let statuses: Vec<&str> = args
        .status
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if !statuses.is_empty() {
        query.push(("status", statuses.join(",")));
    }
    if let Some(owner) = &args.owner {
        query.push(("owner", owner.clone()));
    }
    if args.mine {
        query.push(("mine", "true".to_owned()));
    }
    if let Some(page) = args.page {
        query.push(("page", page.to_string()));
    }
    if let Some(per_page) = args.per_page {
        query.push(("per_page", per_page.to_string()));
    }
    query
}

/// Adds what `gpuq submit` says beyond the spec: dependencies (each id resolved, a prefix
/// included), an array and a sweep.
pub async fn add_submit_extras(
    body: &mut Value,
    args: &SubmitArgs,
    api: &super::api::ApiClient,
) -> Result<()> {
    for (key, ids) in [
        ("after_ok", &args.after_ok),
        ("after_any", &args.after_any),
        ("after_failed", &args.after_failed),
    ] {
        if ids.is_empty() {
            continue;
        }
        let mut resolved = Vec::with_capacity(ids.len());
        for id in ids {
            resolved.push(Value::String(api.resolve_job_id(id).await?.to_string()));
        }
        body[key] = Value::Array(resolved);
    }
    if let Some(array) = &args.array {
        body["array"] = Value::String(array.clone());
    }
    if !args.sweep.is_empty() {
        body["sweep"] = sweep_body(&args.sweep)?;
    }
    Ok(())
}

/// `--sweep lr=1e-3,3e-4 --sweep bs=32,64` → `{"lr": ["1e-3", "3e-4"], "bs": ["32", "64"]}`.
pub fn sweep_body(items: &[String]) -> Result<Value> {
    let mut map = serde_json::Map::new();
    for item in items {
        let Some((key, values)) = item.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            bail!("--sweep {item:?}: expected KEY=V1,V2,...");
        };
        let values: Vec<Value> = values
            .split(',')
            .map(|v| Value::String(v.to_owned()))
            .collect();
        if map.insert(key.to_owned(), Value::Array(values)).is_some() {
            bail!("--sweep {key} is given twice");
        }
    }
    Ok(Value::Object(map))
}
