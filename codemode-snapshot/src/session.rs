//! `SessionStore`: the small JSON values a guest keeps per session with `store(key, value)` / `load(key)`, across
//! cells, turns and (with a durable backend) restarts.
//!
//! Invariant: a session never holds more than `max_keys` keys, no key is longer than `max_key_chars` characters and
//! no value encodes to more than `max_value_bytes`; a refused write changes nothing. Writes are read-modify-write
//! of the session's document in a local backend, serialized within the process (last writer wins across
//! processes), and one row per key in a database backend.

use std::sync::Arc;

use serde_json::Value;

use crate::{FleetBackend, LocalFleet, StoreError};

/// Bounds of one session's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Longest key, in characters (default 128).
    pub max_key_chars: usize,
    /// Largest value, in bytes of compact JSON (default 64 KiB).
    pub max_value_bytes: usize,
    /// Most keys per session (default 256).
    pub max_keys: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits { max_key_chars: 128, max_value_bytes: 64 * 1024, max_keys: 256 }
    }
}

/// Per-session key/value store backing the guest's `store` and `load`.
#[derive(Clone)]
pub struct SessionStore {
    backend: Arc<dyn FleetBackend>,
    limits: SessionLimits,
}

impl SessionStore {
    /// A store over `backend` with the default limits.
    pub fn new(backend: Arc<dyn FleetBackend>) -> Self {
        SessionStore::with_limits(backend, SessionLimits::default())
    }

    /// A store over `backend` with other limits.
    pub fn with_limits(backend: Arc<dyn FleetBackend>, limits: SessionLimits) -> Self {
        SessionStore { backend, limits }
    }

    /// A store kept in this process only.
    pub fn in_memory() -> Self {
        SessionStore::new(Arc::new(LocalFleet::memory()))
    }

    /// The limits.
    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// Stores `value` under `key` in `session`, replacing an earlier value.
    ///
    /// # Errors
    ///
    /// `KeyLength`, `ValueTooLarge` or `TooManyKeys` past a bound (code `invalid_input`), or a backend error.
    pub async fn store(&self, session: &str, key: &str, value: Value) -> Result<(), StoreError> {
        self.check_key(key)?;
        let size = serde_json::to_vec(&value).expect("JSON values always serialize").len();
        if size > self.limits.max_value_bytes {
            return Err(StoreError::ValueTooLarge { size, max: self.limits.max_value_bytes });
        }
        self.backend.session_put(session, key, &value, self.limits.max_keys).await
    }

    /// The value stored under `key` in `session`, `None` when there is none.
    ///
    /// # Errors
    ///
    /// `KeyLength` for an empty or too long key, or a backend error.
    pub async fn load(&self, session: &str, key: &str) -> Result<Option<Value>, StoreError> {
        self.check_key(key)?;
        self.backend.session_get(session, key).await
    }

    /// Removes `key` from `session`; `true` when it was there.
    ///
    /// # Errors
    ///
    /// `KeyLength` for an empty or too long key, or a backend error.
    pub async fn remove(&self, session: &str, key: &str) -> Result<bool, StoreError> {
        self.check_key(key)?;
        self.backend.session_remove(session, key).await
    }

    /// The keys of `session`, in insertion order.
    ///
    /// # Errors
    ///
    /// A backend error.
    pub async fn keys(&self, session: &str) -> Result<Vec<String>, StoreError> {
        self.backend.session_keys(session).await
    }

    /// Removes every value of `session` (at session end).
    ///
    /// # Errors
    ///
    /// A backend error.
    pub async fn clear(&self, session: &str) -> Result<(), StoreError> {
        self.backend.session_clear(session).await
    }

    fn check_key(&self, key: &str) -> Result<(), StoreError> {
        let len = key.chars().count();
        if len == 0 || len > self.limits.max_key_chars {
            return Err(StoreError::KeyLength { len, max: self.limits.max_key_chars });
        }
        Ok(())
    }
}
