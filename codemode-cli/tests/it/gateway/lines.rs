//! The gateway's stdio transport line by line: raw bytes written to a real `codemode mcp` process, every answer
//! read back from its stdout. A line the client cannot have meant as silence gets an answer.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::fixture;

struct Raw {
    _child: Child,
    stdin: ChildStdin,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl Raw {
    async fn start(config: &std::path::Path) -> Raw {
        let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the codemode binary starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut raw = Raw { _child: child, stdin, stdout };
        raw.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
        let hello = raw.answer().await;
        assert_eq!(hello["id"], 0, "{hello}");
        raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
        raw
    }

    async fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.expect("the gateway reads stdin");
        self.stdin.write_all(b"\n").await.expect("the gateway reads stdin");
        self.stdin.flush().await.expect("flush");
    }

    /// The next message on stdout that is not a notification; the bound turns a missing answer into a failure.
    async fn answer(&mut self) -> Value {
        let read = async {
            loop {
                let line = self.stdout.next_line().await.expect("stdout reads").expect("the gateway is running");
                let message: Value = serde_json::from_str(&line).expect("every stdout line is JSON");
                if message.get("id").is_some() {
                    return message;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the gateway answers within a minute")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_lines_get_a_parse_error_and_lone_surrogate_escapes_are_read() {
    let (_dir, config) = fixture("timeoutMs = 10000", "");
    let mut raw = Raw::start(&config).await;

    for garbage in ["this is not json", r#"{"jsonrpc":"2.0","id":7,"method":"#, "]"] {
        raw.send(garbage).await;
        let answer = raw.answer().await;
        assert_eq!(answer["error"]["code"], -32700, "{garbage}: {answer}");
        assert_eq!(answer["id"], Value::Null, "{garbage}: {answer}");
    }

    // Node's JSON.stringify writes a lone surrogate as an escape; serde_json refuses it, the gateway reads U+FFFD.
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"title":"Lone surrogate escapes","code":"return [\"\ud800x\", \"\ud83d\ude00\"]"}}}"#).await;
    let answer = raw.answer().await;
    assert_eq!(answer["id"], 2, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().expect("a text result");
    let result: Value = serde_json::from_str(text).expect("the result is JSON");
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"], json!(["\u{fffd}x", "\u{1f600}"]), "{result}");

    // Well-formed JSON that is no request gets an error with its id; the session goes on.
    raw.send(r#"{"jsonrpc":"2.0","id":3,"params":{}}"#).await;
    let answer = raw.answer().await;
    assert_eq!(answer["id"], 3, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    raw.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#).await;
    let answer = raw.answer().await;
    assert_eq!(answer["id"], 4, "{answer}");
    assert_eq!(answer["result"]["tools"][0]["name"], "exec", "{answer}");
}
