//! Simulated cards from a `--sim-gpus` spec, so gpuq can be developed, tested
//! and demonstrated on machines without NVIDIA hardware.

use super::{GpuError, GpuInfo, GpuInventory, InventoryKind, ReadCard, Reading};
use uuid::Uuid;

/// Namespace for simulated card UUIDs; fixed forever so that the same node and
/// spec yield the same UUIDs after a restart and database rows still match.
pub const SIM_UUID_NAMESPACE: Uuid = Uuid::from_u128(0x31b9_ce6b_98ff_44bb_a4da_ee1b_116b_e012);

const MAX_COUNT: u32 = 64;
const MAX_MIB: i64 = 4_194_304;
const MAX_MODEL_CHARS: usize = 96;

/// One card described by the spec, before a node name gives it an identity;
/// exposed so callers can validate a spec without building an inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCard {
    /// Position across the whole spec, mirroring NVML's consecutive indexes.
    pub index: u32,
    /// Model name as written in the spec (trimmed).
    pub model: String,
    /// Memory size in MiB as written in the spec.
    pub total_mib: i64,
}

/// Derives a simulated card's UUID from everything that defines it, so it is
/// stable across restarts yet distinct between nodes, positions and models.
pub fn sim_uuid(node: &str, index: u32, model: &str, mib: i64) -> Uuid {
    Uuid::new_v5(
        &SIM_UUID_NAMESPACE,
        format!("{node}/{index}/{model}/{mib}").as_bytes(),
    )
}

/// Parses `COUNTxMiB:MODEL[,COUNTxMiB:MODEL...]` (count optional, meaning 1)
/// so a mistyped spec fails at start-up with the offending group named.
pub fn parse_sim_spec(spec: &str) -> Result<Vec<SimCard>, GpuError> {
    if spec.trim().is_empty() {
        return Err(GpuError::InvalidSimSpec(
            "spec is empty; expected COUNTxMiB:MODEL[,...]".to_string(),
        ));
    }
    let mut cards = Vec::new();
    for (i, raw) in spec.split(',').enumerate() {
        let group = raw.trim();
        let fail =
            |what: &str| GpuError::InvalidSimSpec(format!("group {} ({group:?}): {what}", i + 1));
        let (count, mib, model) = parse_group(group).map_err(fail)?;
        for _ in 0..count {
            let index = u32::try_from(cards.len()).map_err(|_| fail("too many cards"))?;
            cards.push(SimCard {
                index,
                model: model.to_string(),
                total_mib: mib,
            });
        }
    }
    Ok(cards)
}

/// Splits one trimmed group into (count, MiB, model) or says what is wrong.
fn parse_group(group: &str) -> Result<(u32, i64, &str), &'static str> {
    if group.is_empty() {
        return Err("group is empty (stray comma?)");
    }
    let (size, model) = group
        .split_once(':')
        .ok_or("expected COUNTxMiB:MODEL or MiB:MODEL (missing ':')")?;
    let (count, mib) = match size.split_once(['x', 'X']) {
        Some((count, mib)) => (count.trim(), mib.trim()),
        None => ("1", size.trim()),
    };
    let count = whole_number(count)
        .and_then(|c| u32::try_from(c).ok())
        .filter(|c| (1..=MAX_COUNT).contains(c))
        .ok_or("count must be a whole number from 1 to 64")?;
    let mib = whole_number(mib)
        .and_then(|m| i64::try_from(m).ok())
        .filter(|m| (1..=MAX_MIB).contains(m))
        .ok_or("memory must be a whole number of MiB from 1 to 4194304")?;
    let model = model.trim();
    if model.is_empty() {
        return Err("model name must not be empty");
    }
    if model.chars().count() > MAX_MODEL_CHARS {
        return Err("model name must be at most 96 characters");
    }
    if model.chars().any(char::is_control) {
        return Err("model name must not contain control characters");
    }
    Ok((count, mib, model))
}

/// Accepts plain ASCII digits only (no sign, no blanks) to keep specs unambiguous.
fn whole_number(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 12 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Inventory of simulated cards; nothing is observed, so memory use fields are
/// `None` and external memory comes from the API/database instead.
#[derive(Debug, Clone)]
pub struct SimInventory {
    cards: Vec<GpuInfo>,
}

impl SimInventory {
    /// Builds the cards once, with UUIDs derived from `node`, so every
    /// snapshot returns identical identities.
    pub fn new(cards: &[SimCard], node: &str) -> Self {
        let cards = cards
            .iter()
            .map(|c| GpuInfo {
                uuid: sim_uuid(node, c.index, &c.model, c.total_mib),
                index: c.index,
                model: c.model.clone(),
                total_mib: c.total_mib,
                used_mib: None,
                external_mib: None,
                utilization_pct: None,
                simulated: true,
            })
            .collect();
        SimInventory { cards }
    }

    /// Parses and builds in one step, as start-up does with `--sim-gpus`.
    pub fn from_spec(spec: &str, node: &str) -> Result<Self, GpuError> {
        Ok(Self::new(&parse_sim_spec(spec)?, node))
    }
}

impl GpuInventory for SimInventory {
    fn kind(&self) -> InventoryKind {
        InventoryKind::Simulated
    }

    fn read(&self) -> Result<Reading, GpuError> {
        Ok(Reading {
            cards: self
                .cards
                .iter()
                .map(|info| ReadCard {
                    info: info.clone(),
                    processes: Vec::new(),
                    processes_known: false,
                    sm_samples: None,
                })
                .collect(),
            skipped: Vec::new(),
        })
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
