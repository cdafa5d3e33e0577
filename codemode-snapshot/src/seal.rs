//! At-rest encryption of stored state: a [`Keyring`] of named 256-bit keys seals each checkpoint or session document
//! with XChaCha20-Poly1305 (a fresh random 192-bit nonce per write) and opens what any of its keys sealed, so keys
//! can be rotated. Every backend that stores bytes calls [`seal`] before it writes and [`open`] after it reads.
//!
//! Sealed form: `CMSEAL1\n`, one byte of key-id length, the key id, the 24-byte nonce, then the ciphertext with its
//! 16-byte tag. The header and the document's name (run id or session id) are authenticated with it, so a file
//! altered, cut, or copied under another name fails to open. Invariant: with a keyring configured, nothing is
//! read unless it opens under one of its keys (a plain file is refused); without one, a sealed file is refused
//! with a message naming its key id.

use std::borrow::Cow;
use std::path::Path;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// The environment variable that holds the state keys: `keyid:base64key`, several separated by commas or
/// whitespace; the first encrypts, all decrypt.
pub const STATE_KEY_ENV: &str = "CODEMODE_STATE_KEY";

/// The environment variable that names a file of state keys, one `keyid:base64key` per line (`#` comments); read
/// when [`STATE_KEY_ENV`] is unset.
pub const STATE_KEY_FILE_ENV: &str = "CODEMODE_STATE_KEY_FILE";

/// The first bytes of a sealed document.
pub const SEAL_MAGIC: &[u8; 8] = b"CMSEAL1\n";

const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;

/// A state key configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// No key was given.
    #[error("no state key given: expected `keyid:base64key` (32 bytes of key, base64), several separated by commas")]
    Empty,
    /// An entry is not `keyid:base64key`.
    #[error("state key entry {entry:?} is not `keyid:base64key`: {reason}")]
    Malformed {
        /// The entry with its key material left out.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two keys share an id.
    #[error("state key id {0:?} is given twice; every key needs its own id")]
    Duplicate(String),
    /// The key file can be read or written by its group or by others.
    #[error(
        "state key file {path} is accessible by group or others (mode {mode:04o}): run `chmod 600 {path}` so that \
         only its owner can read it"
    )]
    FileMode {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file could not be read.
    #[error("state key file {path} could not be read: {reason}")]
    File {
        /// The file.
        path: String,
        /// The cause.
        reason: String,
    },
}

/// Why a stored document could not be opened; the message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The document is sealed with a key id the keyring does not have.
    #[error(
        "it is encrypted with state key {key_id:?}, which is not configured (configured: {configured}); add that key \
         to {STATE_KEY_ENV} (after the current one) to read it"
    )]
    UnknownKey {
        /// The key id in the header.
        key_id: String,
        /// The configured key ids.
        configured: String,
    },
    /// The document is sealed but no keyring is configured.
    #[error(
        "it is encrypted with state key {key_id:?} and no state key is configured; set {STATE_KEY_ENV} or {STATE_KEY_FILE_ENV}"
    )]
    NoKey {
        /// The key id in the header.
        key_id: String,
    },
    /// Authentication failed: the key is wrong or the document was altered.
    #[error(
        "it could not be decrypted with state key {key_id:?}: the key is wrong, or the file was altered, cut or \
         copied from another run or session; it was not used"
    )]
    Tampered {
        /// The key id in the header.
        key_id: String,
    },
    /// The header is broken.
    #[error("its encryption header is broken ({0}); it was not used")]
    Header(String),
    /// A keyring is configured and the document is not sealed.
    #[error(
        "it is not encrypted but a state key is configured, so it is refused (it may have been planted); remove it, \
         or unset the state key to read plain files"
    )]
    Plain,
}

/// One named key.
struct StateKey {
    id: String,
    cipher: XChaCha20Poly1305,
}

/// The state keys: the first seals, every one opens what it sealed (by the key id in the header).
pub struct Keyring {
    keys: Vec<StateKey>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key material never reaches a log.
        f.debug_struct("Keyring").field("key_ids", &self.key_ids().collect::<Vec<_>>()).finish()
    }
}

impl Keyring {
    /// Parses `keyid:base64key` entries separated by commas, whitespace or newlines (`#` starts a comment that runs
    /// to the end of its line). A key id is 1 to 64 of `A-Z a-z 0-9 . _ -`; a key is 32 bytes, base64 (standard
    /// alphabet, padding optional).
    ///
    /// # Errors
    ///
    /// No entry, a malformed entry, a key of another length, or a repeated id.
    pub fn parse(spec: &str) -> Result<Keyring, KeyError> {
        let mut keys: Vec<StateKey> = Vec::new();
        let entries = spec
            .lines()
            .map(|line| line.split('#').next().unwrap_or(""))
            .flat_map(|line| line.split(|c: char| c == ',' || c.is_whitespace()))
            .filter(|e| !e.is_empty());
        for entry in entries {
            let malformed = |reason: &str| KeyError::Malformed {
                entry: entry.split(':').next().unwrap_or("").to_owned() + ":…",
                reason: reason.to_owned(),
            };
            let Some((id, material)) = entry.split_once(':') else {
                return Err(malformed("no `:` between the key id and the key"));
            };
            if id.is_empty()
                || id.len() > 64
                || !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            {
                return Err(malformed("a key id is 1 to 64 of A-Z a-z 0-9 . _ -"));
            }
            let bytes = base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT
                .decode(material)
                .map_err(|_| malformed("the key is not valid base64"))?;
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
                .map_err(|_| malformed(&format!("the key is {} bytes; it must be 32", bytes.len())))?;
            if keys.iter().any(|k| k.id == id) {
                return Err(KeyError::Duplicate(id.to_owned()));
            }
            keys.push(StateKey { id: id.to_owned(), cipher });
        }
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Keyring { keys })
    }

    /// The keys of a key file (see [`Keyring::parse`]). Like ssh with a private key, a file that its group or
    /// others may read or write is refused (on Unix): its keys cannot be trusted to be secret.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is open to group or others ([`KeyError::FileMode`]), or its keys cannot be parsed.
    pub fn from_file(path: &Path) -> Result<Keyring, KeyError> {
        let file_error = |e: std::io::Error| KeyError::File { path: path.display().to_string(), reason: e.to_string() };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            // The mode of the file itself, through any symbolic link, as the read below sees it.
            let mode = std::fs::metadata(path).map_err(file_error)?.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(KeyError::FileMode { path: path.display().to_string(), mode });
            }
        }
        let text = std::fs::read_to_string(path).map_err(file_error)?;
        Keyring::parse(&text)
    }

    /// The keys the environment configures: [`STATE_KEY_ENV`], else the file [`STATE_KEY_FILE_ENV`] names, else
    /// none.
    ///
    /// # Errors
    ///
    /// A variable is set and what it gives cannot be used.
    pub fn from_env() -> Result<Option<Keyring>, KeyError> {
        if let Some(spec) = std::env::var_os(STATE_KEY_ENV) {
            return Keyring::parse(&spec.to_string_lossy()).map(Some);
        }
        if let Some(path) = std::env::var_os(STATE_KEY_FILE_ENV) {
            return Keyring::from_file(Path::new(&path)).map(Some);
        }
        Ok(None)
    }

    /// The key ids, the sealing one first.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    /// `plaintext` sealed with the first key; `name` (the run id or session id) is authenticated with it.
    pub fn seal(&self, name: &str, plaintext: &[u8]) -> Vec<u8> {
        let key = &self.keys[0];
        let header = header(&key.id);
        let nonce = XNonce::generate();
        let aad = [header.as_slice(), name.as_bytes()].concat();
        let sealed = key
            .cipher
            .encrypt(&nonce, Payload { msg: plaintext, aad: &aad })
            .expect("XChaCha20-Poly1305 encrypts any message that fits in memory");
        let mut out = Vec::with_capacity(header.len() + NONCE_BYTES + sealed.len());
        out.extend_from_slice(&header);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`Keyring::seal`] sealed under `name` with any of the keys.
    ///
    /// # Errors
    ///
    /// The document is not sealed, its key id is not configured, or it fails authentication.
    pub fn open(&self, name: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let (key_id, header_len) = parse_header(sealed)?.ok_or(SealError::Plain)?;
        let Some(key) = self.keys.iter().find(|k| k.id == key_id) else {
            return Err(SealError::UnknownKey {
                key_id: key_id.to_owned(),
                configured: self.key_ids().collect::<Vec<_>>().join(", "),
            });
        };
        let rest = &sealed[header_len..];
        if rest.len() < NONCE_BYTES + TAG_BYTES {
            return Err(SealError::Tampered { key_id: key_id.to_owned() });
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_BYTES);
        let nonce = XNonce::try_from(nonce).expect("the nonce slice has the nonce's length");
        let aad = [&sealed[..header_len], name.as_bytes()].concat();
        key.cipher
            .decrypt(&nonce, Payload { msg: ciphertext, aad: &aad })
            .map_err(|_| SealError::Tampered { key_id: key_id.to_owned() })
    }
}

fn header(key_id: &str) -> Vec<u8> {
    let mut header = Vec::with_capacity(SEAL_MAGIC.len() + 1 + key_id.len());
    header.extend_from_slice(SEAL_MAGIC);
    header.push(u8::try_from(key_id.len()).expect("key ids are at most 64 bytes"));
    header.extend_from_slice(key_id.as_bytes());
    header
}

/// The key id and header length of a sealed document; `None` when it is not sealed.
fn parse_header(bytes: &[u8]) -> Result<Option<(&str, usize)>, SealError> {
    let Some(rest) = bytes.strip_prefix(SEAL_MAGIC.as_slice()) else { return Ok(None) };
    let Some((&len, rest)) = rest.split_first() else { return Err(SealError::Header("no key id".into())) };
    let len = usize::from(len);
    if len == 0 || rest.len() < len {
        return Err(SealError::Header("the key id is cut".into()));
    }
    let id = std::str::from_utf8(&rest[..len]).map_err(|_| SealError::Header("the key id is not text".into()))?;
    Ok(Some((id, SEAL_MAGIC.len() + 1 + len)))
}

/// Whether `bytes` is a sealed document.
pub fn is_sealed(bytes: &[u8]) -> bool {
    bytes.starts_with(SEAL_MAGIC)
}

/// What a backend writes for document `name`: sealed when a keyring is configured, else `plaintext` as it is.
pub fn seal<'a>(keys: Option<&Keyring>, name: &str, plaintext: &'a [u8]) -> Cow<'a, [u8]> {
    match keys {
        Some(keys) => Cow::Owned(keys.seal(name, plaintext)),
        None => Cow::Borrowed(plaintext),
    }
}

/// What a backend read for document `name`, opened: with a keyring, it must open under one of its keys; without
/// one, it must not be sealed.
///
/// # Errors
///
/// See [`SealError`].
pub fn open<'a>(keys: Option<&Keyring>, name: &str, bytes: &'a [u8]) -> Result<Cow<'a, [u8]>, SealError> {
    match keys {
        Some(keys) => keys.open(name, bytes).map(Cow::Owned),
        None => match parse_header(bytes)? {
            Some((key_id, _)) => Err(SealError::NoKey { key_id: key_id.to_owned() }),
            None => Ok(Cow::Borrowed(bytes)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";

    #[test]
    fn keys_parse_and_debug_shows_ids_only() {
        let ring = Keyring::parse(&format!("# rotation\n{K2}\n{K1}")).expect("valid");
        assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["k2", "k1"]);
        assert!(!format!("{ring:?}").contains("ICEi"));
        assert_eq!(Keyring::parse(" ,\n").unwrap_err(), KeyError::Empty);
        assert!(matches!(Keyring::parse("k1:AAAA"), Err(KeyError::Malformed { .. })));
        assert!(matches!(Keyring::parse("nokey"), Err(KeyError::Malformed { .. })));
        assert!(matches!(Keyring::parse(&format!("{K1},{K1}")), Err(KeyError::Duplicate(_))));
        let err = Keyring::parse("k1:AAAA").unwrap_err().to_string();
        assert!(!err.contains("AAAA"), "key material stays out of messages: {err}");
    }

    #[test]
    fn seal_round_trips_and_binds_the_name() {
        let ring = Keyring::parse(K1).unwrap();
        let sealed = ring.seal("cm_a", b"{\"x\":1}");
        assert!(is_sealed(&sealed));
        assert_ne!(ring.seal("cm_a", b"{\"x\":1}"), sealed, "a fresh nonce per write");
        assert_eq!(ring.open("cm_a", &sealed).unwrap(), b"{\"x\":1}");
        assert!(matches!(ring.open("cm_b", &sealed), Err(SealError::Tampered { .. })));
        assert_eq!(ring.open("cm_a", b"{}"), Err(SealError::Plain));
        assert!(matches!(open(None, "cm_a", &sealed), Err(SealError::NoKey { .. })));
        assert_eq!(open(None, "cm_a", b"{}").unwrap().as_ref(), b"{}");
    }
}
