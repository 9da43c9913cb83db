//! Job specs that many tests submit.

use serde_json::{json, Value};

/// A GPU job of the test image that runs `true` and needs `min_vram_mb` MiB on one card.
pub fn true_job(min_vram_mb: u32) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "min_vram_mb": min_vram_mb })
}
