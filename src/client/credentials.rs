//! Saved credentials (`credentials.json`) written by `gpuq login`.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

use crate::model::Secret;

/// File name of the saved credentials inside the config directory.
pub const CREDENTIALS_FILE: &str = "credentials.json";

/// A server URL and the API token saved for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// Server URL the token belongs to.
    pub url: String,
    /// API token.
    pub token: Secret,
}

/// Picks the config directory from the values of `GPUQ_CONFIG_DIR`,
/// `XDG_CONFIG_HOME` and `HOME`, in that order; empty values count as unset.
pub fn config_dir_from(
    gpuq_config_dir: Option<OsString>,
    xdg_config_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    let set = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(gpuq_config_dir) {
        return Some(dir);
    }
    if let Some(dir) = set(xdg_config_home) {
        return Some(dir.join("gpuq"));
    }
    set(home).map(|h| h.join(".config").join("gpuq"))
}

/// The config directory from the process environment.
pub fn config_dir() -> Result<PathBuf> {
    config_dir_from(
        std::env::var_os("GPUQ_CONFIG_DIR"),
        std::env::var_os("XDG_CONFIG_HOME"),
        std::env::var_os("HOME"),
    )
    .ok_or_else(|| anyhow!("cannot find a config directory: set GPUQ_CONFIG_DIR or HOME"))
}

/// Path of the credentials file inside `dir`.
pub fn credentials_path(dir: &Path) -> PathBuf {
    dir.join(CREDENTIALS_FILE)
}

/// Compares two server URLs, ignoring trailing slashes.
pub fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Saves `creds` to `dir/credentials.json` with mode 0600, atomically
/// (temporary file + rename). Creates `dir` (mode 0700) if needed and
/// returns the file path.
pub fn save(dir: &Path, creds: &Credentials) -> Result<PathBuf> {
    create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = credentials_path(dir);
    let tmp = dir.join(format!(".{CREDENTIALS_FILE}.{}.tmp", std::process::id()));
    let mut text = serde_json::to_string_pretty(creds)?;
    text.push('\n');
    let written = write_private(&tmp, text.as_bytes()).and_then(|()| fs::rename(&tmp, &path));
    if let Err(e) = written {
        // Best effort: the temporary file may not exist.
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(path)
}

/// Loads the credentials saved in `dir`; `Ok(None)` when there are none.
pub fn load(dir: &Path) -> Result<Option<Credentials>> {
    let path = credentials_path(dir);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let creds = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid credentials JSON", path.display()))?;
    Ok(Some(creds))
}

/// Chooses the token for `url`: the explicit one (`--token`/`GPUQ_TOKEN`) if
/// non-empty, else the saved one when it was saved for the same URL.
pub fn resolve_token(
    explicit: Option<&str>,
    saved: Option<&Credentials>,
    url: &str,
) -> Result<Secret> {
    if let Some(token) = explicit.filter(|t| !t.is_empty()) {
        return Ok(token.into());
    }
    match saved {
        Some(c) if same_url(&c.url, url) && !c.token.expose().is_empty() => Ok(c.token.clone()),
        _ => Err(anyhow!(
            "not signed in to {url}: run `gpuq login USERNAME` or set GPUQ_TOKEN"
        )),
    }
}

/// Token for `url` from the explicit value or the credentials in the
/// environment's config directory.
pub fn token_for(explicit: Option<&str>, url: &str) -> Result<Secret> {
    if let Some(token) = explicit.filter(|t| !t.is_empty()) {
        return Ok(token.into());
    }
    let saved = match config_dir() {
        Ok(dir) => load(&dir)?,
        Err(_) => None,
    };
    resolve_token(None, saved.as_ref(), url)
}

#[cfg(unix)]
fn create_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_dir(dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    // The file may predate us with a wider mode: narrow it explicitly.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(bytes)?;
    file.sync_all()
}
