//! JSON text to [`RawJobSpec`], field by field, so that a shape error
//! (unknown field, wrong type, fractional number) names its field instead
//! of surfacing as serde's "invalid type at line 1 column 37".

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::fields::{gpu_count_error, min_vram_error, port_error, priority_error, timeout_error};
use super::{RawCommand, RawJobSpec, SpecError, SpecLimits};

const FIELDS: [&str; 13] = [
    "image",
    "command",
    "gpu_count",
    "min_vram_mb",
    "env",
    "volumes",
    "workload",
    "name",
    "timeout_s",
    "priority",
    "exclusive",
    "requeue_on_node_loss",
    "port",
];

/// A top-level object kept as a list, so duplicate keys can be refused
/// rather than silently resolved (clients could disagree on which wins).
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

pub(super) fn raw_from_json(text: &str, limits: &SpecLimits) -> Result<RawJobSpec, SpecError> {
    if text.len() > limits.max_payload_bytes {
        return Err(SpecError::new(
            "body",
            format!(
                "the job spec is {} bytes, but at most {} are allowed",
                text.len(),
                limits.max_payload_bytes
            ),
        ));
    }
    let entries = serde_json::from_str::<Entries>(text).map_err(|e| {
        let message = if e.is_data() {
            "the job spec must be a JSON object".to_owned()
        } else {
            format!("the job spec is not valid JSON: {e}")
        };
        SpecError::new("body", message)
    })?;
    let mut fields: BTreeMap<String, Value> = BTreeMap::new();
    for (key, value) in entries.0 {
        if !FIELDS.contains(&key.as_str()) {
            let message = format!(
                "unknown field `{key}`; the fields are {}",
                FIELDS.join(", ")
            );
            return Err(SpecError::new(key, message));
        }
        if fields.contains_key(&key) {
            let message = format!("{key} is given more than once");
            return Err(SpecError::new(key, message));
        }
        fields.insert(key, value);
    }
    // `null` means "not given", as it does for the derived deserializer.
    let mut take = |key: &str| fields.remove(key).filter(|v| !v.is_null());

    let image = match take("image") {
        None => return Err(SpecError::new("image", "image is required")),
        Some(Value::String(s)) => s,
        Some(_) => return Err(SpecError::new("image", "image must be a string")),
    };
    let command = match take("command") {
        None => return Err(SpecError::new("command", "command is required")),
        Some(Value::String(s)) => RawCommand::Line(s),
        Some(Value::Array(items)) => {
            RawCommand::Argv(strings(items, "command", "command arguments")?)
        }
        Some(_) => {
            return Err(SpecError::new(
                "command",
                "command must be a list of strings or a single command line",
            ))
        }
    };
    Ok(RawJobSpec {
        image,
        command,
        gpu_count: integer(take("gpu_count"), || gpu_count_error(limits))?,
        min_vram_mb: integer(take("min_vram_mb"), min_vram_error)?,
        env: take("env").map(env).transpose()?,
        volumes: match take("volumes") {
            None => None,
            Some(Value::Array(items)) => Some(strings(items, "volumes", "volumes")?),
            Some(_) => {
                return Err(SpecError::new(
                    "volumes",
                    "volumes must be a list of strings",
                ))
            }
        },
        workload: string(take("workload"), "workload")?,
        name: string(take("name"), "name")?,
        timeout_s: integer(take("timeout_s"), || timeout_error(limits))?,
        priority: integer(take("priority"), priority_error)?,
        exclusive: boolean(take("exclusive"), "exclusive")?,
        requeue_on_node_loss: boolean(take("requeue_on_node_loss"), "requeue_on_node_loss")?,
        port: integer(take("port"), port_error)?,
    })
}

/// An optional true/false field.
fn boolean(value: Option<Value>, field: &str) -> Result<Option<bool>, SpecError> {
    match value {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(_) => Err(SpecError::new(
            field,
            format!("{field} must be true or false"),
        )),
    }
}

/// Anything but an integer that fits `i64` gets the field's range message,
/// since that is what the user needs to fix it.
fn integer(
    value: Option<Value>,
    error: impl FnOnce() -> SpecError,
) -> Result<Option<i64>, SpecError> {
    match value {
        None => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(error),
    }
}

fn string(value: Option<Value>, field: &str) -> Result<Option<String>, SpecError> {
    match value {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(SpecError::new(field, format!("{field} must be a string"))),
    }
}

fn strings(items: Vec<Value>, field: &str, what: &str) -> Result<Vec<String>, SpecError> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s),
            _ => Err(SpecError::new(
                format!("{field}[{i}]"),
                format!("{what} must be strings"),
            )),
        })
        .collect()
}

fn env(value: Value) -> Result<BTreeMap<String, String>, SpecError> {
    let Value::Object(map) = value else {
        return Err(SpecError::new(
            "env",
            "env must be an object mapping variable names to string values",
        ));
    };
    map.into_iter()
        .map(|(key, value)| match value {
            Value::String(s) => Ok((key, s)),
            _ => Err(SpecError::new(
                format!("env.{key}"),
                format!("env value for {key} must be a string (put numbers in quotes)"),
            )),
        })
        .collect()
}
