use std::ffi::OsString;
use std::path::PathBuf;

use crate::client::credentials::{
    config_dir_from, credentials_path, load, resolve_token, save, Credentials,
};

fn creds(url: &str, token: &str) -> Credentials {
    Credentials {
        url: url.to_owned(),
        token: token.into(),
    }
}

#[test]
fn save_load_round_trip() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("nested").join("gpuq");
    assert_eq!(load(&dir).expect("no file is fine"), None);
    let c = creds("http://h:3000", "gpuq_secret");
    let path = save(&dir, &c).expect("saves");
    assert_eq!(path, credentials_path(&dir));
    assert_eq!(load(&dir).expect("loads"), Some(c));
    // Overwriting works and leaves no temporary files behind.
    let c2 = creds("http://h:3000", "gpuq_other");
    save(&dir, &c2).expect("saves again");
    assert_eq!(load(&dir).expect("loads"), Some(c2));
    let names: Vec<_> = std::fs::read_dir(&dir)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, [OsString::from("credentials.json")]);
}

#[cfg(unix)]
#[test]
fn file_mode_is_0600() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = credentials_path(tmp.path());
    // A pre-existing, world-readable file is narrowed too.
    std::fs::write(&path, "{}").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    save(tmp.path(), &creds("http://h", "t")).expect("saves");
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn corrupt_file_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(credentials_path(tmp.path()), "not json").expect("write");
    let err = format!("{:#}", load(tmp.path()).expect_err("corrupt"));
    assert!(err.contains("credentials.json"), "{err}");
}

#[test]
fn debug_hides_the_token() {
    assert!(!format!("{:?}", creds("http://h", "gpuq_secret")).contains("gpuq_secret"));
}

#[test]
fn token_resolution() {
    let saved = creds("http://h:3000/", "saved");
    // Explicit token wins.
    assert_eq!(
        resolve_token(Some("explicit"), Some(&saved), "http://other").expect("ok"),
        "explicit".into()
    );
    // Saved token is used for the same URL (trailing slash ignored)...
    assert_eq!(
        resolve_token(None, Some(&saved), "http://h:3000").expect("ok"),
        "saved".into()
    );
    assert_eq!(
        resolve_token(Some(""), Some(&saved), "http://h:3000").expect("ok"),
        "saved".into()
    );
    // ...but not for another one.
    let err = resolve_token(None, Some(&saved), "http://h:4000")
        .expect_err("mismatch")
        .to_string();
    assert_eq!(
        err,
        "not signed in to http://h:4000: run `gpuq login USERNAME` or set GPUQ_TOKEN"
    );
    assert!(resolve_token(None, None, "http://h:3000").is_err());
}

#[test]
fn config_dir_precedence() {
    let s = |v: &str| Some(OsString::from(v));
    assert_eq!(
        config_dir_from(s("/g"), s("/x"), s("/home/u")),
        Some(PathBuf::from("/g"))
    );
    assert_eq!(
        config_dir_from(None, s("/x"), s("/home/u")),
        Some(PathBuf::from("/x/gpuq"))
    );
    assert_eq!(
        config_dir_from(s(""), s(""), s("/home/u")),
        Some(PathBuf::from("/home/u/.config/gpuq"))
    );
    assert_eq!(config_dir_from(None, None, None), None);
}
