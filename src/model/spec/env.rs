//! Environment variables. Some names steer the GPU runtime, the dynamic
//! loader or gpuq itself; letting a job set them would let it escape the
//! GPUs it was given, so they are refused outright.

use std::collections::BTreeMap;

use super::SpecError;

const MAX_KEY_LEN: usize = 128;
const MAX_VALUE_BYTES: usize = 32 * 1024;

const GPUS: &str = "gpuq sets the GPUs a job may see";
const LOADER: &str = "it changes how programs load libraries, which could bypass GPU isolation";
const HINTS: &str = "gpuq sets it to keep the framework within the job's VRAM commitment \
                     (launch policy framework_memory_hints)";

/// The framework memory hints gpuq sets itself when the launch policy's
/// `framework_memory_hints` is on: JAX/XLA's preallocation and memory fraction, and
/// TensorFlow's allow-growth. Jobs may never set them, whatever the policy says, so that an
/// admin turning the hints on cannot be undone by a job.
pub const FRAMEWORK_HINT_KEYS: &[&str] = &[
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "TF_FORCE_GPU_ALLOW_GROWTH",
];

/// Reserved names: (upper-case name or prefix, is a prefix, why). Matched
/// case-insensitively so `nvidia_visible_devices` is refused too.
const RESERVED: &[(&str, bool, &str)] = &[
    ("NVIDIA_", true, GPUS),
    ("CUDA_VISIBLE_DEVICES", false, GPUS),
    (
        "CUDA_MPS_",
        true,
        "it would point the job at a GPU-sharing (MPS) daemon outside its own fence",
    ),
    ("GPUQ_", true, "gpuq sets these variables itself"),
    ("LD_PRELOAD", false, LOADER),
    ("LD_LIBRARY_PATH", false, LOADER),
    ("LD_AUDIT", false, LOADER),
    (
        "DOCKER_",
        true,
        "it configures the container engine, not the job",
    ),
    ("XLA_PYTHON_CLIENT_PREALLOCATE", false, HINTS),
    ("XLA_PYTHON_CLIENT_MEM_FRACTION", false, HINTS),
    ("TF_FORCE_GPU_ALLOW_GROWTH", false, HINTS),
];

fn reserved_reason(key: &str) -> Option<&'static str> {
    let upper = key.to_ascii_uppercase();
    RESERVED
        .iter()
        .find(|(name, prefix, _)| {
            if *prefix {
                upper.starts_with(name)
            } else {
                upper == *name
            }
        })
        .map(|(_, _, why)| *why)
}

fn is_valid_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    key.len() <= MAX_KEY_LEN
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn parse_env(
    env: BTreeMap<String, String>,
    max_env: usize,
) -> Result<BTreeMap<String, String>, SpecError> {
    SpecError::at_most("env", "variables", env.len(), max_env)?;
    for (key, value) in &env {
        let field = || format!("env.{key}");
        if !is_valid_key(key) {
            return Err(SpecError::new(
                field(),
                format!(
                    "env key `{key}` must start with a letter or '_', contain only letters, \
                     digits and '_', and be at most {MAX_KEY_LEN} characters"
                ),
            ));
        }
        if let Some(why) = reserved_reason(key) {
            return Err(SpecError::new(
                field(),
                format!("env key {key} is reserved: {why}"),
            ));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(SpecError::new(
                field(),
                format!("env value for {key} is longer than 32 KiB"),
            ));
        }
        if value.contains('\0') {
            return Err(SpecError::new(
                field(),
                format!("env value for {key} contains a NUL character"),
            ));
        }
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(key: &str, value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(key.to_owned(), value.to_owned())])
    }

    fn refused(key: &str, value: &str) -> SpecError {
        match parse_env(one(key, value), 8) {
            Err(e) => e,
            Ok(_) => panic!("accepted {key}={value:?}"),
        }
    }

    #[test]
    fn accepts_ordinary_variables() {
        let max_value = "v".repeat(MAX_VALUE_BYTES);
        let long_key = format!("K{}", "_".repeat(MAX_KEY_LEN - 1));
        for (k, v) in [
            ("PYTHONUNBUFFERED", "1"),
            ("_private", ""),
            ("a1", "héllo\nworld"),
            ("HF_HOME", max_value.as_str()),
            (long_key.as_str(), "x"),
            // Near misses of reserved names are fine.
            ("NVIDIA", "x"),
            ("CUDA_VISIBLE_DEVICES_X", "x"),
            ("CUDA_MPS", "x"),
            ("LD_BIND_NOW", "1"),
            ("MY_NVIDIA_FLAG", "1"),
            ("DOCKER", "1"),
            ("CUDA_HOME", "/usr/local/cuda"),
            ("XLA_FLAGS", "--xla_dump_to=/tmp"),
            ("TF_CPP_MIN_LOG_LEVEL", "2"),
        ] {
            assert!(parse_env(one(k, v), 8).is_ok(), "{k}");
        }
    }

    #[test]
    fn refuses_reserved_keys_with_reason() {
        let e = refused("NVIDIA_VISIBLE_DEVICES", "all");
        assert_eq!(e.field, "env.NVIDIA_VISIBLE_DEVICES");
        assert_eq!(
            e.message,
            "env key NVIDIA_VISIBLE_DEVICES is reserved: gpuq sets the GPUs a job may see"
        );
        for (key, needle) in [
            ("nvidia_driver_capabilities", "GPUs a job may see"),
            ("Cuda_Visible_Devices", "GPUs a job may see"),
            ("CUDA_MPS_PIPE_DIRECTORY", "MPS"),
            ("gpuq_job_id", "gpuq sets these"),
            ("LD_PRELOAD", "load libraries"),
            ("ld_library_path", "load libraries"),
            ("LD_AUDIT", "load libraries"),
            ("DOCKER_HOST", "container engine"),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", "VRAM commitment"),
            ("xla_python_client_preallocate", "VRAM commitment"),
            ("TF_FORCE_GPU_ALLOW_GROWTH", "framework_memory_hints"),
        ] {
            let e = refused(key, "x");
            assert_eq!(e.field, format!("env.{key}"));
            assert!(e.message.contains("is reserved"), "{key}: {}", e.message);
            assert!(e.message.contains(needle), "{key}: {}", e.message);
        }
    }

    #[test]
    fn refuses_bad_keys_and_values() {
        let long_key = "K".repeat(MAX_KEY_LEN + 1);
        for key in ["", "1ABC", "A-B", "A B", "A=B", "Ä", long_key.as_str()] {
            let e = refused(key, "x");
            assert_eq!(e.field, format!("env.{key}"));
            assert!(e.message.contains("must start with a letter"), "{key:?}");
        }
        let e = refused("BIG", &"v".repeat(MAX_VALUE_BYTES + 1));
        assert_eq!(
            (e.field.as_str(), e.message.contains("32 KiB")),
            ("env.BIG", true)
        );
        let e = refused("NUL", "a\0b");
        assert_eq!(
            (e.field.as_str(), e.message.contains("NUL")),
            ("env.NUL", true)
        );
    }

    #[test]
    fn refuses_too_many() {
        let env: BTreeMap<_, _> = (0..3).map(|i| (format!("K{i}"), String::new())).collect();
        assert!(parse_env(env.clone(), 3).is_ok());
        let e = parse_env(env, 2).err();
        assert_eq!(e.map(|e| e.field), Some("env".to_owned()));
    }
}
