//! State at rest: the directory backend's files are its owner's only (0600 in 0700 folders), and with state keys
//! every checkpoint and session file is sealed: it round-trips, a wrong or missing key fails with a message naming
//! the key id, an old key still opens what it sealed after a rotation while new writes use the new key, and an
//! altered, cut, renamed or plain file is refused.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;

use codemode_snapshot::seal::{SEAL_MAGIC, is_sealed};
use codemode_snapshot::{
    CheckpointBackend, FileBackend, Keyring, STATE_DIR_MODE, STATE_FILE_MODE, SessionBackend, StoreError,
};
use serde_json::{Map, Value, json};

use crate::{checkpoint, owner};

const OLD: &str = "2025-01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const NEW: &str = "2026-06:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
const OTHER: &str = "2025-01:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";

fn backend(dir: &Path, keys: Option<&str>) -> FileBackend {
    let keys = keys.map(|spec| Arc::new(Keyring::parse(spec).expect("valid keys")));
    FileBackend::open(dir).expect("the folder opens").without_fsync().with_keys(keys)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("exists").permissions().mode() & 0o777
}

fn values() -> Map<String, Value> {
    json!({ "note": "kept for the next cell", "n": 3 }).as_object().cloned().unwrap()
}

fn sealed_reason(result: Result<impl std::fmt::Debug, StoreError>) -> String {
    match result {
        Err(e @ StoreError::Sealed { .. }) => e.to_string(),
        other => panic!("expected a sealed-file error, got {other:?}"),
    }
}

#[test]
fn files_are_the_owners_only_with_or_without_keys() {
    for keys in [None, Some(NEW)] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        // An existing folder with wider permissions is narrowed.
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let files = backend(&root, keys);
        let cp = checkpoint(owner("s", "r"), 2);
        files.put(&cp).unwrap();
        files.save_session("s", &values()).unwrap();
        for folder in [root.clone(), root.join("runs"), root.join("sessions")] {
            assert_eq!(mode(&folder), STATE_DIR_MODE, "{}", folder.display());
        }
        let run_file = root.join("runs").join(format!("{}.json", cp.run_id));
        assert_eq!(mode(&run_file), STATE_FILE_MODE);
        let sessions: Vec<_> = std::fs::read_dir(root.join("sessions")).unwrap().collect();
        assert_eq!(sessions.len(), 1);
        assert_eq!(mode(&sessions[0].as_ref().unwrap().path()), STATE_FILE_MODE);
    }
}

#[test]
fn sealed_files_round_trip_and_hide_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let files = backend(dir.path(), Some(NEW));
    let cp = checkpoint(owner("s", "r"), 3);
    files.put(&cp).unwrap();
    files.save_session("s", &values()).unwrap();

    let raw = std::fs::read(dir.path().join("runs").join(format!("{}.json", cp.run_id))).unwrap();
    assert!(raw.starts_with(SEAL_MAGIC) && is_sealed(&raw));
    assert_eq!(&raw[SEAL_MAGIC.len() + 1..SEAL_MAGIC.len() + 8], b"2026-06", "the header names the key");
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains("tools.ping") && !text.contains(&cp.run_id), "the source and ids are sealed: {text}");

    assert_eq!(files.get(&cp.run_id).unwrap(), Some(cp.clone()));
    assert_eq!(files.load_session("s").unwrap(), values());
    assert_eq!(files.take(&cp.run_id).unwrap(), Some(cp.clone()));
    assert_eq!(files.get(&cp.run_id).unwrap(), None);

    // Two writes of the same document differ: a fresh nonce each time.
    files.put(&cp).unwrap();
    let first = std::fs::read(dir.path().join("runs").join(format!("{}.json", cp.run_id))).unwrap();
    files.put(&cp).unwrap();
    let second = std::fs::read(dir.path().join("runs").join(format!("{}.json", cp.run_id))).unwrap();
    assert_ne!(first, second);
}

#[test]
fn a_wrong_or_missing_key_fails_with_a_message_that_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cp = checkpoint(owner("s", "r"), 1);
    backend(dir.path(), Some(OLD)).put(&cp).unwrap();
    backend(dir.path(), Some(OLD)).save_session("s", &values()).unwrap();

    // Same key id, other key material: authentication fails.
    let wrong = sealed_reason(backend(dir.path(), Some(OTHER)).get(&cp.run_id));
    assert!(wrong.contains("could not be decrypted with state key \"2025-01\""), "{wrong}");
    assert!(wrong.contains("the key is wrong"), "{wrong}");
    // A keyring without that id.
    let unknown = sealed_reason(backend(dir.path(), Some(NEW)).get(&cp.run_id));
    assert!(unknown.contains("encrypted with state key \"2025-01\", which is not configured (configured: 2026-06)"));
    assert!(unknown.contains("CODEMODE_STATE_KEY"), "{unknown}");
    // No keyring at all.
    let none = sealed_reason(backend(dir.path(), None).get(&cp.run_id));
    assert!(none.contains("no state key is configured; set CODEMODE_STATE_KEY"), "{none}");
    let session = sealed_reason(backend(dir.path(), None).load_session("s"));
    assert!(session.contains("\"2025-01\""), "{session}");
    assert_eq!(StoreError::Sealed { path: dir.path().into(), reason: String::new() }.code().as_str(), "internal_error");
}

#[test]
fn rotation_opens_old_files_and_seals_new_ones_with_the_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let old_run = checkpoint(owner("s", "r"), 1);
    backend(dir.path(), Some(OLD)).put(&old_run).unwrap();

    let rotated = backend(dir.path(), Some(&format!("{NEW},{OLD}")));
    assert_eq!(rotated.get(&old_run.run_id).unwrap(), Some(old_run.clone()), "the old key still opens it");
    let new_run = checkpoint(owner("s", "r2"), 1);
    rotated.put(&new_run).unwrap();
    let raw = std::fs::read(dir.path().join("runs").join(format!("{}.json", new_run.run_id))).unwrap();
    assert_eq!(&raw[SEAL_MAGIC.len() + 1..SEAL_MAGIC.len() + 8], b"2026-06", "new writes use the first key");
    // Rewriting the old run re-seals it under the new key; the old key alone then no longer opens it.
    rotated.put(&old_run).unwrap();
    assert!(backend(dir.path(), Some(OLD)).get(&old_run.run_id).is_err());
    assert_eq!(backend(dir.path(), Some(NEW)).get(&old_run.run_id).unwrap(), Some(old_run));
}

#[test]
fn altered_cut_renamed_or_plain_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = backend(dir.path(), Some(NEW));
    let cp = checkpoint(owner("s", "r"), 2);
    files.put(&cp).unwrap();
    let path = dir.path().join("runs").join(format!("{}.json", cp.run_id));
    let sealed = std::fs::read(&path).unwrap();

    // One flipped bit anywhere after the header.
    for at in [SEAL_MAGIC.len() + 9, sealed.len() / 2, sealed.len() - 1] {
        let mut altered = sealed.clone();
        altered[at] ^= 0x01;
        std::fs::write(&path, &altered).unwrap();
        let reason = sealed_reason(files.get(&cp.run_id));
        assert!(reason.contains("altered"), "byte {at}: {reason}");
    }
    // Cut short.
    std::fs::write(&path, &sealed[..sealed.len() - 20]).unwrap();
    assert!(sealed_reason(files.get(&cp.run_id)).contains("altered"));
    // Copied under another run's name: the name is authenticated too.
    let other = checkpoint(owner("s", "r"), 2);
    std::fs::write(dir.path().join("runs").join(format!("{}.json", other.run_id)), &sealed).unwrap();
    assert!(sealed_reason(files.get(&other.run_id)).contains("copied from another run or session"));
    // A plain file where sealed ones are expected: refused, never resumed.
    std::fs::write(&path, cp.encode()).unwrap();
    let plain = sealed_reason(files.take(&cp.run_id));
    assert!(plain.contains("not encrypted but a state key is configured"), "{plain}");
    // A broken header.
    std::fs::write(&path, [SEAL_MAGIC.as_slice(), &[40, b'x']].concat()).unwrap();
    assert!(sealed_reason(files.get(&cp.run_id)).contains("header is broken"));
}

#[test]
fn key_configuration_errors_name_the_entry_not_the_key() {
    let err = Keyring::parse("k1:c2hvcnQ=").unwrap_err();
    assert_eq!(err.to_string(), "state key entry \"k1:…\" is not `keyid:base64key`: the key is 5 bytes; it must be 32");
    let err = StoreError::from(Keyring::parse("").unwrap_err());
    assert!(err.to_string().starts_with("no state key given"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys");
    std::fs::write(&file, format!("# current first\n{NEW}\n{OLD}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ring = Keyring::from_file(&file).unwrap();
    assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["2026-06", "2025-01"]);
    // Read-only for its owner is as good.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(Keyring::from_file(&file).is_ok());
}

#[test]
fn a_key_file_group_or_others_can_reach_is_refused_with_the_chmod_that_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys");
    std::fs::write(&file, format!("{NEW}\n")).unwrap();
    for mode in [0o644, 0o640, 0o604, 0o660, 0o602, 0o620] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = Keyring::from_file(&file).expect_err("an open key file is refused");
        assert_eq!(
            err.to_string(),
            format!(
                "state key file {path} is accessible by group or others (mode {mode:04o}): run `chmod 600 {path}` so \
                 that only its owner can read it",
                path = file.display()
            )
        );
    }
}
