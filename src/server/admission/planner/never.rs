//! Submit-time check for jobs that no amount of waiting would admit.

use std::collections::BTreeMap;

use super::{Card, Need};

/// Rejects, at submit time, a job that could not fit even if every listed
/// card were online and empty, so users are told now instead of waiting
/// forever. Returns plain words for the user, or `None` if it can fit.
///
/// External use and reservations are ignored (they come and go); only the
/// headroom is kept back. Exclusive jobs need the same as others on empty
/// cards, so `exclusive` only changes the wording.
pub fn never_fits(
    job_need: &Need,
    gpu_count: u32,
    exclusive: bool,
    cards: &[Card],
    headroom_mib: i64,
) -> Option<String> {
    if gpu_count == 0 {
        return None;
    }
    let gpus = if exclusive {
        "whole GPUs (exclusive)"
    } else {
        "GPUs"
    };
    if cards.is_empty() {
        return Some("no GPUs are registered".to_string());
    }
    let g = gpu_count as usize;
    let mut per_node: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for c in cards {
        per_node.entry(c.node.as_str()).or_default().0 += 1;
    }
    let largest = per_node.values().map(|v| v.0).max().unwrap_or(0);
    if g > largest {
        return Some(format!(
            "asks for {gpu_count} {gpus} but the largest node has {largest}"
        ));
    }

    // (capacity - need, card, need) for every card the workload can run on.
    let mut best: Option<(i64, &Card, i64)> = None;
    let mut needs: Option<(i64, i64)> = None;
    for c in cards {
        let Some(need) = job_need.for_model(&c.model) else {
            continue;
        };
        let cap = c.total_mib.saturating_sub(headroom_mib).max(0);
        let gap = cap.saturating_sub(need);
        needs = Some(needs.map_or((need, need), |(lo, hi)| (lo.min(need), hi.max(need))));
        let better = best.is_none_or(|(b, bc, _)| {
            gap > b || (gap == b && (c.node.as_str(), c.index) < (bc.node.as_str(), bc.index))
        });
        if better {
            best = Some((gap, c, need));
        }
        if gap >= 0 {
            if let Some(v) = per_node.get_mut(c.node.as_str()) {
                v.1 += 1;
            }
        }
    }
    let (Some((gap, card, need)), Some((lo, hi))) = (best, needs) else {
        let mut present: Vec<&str> = cards.iter().map(|c| c.model.as_str()).collect();
        present.sort_unstable();
        present.dedup();
        return Some(format!(
            "workload has no manifest entry for any GPU model present (present: {})",
            present.join(", ")
        ));
    };
    // Most qualifying cards on one node; the earliest name wins ties.
    let mut top: Option<(&str, usize)> = None;
    for (node, &(_, fit)) in &per_node {
        if top.is_none_or(|(_, f)| fit > f) {
            top = Some((node, fit));
        }
    }
    let (node, fit) = top.unwrap_or(("", 0));
    if fit >= g {
        return None;
    }
    if gap < 0 {
        let cap = need.saturating_add(gap);
        return Some(format!(
            "needs {need} MiB per card; the largest card ({}) offers {cap} MiB",
            card.model
        ));
    }
    let each = if lo == hi {
        format!("{lo} MiB")
    } else {
        format!("{lo}-{hi} MiB (by model)")
    };
    Some(format!(
        "asks for {gpu_count} {gpus} with at least {each} each, but at most {fit} such cards are on one node ({node})"
    ))
}
