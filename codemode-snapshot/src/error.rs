//! The one error enum of the crate and its projection onto the bridge's failure codes.
//!
//! The run-store messages are the reference's exact model-visible texts (with their final period, unlike our own
//! messages); everything a model can cause maps to `invalid_input`, host faults to `internal_error`.

use std::path::PathBuf;

use codemode_bridge::ErrorCode;

/// Why a run-store or session-store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Stored runs plus reservations reached the process-wide cap.
    #[error("too many suspended code mode runs.")]
    TooManyRuns,
    /// The owner (the gateway's principal) holds its whole share of the places under the cap.
    #[error(
        "too many suspended code mode runs for this principal: it holds {share}, its share (max_suspended_runs) of \
         the {cap} places; finish its waiting runs with wait (or let them expire) before starting another that \
         suspends"
    )]
    TooManyRunsForOwner {
        /// The places one owner may hold.
        share: usize,
        /// The process-wide cap the share is taken from.
        cap: usize,
    },
    /// The run id is unknown, expired, already resumed, aborted or malformed.
    #[error("code mode run is unavailable or expired.")]
    Unavailable,
    /// The run was created by another agent run.
    #[error("code mode run belongs to a different agent run.")]
    DifferentAgentRun,
    /// The run was created in another session (or by another agent).
    #[error("code mode run belongs to a different session.")]
    DifferentSession,
    /// The run was parked under another tool catalog (other tools, or a tool whose definition changed); it stays
    /// parked for a caller with that catalog.
    #[error("code mode run was started with a different tool catalog and cannot be resumed here.")]
    DifferentCatalog,
    /// The run called a tool that this engine's catalog no longer has, or has with another contract (an upstream
    /// server changed its tools): a resume could replay or go on with a tool the program was not written for. The
    /// run stays parked until its TTL, for an engine whose tools still match (another replica).
    #[error(
        "code mode run called {tool}, which {change} since it started; the run cannot resume with these tools. \
         Read the tool's declaration again and run the program again with exec."
    )]
    ToolChanged {
        /// The tool's callable name (`MCP.<server>.<tool>` or the global).
        tool: String,
        /// What happened to it: "was removed" or "changed its input schema".
        change: String,
    },
    /// The run is stored, but this process cannot open its checkpoint (no state key, another key, a tampered or
    /// corrupt record): nothing was claimed or changed, so a process that can open it resumes it.
    #[error(
        "code mode run {run_id} exists, but this replica cannot open its stored state: {detail}. The run was left as \
         it was; call wait again to reach a replica that can open it (one with the run's state key)"
    )]
    Unreadable {
        /// The run.
        run_id: String,
        /// Why, from the backend: the key id it needs, or what is wrong with the record.
        detail: String,
    },
    /// Another resume of this run is in flight.
    #[error("code mode run is already being resumed.")]
    AlreadyResuming,
    /// The encoded checkpoint is larger than `maxSnapshotBytes`.
    #[error("code mode snapshot is over maxSnapshotBytes ({max}): at least {size} bytes")]
    SnapshotTooLarge {
        /// Encoded size of the checkpoint, counted up to the point it passed the limit.
        size: usize,
        /// The limit.
        max: u64,
    },
    /// A checkpoint handed to the store has a run id that is not `cm_<uuid>`.
    #[error("invalid code mode run id {0:?}")]
    InvalidRunId(String),
    /// A session-store key is empty or too long.
    #[error("store key must be 1 to {max} characters long, got {len}")]
    KeyLength {
        /// The key's length in characters.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A session-store value is too large once encoded as JSON.
    #[error("store value is {size} bytes of JSON, over the limit of {max} bytes")]
    ValueTooLarge {
        /// Encoded size of the value.
        size: usize,
        /// The bound.
        max: usize,
    },
    /// A session already holds the maximum number of keys.
    #[error("session store is full: at most {max} keys per session; overwrite or remove a key first")]
    TooManyKeys {
        /// The bound.
        max: usize,
    },
    /// The durable backend could not read or write a file.
    #[error("state backend i/o failed at {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The backend answered for one run with the checkpoint of another; it is refused, never resumed.
    #[error(
        "the checkpoint stored for run {run_id} is the checkpoint of run {found}; refused, the run was not resumed"
    )]
    ForeignCheckpoint {
        /// The run asked for.
        run_id: String,
        /// The run id inside the checkpoint.
        found: String,
    },
    /// A park lost a compare-and-set: the run was parked again, finished, aborted or claimed by another resumer
    /// since this one claimed it, so this (older) state is not written.
    #[error(
        "code mode run {run_id} changed while it was being resumed (generation {stored}, expected {expected}); this \
         resume's state was not saved. Call wait again to continue from the newer state."
    )]
    Stale {
        /// The run.
        run_id: String,
        /// The generation the writer claimed.
        expected: u32,
        /// The generation stored now (0: none).
        stored: u32,
    },
    /// The shared store (a database) failed or could not be reached.
    #[error("run store backend failed: {0}")]
    Backend(String),
    /// A stored file could not be opened with the configured state keys (see `seal`): the message says why and what
    /// to set.
    #[error("state file {path} was not used: {reason}")]
    Sealed {
        /// The file.
        path: PathBuf,
        /// Why, naming the key id.
        reason: String,
    },
    /// The state key configuration cannot be used.
    #[error("{0}")]
    Key(#[from] crate::seal::KeyError),
    /// A stored file could not be decoded.
    #[error("corrupt state file {path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl StoreError {
    /// The failure code a `failed` result carries for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::TooManyRuns
            | StoreError::TooManyRunsForOwner { .. }
            | StoreError::Unavailable
            | StoreError::DifferentAgentRun
            | StoreError::DifferentSession
            | StoreError::AlreadyResuming
            | StoreError::ToolChanged { .. }
            | StoreError::KeyLength { .. }
            | StoreError::ValueTooLarge { .. }
            | StoreError::TooManyKeys { .. } => ErrorCode::InvalidInput,
            StoreError::SnapshotTooLarge { .. } => ErrorCode::SnapshotLimitExceeded,
            StoreError::Stale { .. } => ErrorCode::InvalidInput,
            StoreError::Backend(_) => ErrorCode::RuntimeUnavailable,
            StoreError::DifferentCatalog => ErrorCode::RuntimeUnavailable,
            StoreError::InvalidRunId(_)
            | StoreError::Io { .. }
            | StoreError::Corrupt { .. }
            | StoreError::Sealed { .. }
            | StoreError::Unreadable { .. }
            | StoreError::Key(_)
            | StoreError::ForeignCheckpoint { .. } => ErrorCode::InternalError,
        }
    }

    /// The error a claim of `run_id` answers when its stored checkpoint did not open (`cause`): the run exists,
    /// and this process left it for one that can open it.
    pub fn unreadable(run_id: &str, cause: &StoreError) -> Self {
        StoreError::Unreadable { run_id: run_id.to_owned(), detail: cause.to_string() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io { path: path.into(), source }
    }
}
