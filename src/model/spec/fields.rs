//! Scalar fields and the cross-field GPU rules. Range messages are built in
//! one place so that `parse` and the JSON front door word them identically.

use super::{SpecError, SpecLimits, VramNeed, MAX_VRAM_MB, PRIORITY_RANGE};

/// Shared by `parse` and the JSON front door so a value that is out of range
/// and one that is not even an integer get the same advice.
fn range_message(field: &str, lo: i128, hi: i128, unit: &str) -> String {
    format!("{field} must be a whole number between {lo} and {hi}{unit}")
}

pub(super) fn gpu_count_error(limits: &SpecLimits) -> SpecError {
    let max = i128::from(limits.max_gpu_count);
    SpecError::new("gpu_count", range_message("gpu_count", 0, max, ""))
}

pub(super) fn parse_gpu_count(raw: Option<i64>, limits: &SpecLimits) -> Result<u32, SpecError> {
    u32::try_from(raw.unwrap_or(1))
        .ok()
        .filter(|n| *n <= limits.max_gpu_count)
        .ok_or_else(|| gpu_count_error(limits))
}

pub(super) fn parse_vram(
    gpu_count: u32,
    workload: Option<String>,
    min_vram_mb: Option<i64>,
) -> Result<VramNeed, SpecError> {
    if gpu_count == 0 {
        return match (workload, min_vram_mb) {
            (Some(_), _) => Err(SpecError::new(
                "workload",
                "workload only applies to GPU jobs, and this job asks for 0 GPUs",
            )),
            (None, Some(_)) => Err(SpecError::new(
                "min_vram_mb",
                "min_vram_mb only applies to GPU jobs, and this job asks for 0 GPUs",
            )),
            (None, None) => Ok(VramNeed::None),
        };
    }
    match (workload, min_vram_mb) {
        (Some(_), Some(_)) => Err(SpecError::new(
            "min_vram_mb",
            "give either workload or min_vram_mb, not both: choose one",
        )),
        (None, None) => Err(SpecError::new(
            "workload",
            "a GPU job needs a workload type (or min_vram_mb) so gpuq can pick cards with enough memory",
        )),
        (Some(w), None) => check_workload(&w).map(|()| VramNeed::Workload(w)),
        (None, Some(mb)) => u32::try_from(mb)
            .ok()
            .filter(|mb| (1..=MAX_VRAM_MB).contains(mb))
            .map(VramNeed::PerCard)
            .ok_or_else(min_vram_error),
    }
}

pub(super) fn min_vram_error() -> SpecError {
    let msg = range_message("min_vram_mb", 1, i128::from(MAX_VRAM_MB), " MiB");
    SpecError::new("min_vram_mb", msg)
}

fn check_workload(w: &str) -> Result<(), SpecError> {
    let bytes = w.as_bytes();
    let first_ok = bytes
        .first()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(b));
    if first_ok && rest_ok && bytes.len() <= 64 {
        Ok(())
    } else {
        Err(SpecError::new(
            "workload",
            "workload must be 1 to 64 characters of a-z, 0-9, '_', '.' or '-', starting with a letter or digit",
        ))
    }
}

pub(super) fn parse_name(raw: Option<String>, default_name: String) -> Result<String, SpecError> {
    let Some(raw) = raw else {
        return Ok(default_name);
    };
    let name = raw.trim();
    if name.is_empty() {
        return Err(SpecError::new("name", "name must not be blank"));
    }
    if name.chars().count() > 128 {
        return Err(SpecError::new(
            "name",
            "name must be at most 128 characters",
        ));
    }
    if name
        .chars()
        .any(|c| c.is_control() || (c.is_whitespace() && c != ' '))
    {
        return Err(SpecError::new(
            "name",
            "name must be printable: no tabs, line breaks or control characters",
        ));
    }
    Ok(name.to_owned())
}

pub(super) fn timeout_error(limits: &SpecLimits) -> SpecError {
    let max = i128::from(limits.max_timeout_s);
    SpecError::new("timeout_s", range_message("timeout_s", 1, max, " seconds"))
}

pub(super) fn parse_timeout(raw: Option<i64>, limits: &SpecLimits) -> Result<u64, SpecError> {
    let in_range = |t: u64| (1..=limits.max_timeout_s).contains(&t);
    match raw {
        Some(t) => u64::try_from(t)
            .ok()
            .filter(|t| in_range(*t))
            .ok_or_else(|| timeout_error(limits)),
        None if in_range(limits.default_timeout_s) => Ok(limits.default_timeout_s),
        None => Err(SpecError::new(
            "timeout_s",
            format!(
                "the server's default timeout ({} s) is outside the allowed 1 to {} seconds; set timeout_s explicitly",
                limits.default_timeout_s, limits.max_timeout_s
            ),
        )),
    }
}

pub(super) fn priority_error() -> SpecError {
    let (lo, hi) = (*PRIORITY_RANGE.start(), *PRIORITY_RANGE.end());
    let msg = range_message("priority", i128::from(lo), i128::from(hi), "");
    SpecError::new("priority", msg)
}

/// The one HTTP port a session job serves (1 to 65535), the same words for a value out of range
/// and one that is not a number.
pub(super) fn port_error() -> SpecError {
    SpecError::new("port", range_message("port", 1, 65535, ""))
}

pub(super) fn parse_port(raw: Option<i64>) -> Result<Option<u16>, SpecError> {
    match raw {
        None => Ok(None),
        Some(p) => u16::try_from(p)
            .ok()
            .filter(|p| *p >= 1)
            .map(Some)
            .ok_or_else(port_error),
    }
}

pub(super) fn parse_priority(raw: Option<i64>) -> Result<i32, SpecError> {
    match raw {
        None => Ok(0),
        Some(p) => i32::try_from(p)
            .ok()
            .filter(|p| PRIORITY_RANGE.contains(p))
            .ok_or_else(priority_error),
    }
}
