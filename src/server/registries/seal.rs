//! Sealing a registry password: XChaCha20-Poly1305 with a random 24-byte nonce (large enough
//! that random nonces never repeat under one key), the registry host and username bound as
//! associated data. What is stored is the nonce followed by the ciphertext and its tag.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

/// Bytes of the nonce at the start of a sealed value.
const NONCE_LEN: usize = 24;

/// What the seal is bound to: a sealed password opens only for the host and username it was
/// sealed for (a row copied to another host, or given another username, fails to open).
fn associated(host: &str, username: &str) -> Vec<u8> {
    let mut ad = b"gpuq registry credentials v1\0".to_vec();
    ad.extend_from_slice(host.as_bytes());
    ad.push(0);
    ad.extend_from_slice(username.as_bytes());
    ad
}

/// `password` sealed under `key` for `host` and `username` (`None` only past the cipher's length
/// limit, 256 GiB, or out of memory).
pub fn seal(key: &Key, host: &str, username: &str, password: &str) -> Option<Vec<u8>> {
    let cipher = XChaCha20Poly1305::new(key);
    let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
    let ad = associated(host, username);
    let payload = Payload {
        msg: password.as_bytes(),
        aad: &ad,
    };
    let sealed = cipher.encrypt(&nonce, payload).ok()?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Some(out)
}

/// The password sealed in `sealed` for `host` and `username`, or `None` when it does not open
/// (another key, another host or username, or altered bytes).
pub fn open(key: &Key, host: &str, username: &str, sealed: &[u8]) -> Option<String> {
    if sealed.len() < NONCE_LEN {
        return None;
    }
    let (nonce, body) = sealed.split_at(NONCE_LEN);
    let cipher = XChaCha20Poly1305::new(key);
    let ad = associated(host, username);
    let plain = cipher
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: body,
                aad: &ad,
            },
        )
        .ok()?;
    String::from_utf8(plain).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_password_opens_only_for_its_key_host_and_username() {
        let key = Key::from([1u8; 32]);
        let other = Key::from([2u8; 32]);
        let sealed = seal(&key, "r.io:5000", "bot", "s3cret-pw").unwrap();
        assert!(!sealed.windows("s3cret-pw".len()).any(|w| w == b"s3cret-pw"));
        assert_eq!(
            open(&key, "r.io:5000", "bot", &sealed).as_deref(),
            Some("s3cret-pw")
        );
        assert_eq!(open(&other, "r.io:5000", "bot", &sealed), None);
        assert_eq!(open(&key, "evil.io:5000", "bot", &sealed), None);
        assert_eq!(open(&key, "r.io:5000", "admin", &sealed), None);
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(open(&key, "r.io:5000", "bot", &flipped), None);
        assert_eq!(open(&key, "r.io:5000", "bot", &sealed[..10]), None);
        assert_ne!(
            seal(&key, "r.io:5000", "bot", "s3cret-pw").unwrap(),
            sealed,
            "a fresh nonce each time"
        );
    }
}
