//! The catalog's error enum.
//!
//! Messages are lowercase without a final period, except the two limit messages, which are guest-visible and
//! keep the reference's exact wording. No message carries a catalog id.

/// What can go wrong building or querying a catalog.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// No suffix length gave a free callable name.
    #[error("could not allocate a unique code mode callable name")]
    NameAllocation,
    /// `catalog.search` got a limit that is not a positive integer.
    #[error("limit must be a positive integer.")]
    InvalidLimit,
    /// `catalog.search` got a limit above the configured maximum.
    #[error("limit must be a positive integer no greater than {max}.")]
    LimitTooLarge {
        /// The configured maximum.
        max: u32,
    },
    /// An API path with `.` or `..` segments.
    #[error("api path \"{path}\" is rejected: '.' and '..' segments are not allowed")]
    InvalidApiPath {
        /// The path as the guest gave it.
        path: String,
    },
    /// An API path that names no virtual file.
    #[error("unknown api path \"{path}\"; API.list() shows the available files")]
    UnknownApiPath {
        /// The path as the guest gave it.
        path: String,
    },
    /// `$api` named a server or tool that is not in the run.
    #[error(
        "unknown MCP tool \"{tool}\" on server \"{server}\"; Object.keys(MCP) lists the servers and Object.keys(MCP.<server>) their tools"
    )]
    UnknownMcpTool {
        /// The server's own name.
        server: String,
        /// The tool as the guest named it (empty when the server is unknown).
        tool: String,
    },
}
