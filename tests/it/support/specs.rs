//! Job specs that many tests submit.

use serde_json::{json, Value};

/// A GPU job of the test image that runs `true` and needs `min_vram_mb` MiB on one card.
pub fn true_job(min_vram_mb: u32) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "min_vram_mb": min_vram_mb })
}

/// A GPU job of the test image named `name` that sleeps a second and needs 20000 MiB on one card:
/// more than half of a 24 GiB card, so two never share one.
pub fn one_card_job(name: &str) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "1"], "name": name,
            "min_vram_mb": 20000 })
}
