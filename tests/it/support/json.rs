//! Reading the JSON answers tests check: an array's elements as rows, a field as text.

use serde_json::Value;

/// The elements of the JSON array `list`, each made a row by `row` (panics if `list` is no array).
pub fn rows<T>(list: &Value, row: impl Fn(&Value) -> T) -> Vec<T> {
    let items = list
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"));
    items.iter().map(row).collect()
}

/// `v[key]`, which must be a string, as an owned one.
pub fn text(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no text {key} in {v}"))
        .to_owned()
}

/// Each element of `list` as its two text fields `a` and `b` (e.g. a node's name and state).
pub fn text_pairs(list: &Value, a: &str, b: &str) -> Vec<(String, String)> {
    rows(list, |v| (text(v, a), text(v, b)))
}
