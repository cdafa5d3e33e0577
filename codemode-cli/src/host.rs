//! The CLI's tool host: the embedded read-only `read` and `list` tools over a root folder, plus stubbed tools from
//! a `--catalog` file so programs can be dry-run without side effects.
//!
//! Invariant: every path the guest passes is resolved inside the root (after following symlinks); nothing outside
//! it is read, listed or even looked at, and no tool of this host writes anything. `read` holds at most what it
//! returns plus one chunk, stops when its call is dropped, and opens only regular files.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use async_trait::async_trait;
use codemode::EffectClass;
use codemode::ToolDefinition;
use codemode::{AbortSignal, CallContext, ToolError, ToolHost};
use serde::Deserialize;
use serde_json::{Value, json};

/// Lines `read` returns when no `limit` is given.
const DEFAULT_READ_LINES: u64 = 2_000;
/// Entries `list` returns at most.
const MAX_LIST_ENTRIES: usize = 1_000;
/// Symbolic links the jail follows for one path before it gives up (Linux's `ELOOP` limit).
const MAX_SYMLINKS: usize = 40;
/// Bytes `read` reads at a time; the cancel flag is checked between chunks.
const READ_CHUNK: usize = 64 * 1024;
/// Content bytes one `read` returns at most (the host refuses tool results over 8 MiB anyway).
const MAX_READ_CONTENT: usize = 4 * 1024 * 1024;

/// What a stubbed tool answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stub {
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    echo: bool,
}

#[derive(Deserialize)]
struct CatalogFile {
    tools: Vec<CatalogTool>,
}

#[derive(Deserialize)]
struct CatalogTool {
    #[serde(flatten)]
    definition: ToolDefinition,
    #[serde(default)]
    stub: Option<Stub>,
}

/// The embedded tools and those of the catalog file, each with its stub (embedded tools have none).
pub fn tools(catalog: Option<&Path>) -> anyhow::Result<Vec<(ToolDefinition, Option<Stub>)>> {
    let mut tools = vec![(read_tool(), None), (list_tool(), None)];
    if let Some(path) = catalog {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading the catalog {}", path.display()))?;
        let file: CatalogFile = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a tool catalog: expected {{\"tools\": [{{\"name\", \"description\", \"parameters\", \
                 \"stub\"?}}]}}",
                path.display()
            )
        })?;
        for tool in file.tools {
            tools.push((tool.definition, tool.stub));
        }
    }
    Ok(tools)
}

fn read_tool() -> ToolDefinition {
    ToolDefinition::new(
        "read",
        "Read a UTF-8 text file under the root folder, by lines.",
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "File path, relative to the root folder" },
                "offset": { "type": "integer", "minimum": 0, "description": "First line to return (0-based)" },
                "limit": { "type": "integer", "minimum": 1, "description": "Most lines to return (default 2000)" }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    )
    .output_schema(json!({
        "type": "object",
        "properties": {
            "path": { "type": "string" },
            "content": { "type": "string" },
            "offset": { "type": "integer" },
            "lines": { "type": "integer" },
            "totalLines": { "type": "integer" }
        },
        "required": ["path", "content", "offset", "lines", "totalLines"],
        "additionalProperties": false
    }))
    .replay_safe(true)
    .effect(EffectClass::Read)
}

fn list_tool() -> ToolDefinition {
    ToolDefinition::new(
        "list",
        "List the entries of a folder under the root folder.",
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "Folder path, relative to the root folder (default .)" }
            },
            "additionalProperties": false
        }),
    )
    .output_schema(json!({
        "type": "object",
        "properties": {
            "path": { "type": "string" },
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": { "type": "string" },
                        "type": { "type": "string", "enum": ["file", "dir", "other"] },
                        "size": { "type": "integer" }
                    },
                    "required": ["name", "type", "size"],
                    "additionalProperties": false
                }
            },
            "truncated": { "type": "boolean" }
        },
        "required": ["path", "entries", "truncated"],
        "additionalProperties": false
    }))
    .replay_safe(true)
    .effect(EffectClass::Read)
}

/// The CLI's `ToolHost`.
pub struct CliHost {
    root: PathBuf,
    stubs: HashMap<String, Stub>,
    /// One clone per `read` running on a blocking thread; see [`CliHost::reads_in_flight`].
    reads: Arc<()>,
}

/// Sets the cancel flag of a blocking `read` when the tool call's future is dropped (a deadline, an abort).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl CliHost {
    /// A host reading under `root`, answering the catalog's stubbed tools.
    pub fn new(root: &Path, tools: &[(ToolDefinition, Option<Stub>)]) -> anyhow::Result<CliHost> {
        let root =
            root.canonicalize().with_context(|| format!("the root folder {} is not readable", root.display()))?;
        let stubs = tools.iter().filter_map(|(d, s)| s.clone().map(|s| (d.name.clone(), s))).collect();
        Ok(CliHost { root, stubs, reads: Arc::new(()) })
    }

    /// How many `read` calls still run on a blocking thread, including those whose call was dropped and which
    /// have not yet seen the cancel flag (at most one chunk later).
    pub fn reads_in_flight(&self) -> usize {
        Arc::strong_count(&self.reads) - 1
    }

    /// Resolves a guest path inside the root, or says why not.
    ///
    /// The jail tells nothing about the world outside the root: the path is resolved one component at a time,
    /// following symlinks by hand, and only paths inside the root are ever looked at. Whatever leaves the root
    /// (`..`, an absolute symlink, a relative one that climbs out) fails with the same code and message whether
    /// its target exists or not, before anything outside is touched.
    fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let outside = || {
            ToolError::with_code(
                "invalid_input",
                format!("\"{path}\" is outside the root folder; use paths relative to it"),
            )
        };
        let missing = || ToolError::new(format!("\"{path}\" does not exist under the root folder"));
        let relative = path.trim_start_matches('/');
        // Components still to resolve, next first.
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, Path::new(relative)).ok_or_else(outside)?;
        // A path that climbs out as written is outside, whether or not its first components exist.
        let mut depth = 0usize;
        for part in todo.iter().rev() {
            if part == ".." {
                depth = depth.checked_sub(1).ok_or_else(outside)?;
            } else {
                depth += 1;
            }
        }
        let mut current = self.root.clone();
        let mut links = 0;
        while let Some(part) = todo.pop() {
            if part == ".." {
                if current == self.root {
                    return Err(outside());
                }
                current.pop();
                continue;
            }
            let candidate = current.join(&part);
            let meta = std::fs::symlink_metadata(&candidate).map_err(|_| missing())?;
            if !meta.file_type().is_symlink() {
                current = candidate;
                continue;
            }
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(ToolError::new(format!("\"{path}\" has too many levels of symbolic links")));
            }
            let target = std::fs::read_link(&candidate).map_err(|_| missing())?;
            if target.is_absolute() {
                // An absolute target stays in the jail only if it names the root lexically.
                let inside = target.strip_prefix(&self.root).map_err(|_| outside())?;
                current = self.root.clone();
                push_components(&mut todo, inside).ok_or_else(outside)?;
            } else {
                push_components(&mut todo, &target).ok_or_else(outside)?;
            }
        }
        Ok(current)
    }

    fn display(&self, resolved: &Path) -> String {
        let relative = resolved.strip_prefix(&self.root).unwrap_or(resolved);
        if relative.as_os_str().is_empty() { ".".into() } else { relative.display().to_string() }
    }

    /// `read`, on a blocking thread that stops at its next chunk once the call is dropped or `abort` fires.
    async fn read(&self, args: &Value, abort: AbortSignal) -> Result<Value, ToolError> {
        let path = args.get("path").and_then(Value::as_str).unwrap_or_default().to_owned();
        let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0);
        let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(DEFAULT_READ_LINES);
        let resolved = self.resolve(&path)?;
        let display = self.display(&resolved);
        let cancel = Arc::new(AtomicBool::new(false));
        let _guard = CancelOnDrop(cancel.clone());
        let token = self.reads.clone();
        let job = tokio::task::spawn_blocking(move || {
            let _token = token;
            let stopped = || cancel.load(Ordering::Relaxed) || abort.is_aborted();
            read_lines(&resolved, &path, offset, limit, &stopped)
        });
        let (content, lines, total) =
            job.await.map_err(|e| ToolError::new(format!("the read was interrupted: {e}")))??;
        Ok(json!({
            "path": display,
            "content": content,
            "offset": offset,
            "lines": lines,
            "totalLines": total,
        }))
    }

    fn list(&self, args: &Value) -> Result<Value, ToolError> {
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let resolved = self.resolve(path)?;
        let entries = std::fs::read_dir(&resolved)
            .map_err(|e| ToolError::new(format!("cannot list \"{path}\": {e}; is it a folder?")))?;
        let mut out: Vec<Value> = Vec::new();
        let mut names: Vec<(String, &'static str, u64)> = entries
            .filter_map(Result::ok)
            .map(|entry| {
                let meta = entry.metadata().ok();
                let kind = match &meta {
                    Some(m) if m.is_dir() => "dir",
                    Some(m) if m.is_file() => "file",
                    _ => "other",
                };
                (entry.file_name().to_string_lossy().into_owned(), kind, meta.map(|m| m.len()).unwrap_or(0))
            })
            .collect();
        names.sort();
        let truncated = names.len() > MAX_LIST_ENTRIES;
        for (name, kind, size) in names.into_iter().take(MAX_LIST_ENTRIES) {
            out.push(json!({ "name": name, "type": kind, "size": size }));
        }
        Ok(json!({ "path": self.display(&resolved), "entries": out, "truncated": truncated }))
    }
}

#[async_trait]
impl ToolHost for CliHost {
    async fn call_tool(&self, tool: &str, args: Value, cx: CallContext) -> Result<Value, ToolError> {
        if let Some(stub) = self.stubs.get(tool) {
            if let Some(message) = &stub.error {
                return Err(ToolError::new(message.clone()));
            }
            if stub.echo {
                return Ok(json!({ "tool": tool, "args": args }));
            }
            return Ok(stub.result.clone().unwrap_or(Value::Null));
        }
        match tool {
            "read" => self.read(&args, cx.abort).await,
            "list" => self.list(&args),
            _ => Err(ToolError::new(format!(
                "tool \"{tool}\" has no implementation in the codemode CLI; give it a stub in the --catalog file"
            ))),
        }
    }
}

/// Pushes the components of `path` onto `todo` so that the first component is popped first. `None` if `path` has a
/// root or prefix component where a relative path was expected.
fn push_components(todo: &mut Vec<OsString>, path: &Path) -> Option<()> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_os_string()),
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    todo.extend(parts.into_iter().rev());
    Some(())
}

/// Streams a regular file, returning lines `offset..offset + limit` joined with `\n` (as `str::lines` splits them),
/// how many there are, and how many lines the file has. Holds the selected lines and one chunk, never the file.
fn read_lines(
    resolved: &Path,
    path: &str,
    offset: u64,
    limit: u64,
    stopped: &dyn Fn() -> bool,
) -> Result<(String, u64, u64), ToolError> {
    let cannot = |e: std::io::Error| ToolError::new(format!("cannot read \"{path}\": {e}"));
    let not_a_file = || ToolError::new(format!("\"{path}\" is not a regular file; use list() for folders"));
    // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; O_NOFOLLOW: a symlink swapped in after
    // the jail resolved the path is refused, not followed.
    let mut file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(resolved)
        .map_err(|e| if e.raw_os_error() == Some(libc::ELOOP) { not_a_file() } else { cannot(e) })?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.file_type().is_file() {
        return Err(not_a_file());
    }
    let not_text = || ToolError::new(format!("\"{path}\" is not UTF-8 text; read only text files"));
    let end = offset.saturating_add(limit);
    let mut content: Vec<u8> = Vec::new();
    let mut lines = 0u64;
    // The line being scanned, whether it has any byte yet, and the bytes of a UTF-8 sequence cut by a chunk end.
    let mut line = 0u64;
    let mut open = false;
    let mut carry: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut selected_line: Vec<u8> = Vec::new();
    loop {
        if stopped() {
            return Err(ToolError::new(format!("the read of \"{path}\" was cancelled")));
        }
        let n = match file.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(cannot(e)),
        };
        if n == 0 {
            break;
        }
        let bytes = &chunk[..n];
        // UTF-8 is checked over the whole file, carrying an incomplete sequence into the next chunk.
        check_utf8(&mut carry, bytes).ok_or_else(not_text)?;
        let mut rest = bytes;
        while !rest.is_empty() {
            let (segment, newline) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            let selected = line >= offset && line < end;
            if selected {
                selected_line.extend_from_slice(segment);
                if content.len() + selected_line.len() > MAX_READ_CONTENT {
                    return Err(ToolError::new(format!(
                        "lines {offset}..{} of \"{path}\" hold more than {MAX_READ_CONTENT} bytes; read fewer lines \
                         (limit) or from a later offset",
                        line + 1
                    )));
                }
            }
            open |= !segment.is_empty();
            if newline {
                if selected {
                    if selected_line.last() == Some(&b'\r') {
                        selected_line.pop();
                    }
                    push_line(&mut content, &mut selected_line, &mut lines);
                }
                line += 1;
                open = false;
                rest = &rest[segment.len() + 1..];
            } else {
                rest = &[];
            }
        }
    }
    if !carry.is_empty() {
        return Err(not_text());
    }
    if open {
        if line >= offset && line < end {
            push_line(&mut content, &mut selected_line, &mut lines);
        }
        line += 1;
    }
    let content = String::from_utf8(content).map_err(|_| not_text())?;
    Ok((content, lines, line))
}

fn push_line(content: &mut Vec<u8>, line: &mut Vec<u8>, lines: &mut u64) {
    if *lines > 0 {
        content.push(b'\n');
    }
    content.append(line);
    *lines += 1;
}

/// Checks that `bytes`, after the incomplete sequence `carry` left by the previous chunk, is UTF-8 up to a sequence
/// the next chunk may complete, which is left in `carry`. `None` on invalid UTF-8.
fn check_utf8(carry: &mut Vec<u8>, bytes: &[u8]) -> Option<()> {
    let joined;
    let data: &[u8] = if carry.is_empty() {
        bytes
    } else {
        joined = [std::mem::take(carry).as_slice(), bytes].concat();
        &joined
    };
    match std::str::from_utf8(data) {
        Ok(_) => carry.clear(),
        Err(e) if e.error_len().is_none() => *carry = data[e.valid_up_to()..].to_vec(),
        Err(_) => return None,
    }
    Some(())
}
