//! Arrays and sweeps of a submission: `"array": "0-99%8"` and `"sweep": {"lr": ["1e-3"]}`, parsed
//! into the elements to create (each an index and the environment it adds) and a running limit.
//!
//! Every refusal names its field (`array`, `sweep.lr`), and the size is checked from the ranges
//! before anything is allocated, so `"0-999999999"` costs nothing to refuse.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::spec::SpecError;

/// An array (or sweep) as a whole: its size, its limit, and how many of its elements are in each
/// status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ArrayView {
    /// The array.
    pub array_id: Uuid,
    /// Its name (its elements are `<name>-<index>`).
    pub name: String,
    /// Its owner's login name.
    pub owner: String,
    /// How many elements it was submitted with.
    pub size: i32,
    /// At most this many admitted, starting or running at once (`%N`), if limited.
    pub running_limit: Option<i32>,
    /// Elements per status (`queued`, `running`, `succeeded`, …); statuses without any are left
    /// out.
    pub counts: BTreeMap<String, i64>,
    /// Its elements' ids, in index order.
    pub job_ids: Vec<Uuid>,
}

/// An array's counts, as a page of jobs that holds some of its elements shows it: for the whole
/// array, not only the elements on that page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ArraySummary {
    /// The array.
    pub array_id: Uuid,
    /// How many elements it was submitted with.
    pub size: i32,
    /// At most this many admitted, starting or running at once (`%N`), if limited.
    pub running_limit: Option<i32>,
    /// Elements per status; statuses without any are left out.
    pub counts: BTreeMap<String, i64>,
}

/// What an operation on a whole array did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct ArrayAck {
    /// The array acted on.
    pub array_id: Uuid,
    /// Elements cancelled at once (they had not started).
    pub cancelled: u64,
    /// Started elements asked to stop (they end `cancelled` once their runner stopped them).
    pub stopping: u64,
}

/// The most elements one array or sweep may have: one request, one transaction.
pub const MAX_ELEMENTS: usize = 1000;
/// The largest index an array may name.
pub const MAX_INDEX: u32 = 1_000_000;

/// One job of an array or sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// Its `array_index` (`GPUQ_ARRAY_INDEX`).
    pub index: u32,
    /// What a sweep adds to its environment (upper-cased keys); empty for a plain array.
    pub env: BTreeMap<String, String>,
}

/// The elements a submission asks for, and how many may run at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// In index order.
    pub elements: Vec<Element>,
    /// `%N`: at most N admitted, starting or running at once.
    pub running_limit: Option<u32>,
}

/// Parses `array` (`"0-99%8"`, `"0,3,7"`, `"1-5,9"`; with a sweep, `"%N"` alone) and `sweep`.
/// `None` when the submission asks for neither. With a sweep, its cartesian product gives the
/// elements (indexes from 0, in the order of the keys as given, the last varying fastest).
pub fn parse(
    array: Option<&str>,
    sweep: Option<&[(String, Vec<String>)]>,
) -> Result<Option<Batch>, SpecError> {
    let sweep = sweep.filter(|s| !s.is_empty());
    let (indexes, running_limit) = match array {
        None => (None, None),
        Some(text) => {
            let (list, limit) = match text.split_once('%') {
                Some((list, limit)) => (list, Some(parse_limit(limit)?)),
                None => (text, None),
            };
            let indexes = if list.is_empty() && sweep.is_some() {
                None
            } else {
                Some(parse_indexes(list)?)
            };
            (indexes, limit)
        }
    };
    match (indexes, sweep) {
        (None, None) if running_limit.is_none() => Ok(None),
        (None, None) => Err(bad(
            "array",
            "`%N` alone needs a sweep; give indexes, e.g. `0-9%2`",
        )),
        (Some(_), Some(_)) => Err(bad(
            "array",
            "an array and a sweep together: give the sweep and at most `%N` for its limit",
        )),
        (Some(indexes), None) => Ok(Some(Batch {
            elements: indexes
                .into_iter()
                .map(|index| Element {
                    index,
                    env: BTreeMap::new(),
                })
                .collect(),
            running_limit,
        })),
        (None, Some(sweep)) => Ok(Some(Batch {
            elements: product(sweep)?,
            running_limit,
        })),
    }
}

fn bad(field: &str, message: impl Into<String>) -> SpecError {
    SpecError::new(field, message)
}

fn parse_limit(text: &str) -> Result<u32, SpecError> {
    match text.parse::<u32>() {
        Ok(0) => Err(bad("array", "`%0`: the running limit is at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(bad(
            "array",
            format!("`%{text}`: the running limit is a whole number from 1"),
        )),
    }
}

fn parse_index(text: &str) -> Result<u32, SpecError> {
    match text.trim().parse::<u32>() {
        Ok(n) => Ok(n),
        Err(_) => Err(bad(
            "array",
            format!(
                "`{text}` is not an index: write indexes from 0 as `0-99`, `0,3,7` or `1-5,9`, \
                 and `%N` for a running limit"
            ),
        )),
    }
}

/// `0-99`, `0,3,7`, `1-5,9`: sorted, without repeats, at most [`MAX_ELEMENTS`].
fn parse_indexes(list: &str) -> Result<Vec<u32>, SpecError> {
    let mut ranges = Vec::new();
    let mut count: u64 = 0;
    for item in list.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (parse_index(a)?, parse_index(b)?),
            None => {
                let n = parse_index(item)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(bad(
                "array",
                format!("`{item}`: a range goes from the lower index to the higher"),
            ));
        }
        count += u64::from(hi - lo) + 1;
        if count > MAX_ELEMENTS as u64 {
            return Err(too_many(count));
        }
        if hi > MAX_INDEX {
            return Err(bad(
                "array",
                format!("index {hi} is past the largest, {MAX_INDEX}"),
            ));
        }
        ranges.push((lo, hi));
    }
    let mut indexes: Vec<u32> = ranges.into_iter().flat_map(|(a, b)| a..=b).collect();
    indexes.sort_unstable();
    let before = indexes.len();
    indexes.dedup();
    if indexes.len() != before {
        return Err(bad("array", "an index is named twice"));
    }
    Ok(indexes)
}

fn too_many(count: u64) -> SpecError {
    bad(
        "array",
        format!("{count} elements: an array or sweep has at most {MAX_ELEMENTS}"),
    )
}

/// The environment key a sweep key sets: upper-cased; letters, digits and `_`, not a digit first.
fn env_key(key: &str) -> Result<String, SpecError> {
    let upper = key.to_ascii_uppercase();
    let mut bytes = upper.bytes();
    let ok = upper.len() <= 64
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(upper)
    } else {
        Err(bad(
            &format!("sweep.{key}"),
            "a sweep key names an environment variable: letters, digits and `_`, not a digit \
             first, at most 64",
        ))
    }
}

fn product(sweep: &[(String, Vec<String>)]) -> Result<Vec<Element>, SpecError> {
    let mut count: u64 = 1;
    let mut keys = Vec::with_capacity(sweep.len());
    for (key, values) in sweep {
        let field = format!("sweep.{key}");
        let env = env_key(key)?;
        if keys.iter().any(|(k, _): &(String, &Vec<String>)| *k == env) {
            return Err(bad(
                &field,
                format!("{env} is set by another key of the sweep"),
            ));
        }
        if values.is_empty() {
            return Err(bad(&field, "a sweep key needs at least one value"));
        }
        if let Some(v) = values.iter().find(|v| v.contains('\0') || v.len() > 4096) {
            return Err(bad(
                &field,
                format!(
                    "value `{}` has a NUL or is over 4096 bytes",
                    v.chars().take(20).collect::<String>()
                ),
            ));
        }
        count = count.saturating_mul(values.len() as u64);
        if count > MAX_ELEMENTS as u64 {
            return Err(bad(
                "sweep",
                format!("{count} combinations or more: a sweep has at most {MAX_ELEMENTS}"),
            ));
        }
        keys.push((env, values));
    }
    let mut elements = vec![Element {
        index: 0,
        env: BTreeMap::new(),
    }];
    for (env, values) in keys {
        elements = elements
            .into_iter()
            .flat_map(|e| {
                let key = env.clone();
                values.iter().map(move |v| {
                    let mut env_map = e.env.clone();
                    env_map.insert(key.clone(), v.clone());
                    Element {
                        index: 0,
                        env: env_map,
                    }
                })
            })
            .collect();
    }
    for (i, e) in elements.iter_mut().enumerate() {
        e.index = i as u32;
    }
    Ok(elements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(text: &str) -> Result<Option<Batch>, SpecError> {
        parse(Some(text), None)
    }

    fn sweep(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        pairs
            .iter()
            .map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect()))
            .collect()
    }

    #[test]
    fn ranges_lists_and_limits_parse() {
        let b = array("0-99%8").unwrap().unwrap();
        assert_eq!(b.elements.len(), 100);
        assert_eq!(b.running_limit, Some(8));
        let b = array("0,3,7").unwrap().unwrap();
        let idx: Vec<u32> = b.elements.iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![0, 3, 7]);
        assert_eq!(b.running_limit, None);
        let b = array("9,1-3").unwrap().unwrap();
        let idx: Vec<u32> = b.elements.iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![1, 2, 3, 9]);
        assert_eq!(parse(None, None).unwrap(), None);
    }

    #[test]
    fn absurd_arrays_are_refused_naming_the_field() {
        for bad in [
            "0-999999999",
            "0-1000",
            "-1",
            "-5-3",
            "5-3",
            "abc",
            "0-9%0",
            "0-9%-1",
            "0-9%x",
            "1,1",
            "",
            "%4",
            "0,,1",
            "4294967296",
        ] {
            let e = array(bad).expect_err(bad);
            assert_eq!(e.field, "array", "{bad}: {e:?}");
        }
        assert!(array("0-999999999")
            .unwrap_err()
            .message
            .contains("at most 1000"));
        assert!(array("0-9%0").unwrap_err().message.contains("%0"));
    }

    #[test]
    fn a_sweep_is_the_cartesian_product_with_upper_cased_keys() {
        let s = sweep(&[("lr", &["1e-3", "3e-4"]), ("bs", &["32", "64"])]);
        let b = parse(Some("%2"), Some(&s)).unwrap().unwrap();
        assert_eq!(b.running_limit, Some(2));
        assert_eq!(b.elements.len(), 4);
        assert_eq!(b.elements[1].index, 1);
        assert_eq!(b.elements[1].env["LR"], "1e-3");
        assert_eq!(b.elements[1].env["BS"], "64");
        assert_eq!(b.elements[3].env["LR"], "3e-4");
    }

    #[test]
    fn bad_sweeps_are_refused_naming_the_key() {
        let e = parse(None, Some(&sweep(&[("1x", &["a"])]))).unwrap_err();
        assert_eq!(e.field, "sweep.1x");
        let e = parse(None, Some(&sweep(&[("a-b", &["a"])]))).unwrap_err();
        assert_eq!(e.field, "sweep.a-b");
        let e = parse(None, Some(&sweep(&[("lr", &[])]))).unwrap_err();
        assert_eq!(e.field, "sweep.lr");
        let e = parse(None, Some(&sweep(&[("lr", &["a"]), ("LR", &["b"])]))).unwrap_err();
        assert_eq!(e.field, "sweep.LR");
        let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        let m: Vec<&str> = many.iter().map(String::as_str).collect();
        let e = parse(None, Some(&sweep(&[("a", &m), ("b", &m)]))).unwrap_err();
        assert_eq!(e.field, "sweep");
        let e = parse(Some("0-3"), Some(&sweep(&[("a", &["1"])]))).unwrap_err();
        assert_eq!(e.field, "array");
    }
}
