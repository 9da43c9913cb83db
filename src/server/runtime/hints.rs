//! Framework memory hints: environment keys that keep frameworks which take the whole card by
//! default within the job's VRAM commitment (launch policy `framework_memory_hints`).
//!
//! - JAX/XLA preallocates 75 % of every visible card at start-up. gpuq sets
//!   `XLA_PYTHON_CLIENT_PREALLOCATE=false` (allocate on demand) and
//!   `XLA_PYTHON_CLIENT_MEM_FRACTION=<f>`, where `f` is the job's share of its tightest card.
//! - TensorFlow maps all free memory of every visible card. gpuq sets
//!   `TF_FORCE_GPU_ALLOW_GROWTH=true` (grow as needed). TensorFlow has no environment key for a
//!   fraction, so this only stops the grab at start-up; it does not cap the job.
//! - PyTorch has no environment cap at all: `torch.cuda.set_per_process_memory_fraction` must be
//!   called in the job's code, and `PYTORCH_CUDA_ALLOC_CONF` tunes the caching allocator without
//!   capping it.

use std::collections::BTreeMap;

/// What the job holds on one of its cards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardShare {
    /// MiB the ledger committed to the job on this card.
    pub committed_mib: i64,
    /// The card's total memory, MiB.
    pub total_mib: i64,
    /// The job owns the whole card (an exclusive reservation).
    pub exclusive: bool,
}

/// The job's memory fraction in hundredths (1 to 100): the smallest `committed / total` over its
/// cards, rounded down, so a framework that honours it never takes more than was committed on
/// any card. A card held exclusively counts as the whole card (100): nobody shares it, and its
/// commitment is only what was free when it was granted. A share under 1 % still gives 1 (0.01),
/// since a fraction of 0 means "no limit" to some frameworks. `None` for a job without cards.
pub fn fraction_hundredths(cards: &[CardShare]) -> Option<u32> {
    cards
        .iter()
        .map(|c| {
            if c.exclusive || c.total_mib <= 0 {
                return 100;
            }
            let committed = c.committed_mib.clamp(0, c.total_mib);
            // committed * 100 fits in i64 for any real card (MiB counts are far below 2^56).
            (committed.saturating_mul(100) / c.total_mib) as u32
        })
        .min()
        .map(|h| h.clamp(1, 100))
}

/// Renders hundredths as the decimal the frameworks read, e.g. 42 → `0.42`, 100 → `1.00`.
pub fn render_fraction(hundredths: u32) -> String {
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

/// The hint keys for a job with these cards, or nothing when the policy's
/// `framework_memory_hints` is off or the job has no cards.
pub fn framework_env(enabled: bool, cards: &[CardShare]) -> BTreeMap<String, String> {
    let Some(hundredths) = fraction_hundredths(cards).filter(|_| enabled) else {
        return BTreeMap::new();
    };
    BTreeMap::from([
        (
            "XLA_PYTHON_CLIENT_PREALLOCATE".to_owned(),
            "false".to_owned(),
        ),
        (
            "XLA_PYTHON_CLIENT_MEM_FRACTION".to_owned(),
            render_fraction(hundredths),
        ),
        ("TF_FORCE_GPU_ALLOW_GROWTH".to_owned(), "true".to_owned()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::spec::FRAMEWORK_HINT_KEYS;

    fn card(committed_mib: i64, total_mib: i64) -> CardShare {
        CardShare {
            committed_mib,
            total_mib,
            exclusive: false,
        }
    }

    #[test]
    fn fraction_rounds_down_to_hundredths() {
        // 8000 / 24576 = 0.3255… → 0.32, never 0.33 (which would exceed the commitment).
        assert_eq!(fraction_hundredths(&[card(8000, 24576)]), Some(32));
        // Exactly half.
        assert_eq!(fraction_hundredths(&[card(40960, 81920)]), Some(50));
        // 0.999… stays below the whole card.
        assert_eq!(fraction_hundredths(&[card(81919, 81920)]), Some(99));
        assert_eq!(render_fraction(32), "0.32");
        assert_eq!(render_fraction(5), "0.05");
        assert_eq!(render_fraction(100), "1.00");
    }

    #[test]
    fn the_tightest_card_decides() {
        let cards = [card(20000, 24576), card(20000, 81920), card(20000, 40960)];
        // 20000 / 81920 = 0.244… is the smallest share.
        assert_eq!(fraction_hundredths(&cards), Some(24));
    }

    #[test]
    fn a_tiny_share_is_at_least_one_hundredth() {
        assert_eq!(fraction_hundredths(&[card(1, 81920)]), Some(1));
        assert_eq!(fraction_hundredths(&[card(0, 81920)]), Some(1));
    }

    #[test]
    fn an_exclusive_card_is_the_whole_card() {
        let whole = CardShare {
            committed_mib: 24000,
            total_mib: 24576,
            exclusive: true,
        };
        assert_eq!(fraction_hundredths(&[whole]), Some(100));
        // With a shared card beside it, the shared one still decides.
        assert_eq!(fraction_hundredths(&[whole, card(6144, 24576)]), Some(25));
        // A commitment above the card (never granted, but never above 1.00 either).
        assert_eq!(fraction_hundredths(&[card(30000, 24576)]), Some(100));
    }

    #[test]
    fn keys_only_for_gpu_jobs_with_the_policy_on() {
        let env = framework_env(true, &[card(8000, 24576)]);
        assert_eq!(env["XLA_PYTHON_CLIENT_PREALLOCATE"], "false");
        assert_eq!(env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.32");
        assert_eq!(env["TF_FORCE_GPU_ALLOW_GROWTH"], "true");
        let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
        let mut reserved = FRAMEWORK_HINT_KEYS.to_vec();
        keys.sort_unstable();
        reserved.sort_unstable();
        assert_eq!(keys, reserved, "every hint key is reserved, and only those");
        assert!(framework_env(false, &[card(8000, 24576)]).is_empty());
        assert!(framework_env(true, &[]).is_empty());
    }
}
