//! What an upstream MCP server is: how it is reached (a child process over stdio, or a Streamable HTTP endpoint),
//! when it starts, which of its tools are denied or offered directly, and the environment a stdio server starts
//! with. Reading these from a file is the gateway's business; this module only holds them.
//!
//! Invariant: a stdio server's environment never holds a variable of [`SECRET_ENV`] from the parent environment.

use std::collections::BTreeMap;

/// When an upstream server's process is started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Startup {
    /// Started with the gateway and kept running.
    #[default]
    Eager,
    /// Started once at gateway start to list its tools, then stopped until the first call needs it.
    Lazy,
}

/// How the gateway reaches an upstream server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP over its stdin and stdout.
    Stdio {
        /// The program to run (looked up on `PATH` when not a path).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Variables of the parent environment passed on besides [`DEFAULT_INHERITED_ENV`] (`inherit_env`
        /// in TOML, `inheritEnv` in JSON); never one of [`SECRET_ENV`].
        inherit_env: Vec<String>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint URL, `http://` or `https://`.
        url: String,
    },
}

/// One upstream MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// How to reach it.
    pub transport: Transport,
    /// When to start it.
    pub startup: Startup,
    /// Tools that are never offered, not even inside the guest.
    pub deny: Vec<String>,
    /// Tools offered to the client directly, next to exec and wait, instead of inside the guest.
    pub direct: Vec<String>,
}

/// The variables of the parent environment every stdio server gets without naming them: the MCP SDKs' default set
/// (what `getDefaultEnvironment` passes on), plus the locale, `LANG` and every `LC_*` variable.
pub const DEFAULT_INHERITED_ENV: [&str; 7] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG"];

/// The variables codemode reads as secrets: the state keys that seal stored runs (`CODEMODE_STATE_KEY`,
/// `CODEMODE_STATE_KEY_FILE`), the key that seals the gateway's `requestState`, and the OTLP export's headers (which
/// carry the collector's credentials). No upstream server is given one from the parent environment, even when its
/// `inherit_env` names it.
pub const SECRET_ENV: [&str; 7] = [
    "CODEMODE_STATE_KEY",
    "CODEMODE_STATE_KEY_FILE",
    "CODEMODE_REQUEST_STATE_KEY",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
];

/// The part of `parent` (the environment of the process that starts it) a stdio server starts with: [`DEFAULT_INHERITED_ENV`], the
/// `LC_*` variables and what `inherit_env` names, minus [`SECRET_ENV`] and values that are shell functions (`()
/// {...}`, which the MCP SDKs also leave out). The server's `env` is set on top of it.
pub fn inherited_env<I>(parent: I, inherit_env: &[String]) -> Vec<(std::ffi::OsString, std::ffi::OsString)>
where
    I: IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
{
    parent
        .into_iter()
        .filter(|(name, value)| {
            let Some(name) = name.to_str() else { return false };
            let wanted = DEFAULT_INHERITED_ENV.contains(&name)
                || name.starts_with("LC_")
                || inherit_env.iter().any(|n| n == name);
            wanted && !SECRET_ENV.contains(&name) && !value.as_encoded_bytes().starts_with(b"()")
        })
        .collect()
}
