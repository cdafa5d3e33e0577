//! The CLI's embedded tools against hostile paths and files: the jail answers the same for every path outside the
//! root, `read` streams (bounded memory, stops when its call is dropped) and opens only regular files.
//!
//! Real files in a temporary folder; nothing is mocked.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use codemode::{CallContext, ToolError, ToolHost};
use codemode_cli::host::{CliHost, tools};
use serde_json::{Value, json};

fn host(root: &Path) -> CliHost {
    CliHost::new(root, &tools(None).expect("the embedded tools")).expect("a readable root")
}

fn cx() -> CallContext {
    CallContext::new("run", "bridge:tool:1")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

fn call(host: &CliHost, tool: &str, args: Value) -> Result<Value, ToolError> {
    runtime().block_on(host.call_tool(tool, args, cx()))
}

/// The error for `path` with the path itself masked, so two paths' answers can be compared.
fn masked_error(host: &CliHost, tool: &str, path: &str) -> (String, String) {
    let error = call(host, tool, json!({ "path": path })).expect_err(path);
    (error.code, error.message.replace(path, "<path>"))
}

/// The peak resident memory of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    let kb: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number");
    kb * 1024
}

/// A folder with a jail root and, beside it, a `.ssh`-like folder the root must not reveal.
struct Jail {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn jail() -> Jail {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().join("root");
    let outside = dir.path().join("home/.ssh");
    std::fs::create_dir_all(root.join("sub")).expect("root");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("id_rsa"), "secret\n").expect("secret");
    std::fs::write(root.join("sub/file.txt"), "inside\n").expect("inside");
    Jail { _dir: dir, root, outside }
}

#[test]
fn outside_paths_answer_alike_whether_they_exist_or_not() {
    let jail = jail();
    let missing = jail.outside.join("id_missing");
    symlink(jail.outside.join("id_rsa"), jail.root.join("to-secret")).expect("symlink");
    symlink(&missing, jail.root.join("to-missing")).expect("symlink");
    symlink("../../home/.ssh/id_rsa", jail.root.join("sub/rel-secret")).expect("symlink");
    symlink("../../home/.ssh/id_missing", jail.root.join("sub/rel-missing")).expect("symlink");
    symlink(&jail.outside, jail.root.join("to-ssh-dir")).expect("symlink");
    let host = host(&jail.root);
    let pid = std::process::id();
    let up = "../".repeat(jail.root.components().count());
    let pairs = [
        ("../home/.ssh/id_rsa".to_owned(), "../home/.ssh/id_missing".to_owned()),
        ("../home/.ssh".to_owned(), "../home/.nope".to_owned()),
        (format!("{up}proc/{pid}/status"), format!("{up}proc/4294967295/status")),
        (format!("{up}proc/{pid}"), format!("{up}proc/4294967295")),
        (format!("{up}etc/passwd"), format!("{up}etc/no-such-file")),
        ("to-secret".to_owned(), "to-missing".to_owned()),
        ("sub/rel-secret".to_owned(), "sub/rel-missing".to_owned()),
        ("to-ssh-dir/id_rsa".to_owned(), "to-ssh-dir/id_missing".to_owned()),
        ("sub/../../home/.ssh/id_rsa".to_owned(), "missing/../../home/.ssh/id_rsa".to_owned()),
    ];
    for tool in ["read", "list"] {
        let expected = masked_error(&host, tool, &pairs[0].0);
        assert_eq!(expected.0, "invalid_input");
        assert_eq!(expected.1, "\"<path>\" is outside the root folder; use paths relative to it");
        for (existing, absent) in &pairs {
            assert_eq!(masked_error(&host, tool, existing), expected, "{tool} {existing}");
            assert_eq!(masked_error(&host, tool, absent), expected, "{tool} {absent}");
        }
    }
}

#[test]
fn paths_inside_the_root_still_resolve_through_dots_and_symlinks() {
    let jail = jail();
    symlink("sub/file.txt", jail.root.join("rel-inside")).expect("symlink");
    symlink(jail.root.join("sub"), jail.root.join("abs-inside")).expect("symlink");
    symlink("loop-b", jail.root.join("loop-a")).expect("symlink");
    symlink("loop-a", jail.root.join("loop-b")).expect("symlink");
    let host = host(&jail.root);
    for path in ["sub/file.txt", "/sub/file.txt", "sub/../sub/./file.txt", "rel-inside", "abs-inside/file.txt"] {
        let value = call(&host, "read", json!({ "path": path })).expect(path);
        assert_eq!(value["content"], "inside", "{path}");
        assert_eq!(value["path"], "sub/file.txt", "{path}");
    }
    assert_eq!(call(&host, "list", json!({ "path": "abs-inside/.." })).expect("list")["path"], ".");
    let missing = call(&host, "read", json!({ "path": "sub/nope" })).expect_err("missing");
    assert_eq!(missing.message, "\"sub/nope\" does not exist under the root folder");
    let looped = call(&host, "read", json!({ "path": "loop-a" })).expect_err("loop");
    assert!(looped.message.contains("too many levels of symbolic links"), "{looped:?}");
}

#[test]
fn read_splits_lines_like_str_lines_across_chunks() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let host = host(dir.path());
    // 'é' straddles the first 64 KiB chunk boundary; a \r\n straddles it in the second text.
    let straddle = format!("{}é\nnext\n", "a".repeat(64 * 1024 - 1));
    let crlf = format!("{}\r\nz", "b".repeat(64 * 1024 - 1));
    let texts = ["", "\n", "a", "a\n", "a\r\nb\r\n", "a\rb\r", "\n\nx\n\n", "é\n😀\nlast", &straddle, &crlf];
    for text in texts {
        std::fs::write(dir.path().join("t.txt"), text).expect("write");
        let all: Vec<&str> = text.lines().collect();
        for (offset, limit) in [(0, 2000), (0, 1), (1, 1), (1, 5), (3, 2), (9, 1)] {
            let value =
                call(&host, "read", json!({ "path": "t.txt", "offset": offset, "limit": limit })).expect("read");
            let expected: Vec<&str> = all.iter().copied().skip(offset).take(limit).collect();
            assert_eq!(value["content"], expected.join("\n"), "{text:?} {offset} {limit}");
            assert_eq!(value["lines"], expected.len(), "{text:?} {offset} {limit}");
            assert_eq!(value["totalLines"], all.len(), "{text:?}");
        }
    }
    std::fs::write(dir.path().join("bin"), b"ok\n\xff\n").expect("write");
    let error = call(&host, "read", json!({ "path": "bin" })).expect_err("not utf-8");
    assert_eq!(error.message, "\"bin\" is not UTF-8 text; read only text files");
    std::fs::write(dir.path().join("cut"), b"ok\n\xc3").expect("write");
    call(&host, "read", json!({ "path": "cut" })).expect_err("a cut sequence at the end");
}

#[test]
fn read_of_a_huge_sparse_file_with_limit_one_holds_little_memory() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("huge.txt");
    let mut file = File::create(&path).expect("create");
    file.write_all(b"first\nsecond\n").expect("write");
    file.set_len(512 * 1024 * 1024).expect("a sparse hole");
    let mut file = OpenOptions::new().append(true).open(&path).expect("append");
    file.write_all(b"\nlast\n").expect("write");
    let host = host(dir.path());
    let before = peak_rss();
    let value = call(&host, "read", json!({ "path": "huge.txt", "limit": 1 })).expect("read");
    let grown = peak_rss().saturating_sub(before);
    assert_eq!(value["content"], "first");
    assert_eq!(value["totalLines"], 4);
    assert!(grown < 64 * 1024 * 1024, "reading one line of a 512 MiB file grew the peak RSS by {grown} bytes");
    // A selection bigger than the cap fails with a message, without holding it.
    let error = call(&host, "read", json!({ "path": "huge.txt", "offset": 2 })).expect_err("over the cap");
    assert!(error.message.contains("read fewer lines"), "{error:?}");
}

#[test]
fn a_dropped_read_stops_reading() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut file = File::create(dir.path().join("endless.txt")).expect("create");
    file.write_all(b"first\n").expect("write");
    file.set_len(1 << 40).expect("a 1 TiB sparse file");
    let host = host(dir.path());
    let rt = runtime();
    let call = host.call_tool("read", json!({ "path": "endless.txt", "limit": 1 }), cx());
    let outcome = rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), call).await });
    assert!(outcome.is_err(), "a 1 TiB file cannot be read in 50 ms");
    assert_eq!(host.reads_in_flight(), 1, "the read runs on a blocking thread");
    // Dropping the runtime waits for its blocking threads; the bound only turns a regression into a failure.
    rt.shutdown_timeout(Duration::from_secs(60));
    assert_eq!(host.reads_in_flight(), 0, "the read went on after its call was dropped");
}

#[test]
fn read_refuses_fifos_devices_and_folders_without_hanging() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let fifo = dir.path().join("fifo");
    let c_path = CString::new(fifo.as_os_str().as_bytes()).expect("a path");
    // SAFETY: `c_path` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    std::fs::create_dir(dir.path().join("folder")).expect("folder");
    symlink("/dev/zero", dir.path().join("zero")).expect("symlink");
    let host = host(dir.path());
    let error = call(&host, "read", json!({ "path": "fifo" })).expect_err("a FIFO");
    assert_eq!(error.message, "\"fifo\" is not a regular file; use list() for folders");
    let error = call(&host, "read", json!({ "path": "folder" })).expect_err("a folder");
    assert_eq!(error.message, "\"folder\" is not a regular file; use list() for folders");
    let error = call(&host, "read", json!({ "path": "zero" })).expect_err("a device outside");
    assert_eq!(error.code, "invalid_input");
    let error = call(&host, "list", json!({ "path": "fifo" })).expect_err("list a FIFO");
    assert!(error.message.contains("is it a folder?"), "{error:?}");
}

#[test]
fn a_read_whose_abort_signal_fired_stops() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut file = File::create(dir.path().join("endless.txt")).expect("create");
    file.write_all(b"first\n").expect("write");
    file.set_len(1 << 40).expect("a 1 TiB sparse file");
    let host = host(dir.path());
    let (signal, fire) = codemode::AbortSignal::new();
    let mut cx = cx();
    cx.abort = signal;
    drop(fire);
    let error = runtime()
        .block_on(host.call_tool("read", json!({ "path": "endless.txt", "limit": 1 }), cx))
        .expect_err("an aborted read");
    assert_eq!(error.message, "the read of \"endless.txt\" was cancelled");
    assert_eq!(host.reads_in_flight(), 0);
}
