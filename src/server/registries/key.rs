//! The secrets key: 32 bytes kept outside the database, under which registry passwords are
//! sealed. Either given whole (`GPUQ_SECRETS_KEY`, base64), or kept in a file
//! (`<data-dir>/secrets.key`, base64, mode 0600) created the first time a password is stored. A
//! key file its group or others may read is refused: whoever can read it and the database can
//! read every password.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{KeyInit, OsRng};
use chacha20poly1305::{Key, XChaCha20Poly1305};
use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The name of the key file in the data directory.
pub const KEY_FILE: &str = "secrets.key";
/// The environment variable that gives the key whole (base64 of 32 bytes).
pub const KEY_ENV: &str = "GPUQ_SECRETS_KEY";

/// Where the secrets key comes from: a plain setting, made by `gpuq serve` from
/// `GPUQ_SECRETS_KEY` or `--data-dir`. Its `Debug` never shows a key.
#[derive(Clone, Default)]
pub enum SecretsKey {
    /// The key itself, checked when it was given.
    Given(Arc<Key>),
    /// A file holding the key (base64), created with mode 0600 when a password is first stored.
    File(PathBuf),
    /// No key: nothing can be stored, and stored credentials cannot be opened.
    #[default]
    None,
}

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretsKey::Given(_) => f.write_str("SecretsKey::Given(<redacted>)"),
            SecretsKey::File(path) => write!(f, "SecretsKey::File({})", path.display()),
            SecretsKey::None => f.write_str("SecretsKey::None"),
        }
    }
}

/// Why the key cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No key is configured.
    #[error("no secrets key is configured (set {KEY_ENV}, or run gpuq serve with a --data-dir)")]
    None,
    /// The key file may be read by more than its owner.
    #[error(
        "the secrets key file {path} may be read by its group or others (mode {mode:o}); \
         gpuq refuses to use it: run `chmod 600 {path}`"
    )]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file is not there (credentials are opened, never created, without it).
    #[error(
        "the secrets key file {0} does not exist: the credentials were stored under a key this \
         node does not have (give every node the same {KEY_ENV} or key file)"
    )]
    Missing(String),
    /// The key (file or variable) is not base64 of 32 bytes.
    #[error("{0} does not hold a secrets key: expected the base64 of 32 bytes (e.g. `openssl rand -base64 32`)")]
    Malformed(String),
    /// The file could not be read or written.
    #[error("{0}")]
    Io(String),
}

impl SecretsKey {
    /// A key given whole, as base64 of 32 bytes (the value of `GPUQ_SECRETS_KEY`).
    pub fn from_base64(text: &str) -> Result<SecretsKey, KeyError> {
        decode(text)
            .map(|k| SecretsKey::Given(Arc::new(k)))
            .ok_or_else(|| KeyError::Malformed(KEY_ENV.to_owned()))
    }

    /// The key in `<data_dir>/secrets.key`.
    pub fn in_data_dir(data_dir: &Path) -> SecretsKey {
        let dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_owned());
        SecretsKey::File(dir.join(KEY_FILE))
    }

    /// The key to seal with: a key file is created (mode 0600) when there is none yet.
    pub fn for_sealing(&self) -> Result<Key, KeyError> {
        self.load(true)
    }

    /// The key to open with: never created (a new key would open nothing).
    pub fn for_opening(&self) -> Result<Key, KeyError> {
        self.load(false)
    }

    fn load(&self, create: bool) -> Result<Key, KeyError> {
        match self {
            SecretsKey::Given(key) => Ok(**key),
            SecretsKey::None => Err(KeyError::None),
            SecretsKey::File(path) => match read_file(path)? {
                Some(key) => Ok(key),
                None if create => create_file(path),
                None => Err(KeyError::Missing(path.display().to_string())),
            },
        }
    }
}

fn decode(text: &str) -> Option<Key> {
    let bytes = STANDARD.decode(text.trim()).ok()?;
    (bytes.len() == 32).then(|| *Key::from_slice(&bytes))
}

/// The key in `path`, `None` when there is no such file; refused when its group or others may
/// read or write it.
fn read_file(path: &Path) -> Result<Option<Key>, KeyError> {
    let shown = || path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(KeyError::Io(format!("reading {}: {e}", shown()))),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Exposed {
            path: shown(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| KeyError::Io(format!("reading {}: {e}", shown())))?;
    decode(&text)
        .map(Some)
        .ok_or_else(|| KeyError::Malformed(shown()))
}

/// Makes a new key in `path`: written whole to a private file beside it, then linked into place,
/// so a process reading at the same moment never sees half a key, and of two processes making
/// one at once, both end up with the one that was linked first.
fn create_file(path: &Path) -> Result<Key, KeyError> {
    let shown = path.display();
    let io = |what: &str, e: std::io::Error| KeyError::Io(format!("{what} {shown}: {e}"));
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io("creating the folder of", e))?;
    }
    let key = XChaCha20Poly1305::generate_key(&mut OsRng);
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        writeln!(file, "{}", STANDARD.encode(key))?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("writing a new secrets key beside", e));
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            tracing::info!(path = %shown, "created a new secrets key (mode 0600): back it up with the database");
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_file(path)?.ok_or_else(|| KeyError::Missing(shown.to_string()))
        }
        Err(e) => Err(io("creating", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_made_private_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let key = SecretsKey::in_data_dir(&dir.path().join("data"));
        let SecretsKey::File(path) = &key else {
            panic!("{key:?}")
        };
        assert_eq!(
            key.for_opening().unwrap_err(),
            KeyError::Missing(path.display().to_string())
        );
        let made = key.for_sealing().unwrap();
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(key.for_opening().unwrap(), made);
        assert_eq!(key.for_sealing().unwrap(), made, "made once");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = key.for_opening().unwrap_err();
        assert!(
            matches!(refused, KeyError::Exposed { mode: 0o644, .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains("chmod 600"), "{refused}");
    }

    #[test]
    fn a_given_key_is_base64_of_32_bytes_and_never_shown() {
        let text = STANDARD.encode([7u8; 32]);
        let key = SecretsKey::from_base64(&text).unwrap();
        assert_eq!(key.for_opening().unwrap().as_slice(), &[7u8; 32]);
        assert!(!format!("{key:?}").contains(&text));
        for bad in ["", "not base64!", &STANDARD.encode([1u8; 16])] {
            assert!(SecretsKey::from_base64(bad).is_err(), "{bad:?}");
        }
        assert_eq!(SecretsKey::None.for_sealing().unwrap_err(), KeyError::None);
    }
}
