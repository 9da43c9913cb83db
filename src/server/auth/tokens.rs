//! API tokens: random secrets shown once; only their SHA-256 is stored.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Every token starts with this, so a leaked one is easy to recognise in logs and scanners.
pub const PREFIX: &str = "gpuq_";

/// A fresh token: the prefix and a [`random_hex`] secret.
pub fn generate() -> String {
    format!("{PREFIX}{}", random_hex())
}

/// A fresh secret: 32 random bytes from the OS, in hex.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The digest stored for, and looked up by, a token (or any other secret kept only so).
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_and_digest_stably() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert!(a.starts_with(PREFIX));
        assert_eq!(a.len(), PREFIX.len() + 64);
        assert_eq!(digest(&a), digest(&a));
        assert_ne!(digest(&a), digest(&b));
    }
}
