//! OpenTelemetry end to end: the `codemode mcp` binary exports over OTLP http/protobuf to a receiver this test
//! runs (it decodes the real `ExportTraceServiceRequest`/`ExportMetricsServiceRequest` protobuf), while a program
//! calls two real npm MCP servers and a third upstream that is itself a `codemode mcp` gateway exporting to the same
//! receiver, so the trace id is seen where the upstream server received it. The run parks, and a fresh gateway
//! process sharing `--state-dir` resumes it by replay.
//!
//! Export is flushed when a gateway exits: the test ends each gateway by closing its stdin, waits for the process
//! to exit, then waits (bounded) on the receiver for the spans; nothing here is timed.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message as _;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::{fixture, servers_toml};

/// One span as the receiver decoded it.
#[derive(Clone, Debug)]
struct Span {
    service: String,
    name: String,
    kind: SpanKind,
    trace_id: String,
    span_id: String,
    parent: String,
    attrs: HashMap<String, String>,
    status: StatusCode,
    message: String,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    metrics: Vec<String>,
    /// Every data point received: its metric's name and its attributes.
    points: Vec<(String, HashMap<String, String>)>,
}

/// A minimal OTLP/HTTP receiver on loopback: `POST /v1/traces` and `/v1/metrics` with protobuf bodies.
struct Receiver {
    addr: SocketAddr,
    received: Arc<(Mutex<Received>, Condvar)>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let addr = listener.local_addr().expect("receiver address");
        let received = Arc::new((Mutex::new(Received::default()), Condvar::new()));
        let shared = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        Receiver { addr, received }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until `done` holds for what was received (at most two minutes of no progress), then returns the spans.
    fn wait_for(&self, what: &str, done: impl Fn(&Received) -> bool) -> Vec<Span> {
        let (lock, changed) = &*self.received;
        let mut received = lock.lock().expect("receiver lock");
        while !done(&received) {
            let (next, timeout) = changed.wait_timeout(received, Duration::from_secs(120)).expect("receiver lock");
            received = next;
            if timeout.timed_out() && !done(&received) {
                let names: Vec<_> = received.spans.iter().map(|s| format!("{} ({})", s.name, s.service)).collect();
                panic!("the receiver never got {what}; spans: {names:?}, metrics: {:?}", received.metrics);
            }
        }
        received.spans.clone()
    }

    fn metrics(&self) -> Vec<String> {
        self.received.0.lock().expect("receiver lock").metrics.clone()
    }

    fn points(&self) -> Vec<(String, HashMap<String, String>)> {
        self.received.0.lock().expect("receiver lock").points.clone()
    }
}

/// Serves one HTTP/1.1 connection: each request's body is decoded and recorded, and answered `200` with an empty
/// (valid) protobuf response.
fn serve(stream: TcpStream, shared: &(Mutex<Received>, Condvar)) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the connection"));
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().expect("a numeric Content-Length");
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("the request body");
        {
            let mut received = shared.0.lock().expect("receiver lock");
            match path.as_str() {
                "/v1/traces" => {
                    let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP trace protobuf");
                    received.spans.extend(spans_of(request));
                }
                "/v1/metrics" => {
                    let request = ExportMetricsServiceRequest::decode(body.as_slice()).expect("OTLP metrics protobuf");
                    for resource in request.resource_metrics {
                        for scope in resource.scope_metrics {
                            for metric in scope.metrics {
                                for point in point_attributes(&metric) {
                                    received.points.push((metric.name.clone(), point));
                                }
                                received.metrics.push(metric.name);
                            }
                        }
                    }
                }
                other => panic!("unexpected OTLP path {other}"),
            }
            shared.1.notify_all();
        }
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The attributes of each data point of `metric`.
fn point_attributes(metric: &Metric) -> Vec<HashMap<String, String>> {
    match &metric.data {
        Some(metric::Data::Histogram(h)) => h.data_points.iter().map(|p| attrs(&p.attributes)).collect(),
        Some(metric::Data::Sum(s)) => s.data_points.iter().map(|p| attrs(&p.attributes)).collect(),
        Some(metric::Data::Gauge(g)) => g.data_points.iter().map(|p| attrs(&p.attributes)).collect(),
        Some(metric::Data::ExponentialHistogram(h)) => h.data_points.iter().map(|p| attrs(&p.attributes)).collect(),
        Some(metric::Data::Summary(s)) => s.data_points.iter().map(|p| attrs(&p.attributes)).collect(),
        None => Vec::new(),
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(list: &[KeyValue]) -> HashMap<String, String> {
    list.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect()
}

fn spans_of(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for resource in request.resource_spans {
        let service =
            resource.resource.as_ref().and_then(|r| attrs(&r.attributes).remove("service.name")).unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                let status = span.status.as_ref().map_or(StatusCode::Unset, |s| s.code());
                out.push(Span {
                    service: service.clone(),
                    name: span.name.clone(),
                    kind: span.kind(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    attrs: attrs(&span.attributes),
                    status,
                    message: span.status.map(|s| s.message).unwrap_or_default(),
                });
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A gateway process whose stdio is the client's transport; ending it closes its stdin and waits for it to exit.
struct Gateway {
    client: RunningService<RoleClient, ClientConfig>,
    child: tokio::process::Child,
}

impl Gateway {
    async fn start(config: &Path, state: &Path, otlp: &str, service: &str) -> Gateway {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .arg("--state-dir")
            .arg(state)
            .arg("--session")
            .arg("otel-e2e")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
            .env("OTEL_SERVICE_NAME", service)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the codemode binary starts");
        let stdout = child.stdout.take().expect("gateway stdout");
        let stdin = child.stdin.take().expect("gateway stdin");
        let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("otel-e2e", "0"));
        let client = tokio::time::timeout(Duration::from_secs(60), info.serve((stdout, stdin)))
            .await
            .expect("the gateway answers the handshake within a minute")
            .expect("MCP handshake");
        Gateway { client, child }
    }

    /// Calls `tool` with a W3C `traceparent` in `params._meta`, as an instrumented client does.
    async fn call(&self, tool: &str, args: Value, traceparent: &str) -> Value {
        let Value::Object(args) = args else { panic!("tool arguments are an object") };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args);
        let mut meta = RequestMetaObject::new();
        meta.set_traceparent(traceparent);
        params.meta = Some(meta);
        let result = self.client.call_tool(params).await.expect("the gateway answers tools/call");
        result.structured_content.expect("a CodeModeResult")
    }

    /// Closes the client's side of stdio and waits for the gateway to exit (it flushes its export first).
    async fn end(mut self) {
        let _ = self.client.cancel().await;
        let status = tokio::time::timeout(Duration::from_secs(120), self.child.wait())
            .await
            .expect("the gateway exits once its client is gone")
            .expect("gateway exit status");
        assert!(status.success(), "the gateway exits cleanly: {status}");
    }
}

/// The children of `parent` among `spans`.
fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.parent == parent.span_id && s.trace_id == parent.trace_id).collect()
}

fn one<'a>(spans: impl IntoIterator<Item = &'a Span>, what: &str, pred: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = spans.into_iter().filter(|s| pred(s)).collect();
    assert_eq!(found.len(), 1, "exactly one {what}: {found:#?}");
    found[0]
}

const TRACE_1: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN_1: &str = "00f067aa0ba902b7";
const TRACE_2: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN_2: &str = "b7ad6b7169203331";

#[tokio::test]
async fn one_trace_runs_from_the_client_through_the_program_to_every_upstream_and_replays_are_marked() {
    let receiver = Receiver::start();
    let otlp = receiver.endpoint();
    let (dir, config) = fixture("timeoutMs = 20000", "");
    let files = dir.path().join("files").canonicalize().expect("files dir");
    // The third upstream is a codemode gateway over the same npm servers, exporting under its own service name.
    let inner = dir.path().join("inner.toml");
    std::fs::write(&inner, format!("[limits]\ntimeoutMs = 10000\n\n{}", servers_toml(&files, ""))).expect("inner");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[servers.inner]\ncommand = {exe:?}\nargs = [\"mcp\", \"--config\", {inner:?}]\n\
         env = {{ OTEL_SERVICE_NAME = \"codemode-inner\" }}\ninherit_env = [\"OTEL_EXPORTER_OTLP_ENDPOINT\"]\n\n\
         [telemetry]\nredact_patterns = [\"/etc/host[a-z]+\"]\n",
        exe = env!("CARGO_BIN_EXE_codemode"),
        inner = inner.display().to_string(),
    ));
    std::fs::write(&config, text).expect("config");
    let state = dir.path().join("state");
    let hello = files.join("hello.txt").display().to_string();

    // Five calls across the two npm servers and the inner gateway (one an MCP isError result), then a park.
    let code = format!(
        r#"const echo = await MCP.everything.echo({{ message: "traced" }});
           const file = await MCP.fs.readTextFile({{ path: {hello:?} }});
           const sum = await MCP.everything.getSum({{ a: 2, b: 40 }});
           const denied = await MCP.fs.readTextFile({{ path: "/etc/hostname" }});
           const inner = await MCP.inner.exec({{ title: "inner", code: "return (await MCP.everything.echo({{ message: 'deep' }})).content[0].text" }});
           await yield_control("parked for the trace test");
           const after = await MCP.everything.echo({{ message: "after the replay" }});
           return {{ echo: echo.content[0].text, file: file.content[0].text, sum: sum.content[0].text,
                    denied: denied.isError, inner: inner.structuredContent.value,
                    after: after.content[0].text }};"#
    );
    let first = Gateway::start(&config, &state, &otlp, "codemode-outer").await;
    let parked = first
        .call("exec", json!({ "title": "trace", "code": code }), &format!("00-{TRACE_1}-{CLIENT_SPAN_1}-01"))
        .await;
    assert_eq!(parked["status"], "waiting", "{parked}");
    let run_id = parked["runId"].as_str().expect("a run id").to_owned();
    first.end().await;

    // A fresh process resumes the run by replay under a new client trace.
    let second = Gateway::start(&config, &state, &otlp, "codemode-outer").await;
    let done = second.call("wait", json!({ "runId": run_id }), &format!("00-{TRACE_2}-{CLIENT_SPAN_2}-01")).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["value"],
        json!({
            "echo": "Echo: traced",
            "file": "hello from the filesystem server\n",
            "sum": "The sum of 2 and 40 is 42.",
            "denied": true,
            "inner": "Echo: deep",
            "after": "Echo: after the replay",
        })
    );
    second.end().await;

    let spans = receiver.wait_for("both traces and the inner gateway's spans", |r| {
        let servers = |trace: &str, service: &str| {
            r.spans.iter().filter(|s| s.trace_id == trace && s.service == service && s.kind == SpanKind::Server).count()
        };
        servers(TRACE_1, "codemode-outer") == 1
            && servers(TRACE_1, "codemode-inner") == 1
            && servers(TRACE_2, "codemode-outer") == 1
    });

    // First process: SERVER `tools/call exec` continues the client's trace under the client's span.
    let server = one(&spans, "exec server span", |s| {
        s.trace_id == TRACE_1 && s.service == "codemode-outer" && s.kind == SpanKind::Server
    });
    assert_eq!((server.name.as_str(), server.parent.as_str()), ("tools/call exec", CLIENT_SPAN_1));
    assert_eq!(server.attr("mcp.method.name"), Some("tools/call"));
    assert_eq!(server.attr("mcp.session.id"), Some("stdio-otel-e2e"));
    assert!(server.attr("jsonrpc.request.id").is_some(), "{server:#?}");
    let exec = one(children(&spans, server), "exec span", |_| true).clone();
    assert_eq!((exec.name.as_str(), exec.kind), ("execute_tool exec", SpanKind::Internal));
    assert_eq!(exec.attr("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(exec.attr("codemode.run_id"), Some(run_id.as_str()));
    assert_eq!(exec.attr("codemode.status"), Some("waiting"));
    assert_eq!(exec.attr("codemode.source.length"), Some(code.len().to_string().as_str()));
    assert_eq!(exec.attr("codemode.source.sha256").map(str::len), Some(64));
    // The source itself is on no span.
    for span in &spans {
        assert!(span.attrs.values().all(|v| !v.contains("parked for the trace test")), "source leaked: {span:#?}");
    }
    let calls = children(&spans, &exec);
    let tools: Vec<&str> = calls.iter().map(|s| s.attr("gen_ai.tool.name").unwrap_or_default()).collect();
    assert_eq!(tools, ["echo", "read_text_file", "get-sum", "read_text_file", "exec"], "in call order");
    for call in &calls {
        assert_eq!(call.kind, SpanKind::Internal);
        assert_eq!(call.name, format!("execute_tool {}", call.attr("gen_ai.tool.name").unwrap_or_default()));
        assert_eq!(call.attr("codemode.replayed"), Some("false"));
        assert_eq!(call.attr("codemode.run_id"), Some(run_id.as_str()));
        assert!(call.attr("gen_ai.tool.call.id").is_some_and(|id| id.starts_with("bridge:namespace:")), "{call:#?}");
        // Each live call has exactly one CLIENT `tools/call <tool>` to its upstream server.
        let client = one(children(&spans, call), "client span", |_| true);
        assert_eq!(client.kind, SpanKind::Client);
        assert_eq!(client.name, format!("tools/call {}", call.attr("gen_ai.tool.name").unwrap_or_default()));
        assert_eq!(client.attr("mcp.method.name"), Some("tools/call"));
        assert!(client.attr("jsonrpc.request.id").is_some(), "{client:#?}");
    }
    // The isError result is an error span, on the call and on its client span.
    let failed = calls[3];
    assert_eq!((failed.status, failed.attr("error.type")), (StatusCode::Error, Some("tool_error")), "{failed:#?}");
    assert!(failed.message.contains("Access denied"), "{failed:#?}");
    // Its message passed the gateway's redactor: the configured pattern masks the path on both spans.
    let client = children(&spans, failed)[0];
    assert_eq!(client.status, StatusCode::Error);
    for span in [failed, client] {
        assert!(!span.message.contains("/etc/hostname") && span.message.contains("[REDACTED]"), "{span:#?}");
    }
    assert_eq!(calls[0].status, StatusCode::Unset);

    // The upstream gateway received the trace: its SERVER span is a child of the outer CLIENT span to it.
    let to_inner = children(&spans, calls[4])[0];
    let inner_server =
        one(&spans, "inner server span", |s| s.service == "codemode-inner" && s.kind == SpanKind::Server);
    assert_eq!(inner_server.trace_id, TRACE_1, "the trace id reached the upstream server");
    assert_eq!(inner_server.parent, to_inner.span_id);
    let inner_exec = one(children(&spans, inner_server), "inner exec", |_| true);
    let inner_call = one(children(&spans, inner_exec), "inner call", |_| true);
    assert_eq!(inner_call.name, "execute_tool echo");
    assert_eq!(one(children(&spans, inner_call), "inner client", |_| true).name, "tools/call echo");

    // Second process: the wait continues the second client trace; the five calls are replayed, not run.
    let server = one(&spans, "wait server span", |s| s.trace_id == TRACE_2 && s.kind == SpanKind::Server);
    assert_eq!((server.name.as_str(), server.parent.as_str()), ("tools/call wait", CLIENT_SPAN_2));
    let wait = one(children(&spans, server), "wait span", |_| true).clone();
    assert_eq!(wait.name, "execute_tool wait");
    assert_eq!(wait.attr("codemode.replayed"), Some("true"));
    assert_eq!(wait.attr("codemode.status"), Some("completed"));
    let calls = children(&spans, &wait);
    let replayed: Vec<&&Span> = calls.iter().filter(|c| c.attr("codemode.replayed") == Some("true")).collect();
    let tools: Vec<&str> = replayed.iter().map(|s| s.attr("gen_ai.tool.name").unwrap_or_default()).collect();
    assert_eq!(tools, ["echo", "read_text_file", "get-sum", "read_text_file", "exec"]);
    for call in &replayed {
        assert!(children(&spans, call).is_empty(), "a replayed call reaches no server: {call:#?}");
    }
    assert_eq!(replayed[3].status, StatusCode::Error, "a replayed isError result is still an error span");
    let live = one(&spans, "live call after the replay", |s| {
        s.trace_id == TRACE_2 && s.parent == wait.span_id && s.attr("codemode.replayed") == Some("false")
    });
    assert_eq!(live.name, "execute_tool echo");
    assert_eq!(one(children(&spans, live), "client span", |_| true).name, "tools/call echo");
    // No span of the inner gateway in the second trace: replay never called it.
    assert!(spans.iter().all(|s| !(s.trace_id == TRACE_2 && s.service == "codemode-inner")));

    let metrics = receiver.metrics();
    for name in [
        "codemode.exec.duration",
        "codemode.call.duration",
        "codemode.calls",
        "codemode.replays",
        "codemode.runs.parked",
        "codemode.workers.live",
        "mcp.server.operation.duration",
        "mcp.client.operation.duration",
    ] {
        assert!(metrics.iter().any(|m| m == name), "metric {name} was exported: {metrics:?}");
    }
}

/// server-everything in its Streamable HTTP mode on a free loopback port, killed when dropped. It prints each
/// session's id as it initializes it (`Session initialized with ID: <id>`, on stdout).
struct HttpEverything {
    _process: tokio::process::Child,
    url: String,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl HttpEverything {
    async fn start() -> HttpEverything {
        use tokio::io::AsyncBufReadExt as _;
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port();
        let script = super::mcp_packages().join("server-everything/dist/index.js");
        let mut process = tokio::process::Command::new("node")
            .arg(script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts server-everything");
        let stdout = tokio::io::BufReader::new(process.stdout.take().expect("stdout")).lines();
        let mut stderr = tokio::io::BufReader::new(process.stderr.take().expect("stderr")).lines();
        tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = stderr.next_line().await.expect("read stderr") {
                if line.contains("listening on port") {
                    return;
                }
                eprintln!("server-everything: {line}");
            }
            panic!("server-everything exited before it listened");
        })
        .await
        .expect("server-everything listens within a minute");
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("server-everything: {line}");
            }
        });
        HttpEverything { _process: process, url: format!("http://127.0.0.1:{port}/mcp"), stdout }
    }

    /// The ids of the sessions it has initialized so far, reading its output up to the `count`th.
    async fn sessions(&mut self, count: usize) -> Vec<String> {
        let mut ids = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), async {
            while ids.len() < count {
                let line = self.stdout.next_line().await.expect("read stdout").expect("server-everything runs");
                if let Some(id) = line.split("Session initialized with ID: ").nth(1) {
                    ids.push(id.trim().to_owned());
                }
            }
        })
        .await
        .expect("server-everything reports its sessions");
        ids
    }
}

#[tokio::test]
async fn client_spans_to_a_streamable_http_upstream_carry_the_session_the_server_assigned() {
    let receiver = Receiver::start();
    let mut web = HttpEverything::start().await;
    let (dir, config) = fixture("timeoutMs = 20000", "");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("\n[servers.web]\nurl = {:?}\n", web.url));
    std::fs::write(&config, text).expect("config");
    let gateway = Gateway::start(&config, &dir.path().join("state"), &receiver.endpoint(), "codemode-session").await;
    let code = r#"const a = await MCP.web.echo({ message: "one" });
                  const b = await MCP.everything.echo({ message: "two" });
                  const c = await MCP.web.getSum({ a: 1, b: 2 });
                  return [a.content[0].text, b.content[0].text, c.content[0].text];"#;
    let done = gateway
        .call("exec", json!({ "title": "sessions", "code": code }), &format!("00-{TRACE_1}-{CLIENT_SPAN_1}-01"))
        .await;
    assert_eq!(done["value"], json!(["Echo: one", "Echo: two", "The sum of 1 and 2 is 3."]), "{done}");
    gateway.end().await;
    // The gateway opened one session at start (listing the tools) and made both calls in it.
    let sessions = web.sessions(1).await;

    let spans = receiver.wait_for("the three CLIENT spans", |r| {
        r.spans.iter().filter(|s| s.service == "codemode-session" && s.kind == SpanKind::Client).count() == 3
    });
    let clients: Vec<&Span> =
        spans.iter().filter(|s| s.service == "codemode-session" && s.kind == SpanKind::Client).collect();
    let over_http: Vec<&&Span> = clients.iter().filter(|s| s.attr("codemode.server") == Some("web")).collect();
    assert_eq!(over_http.len(), 2, "{clients:#?}");
    for span in over_http {
        assert_eq!(span.attr("network.transport"), Some("tcp"));
        assert_eq!(span.attr("mcp.session.id"), Some(sessions[0].as_str()), "{span:#?}");
    }
    // A stdio server has no MCP session: the attribute is absent.
    let stdio = one(clients.iter().copied(), "stdio client span", |s| s.attr("codemode.server") == Some("everything"));
    assert_eq!(stdio.attr("network.transport"), Some("pipe"));
    assert_eq!(stdio.attr("mcp.session.id"), None, "{stdio:#?}");
}

/// A gateway process spoken to line by line (raw JSON-RPC on its stdio), so that a test can send what rmcp's client
/// never would: a request id of any length.
struct RawGateway {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl RawGateway {
    async fn start(config: &Path, state: &Path, otlp: &str, service: &str) -> RawGateway {
        use tokio::io::AsyncBufReadExt as _;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .arg("--state-dir")
            .arg(state)
            .arg("--session")
            .arg("otel-raw")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
            .env("OTEL_SERVICE_NAME", service)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the codemode binary starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = tokio::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut raw = RawGateway { child, stdin: Some(stdin), stdout };
        let hello = raw
            .request(json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "raw", "version": "0" } } }))
            .await;
        assert!(hello.get("result").is_some(), "{hello}");
        raw.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
        raw
    }

    async fn send(&mut self, message: &Value) {
        use tokio::io::AsyncWriteExt as _;
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = serde_json::to_vec(message).expect("JSON");
        line.push(b'\n');
        stdin.write_all(&line).await.expect("the gateway reads stdin");
        stdin.flush().await.expect("flush");
    }

    /// Sends `message` and returns the answer with its id (notifications in between are skipped).
    async fn request(&mut self, message: Value) -> Value {
        self.send(&message).await;
        let read = async {
            loop {
                let line = self.stdout.next_line().await.expect("stdout reads").expect("the gateway is running");
                let answer: Value = serde_json::from_str(&line).expect("every stdout line is JSON");
                if answer.get("id") == message.get("id") {
                    return answer;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the gateway answers within a minute")
    }

    /// Closes stdin and waits for the gateway to exit (it flushes its export first).
    async fn end(mut self) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(120), self.child.wait())
            .await
            .expect("the gateway exits once its client is gone")
            .expect("gateway exit status");
        assert!(status.success(), "the gateway exits cleanly: {status}");
    }
}

#[tokio::test]
async fn what_a_client_makes_up_is_bounded_in_spans_and_metrics() {
    // The bound the gateway keeps every attribute a client controls under (`otel::MAX_ATTRIBUTE_BYTES`).
    const MAX: usize = 4096;
    let receiver = Receiver::start();
    let (dir, config) = fixture("timeoutMs = 20000", "");
    let mut gateway =
        RawGateway::start(&config, &dir.path().join("state"), &receiver.endpoint(), "codemode-bounded").await;
    // Made-up tool names of 20 KB (one with multi-byte characters), under a request id of 20 KB.
    let long_id = "r".repeat(20_000);
    for (i, name) in ["x".repeat(20_000), "é".repeat(10_000), "delete_everything".to_owned()].into_iter().enumerate() {
        let id = if i == 0 { json!(long_id) } else { json!(i) };
        let answer = gateway
            .request(json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                             "params": { "name": name, "arguments": {} } }))
            .await;
        assert!(answer.get("error").is_some(), "a made-up tool is refused: {answer:.300}");
    }
    // A wait on a made-up run id of 20 KB, and an exec (both real tools).
    let answer = gateway
        .request(json!({ "jsonrpc": "2.0", "id": 10, "method": "tools/call",
                         "params": { "name": "wait", "arguments": { "runId": "cm_".repeat(7_000) } } }))
        .await;
    assert_eq!(answer["result"]["isError"], true, "{answer:.300}");
    let answer = gateway
        .request(json!({ "jsonrpc": "2.0", "id": 11, "method": "tools/call",
                         "params": { "name": "exec", "arguments": { "title": "t", "code": "return 1" } } }))
        .await;
    assert_eq!(answer["result"]["isError"], false, "{answer:.300}");
    gateway.end().await;

    let spans = receiver.wait_for("the five SERVER spans", |r| {
        r.spans.iter().filter(|s| s.service == "codemode-bounded" && s.kind == SpanKind::Server).count() == 5
    });
    let servers: Vec<&Span> =
        spans.iter().filter(|s| s.service == "codemode-bounded" && s.kind == SpanKind::Server).collect();
    let names: Vec<&str> = servers.iter().map(|s| s.attr("gen_ai.tool.name").unwrap_or_default()).collect();
    assert_eq!(names.iter().filter(|n| **n == "_OTHER").count(), 3, "made-up tools are one value: {names:?}");
    assert!(names.contains(&"wait") && names.contains(&"exec"), "{names:?}");
    for span in servers.iter().filter(|s| s.attr("gen_ai.tool.name") == Some("_OTHER")) {
        assert_eq!(span.name, "tools/call _OTHER");
    }
    let cut = one(servers.iter().copied(), "the span of the long request id", |s| {
        s.attr("jsonrpc.request.id").is_some_and(|id| id.starts_with("rrr"))
    });
    assert_eq!(cut.attr("jsonrpc.request.id").map(str::len), Some(MAX), "the request id is cut to 4 KiB");
    let wait = spans
        .iter()
        .find(|s| s.service == "codemode-bounded" && s.name == "execute_tool wait")
        .expect("the wait's span");
    assert_eq!(wait.attr("codemode.run_id").map(str::len), Some(MAX), "the run id is cut to 4 KiB");
    // No attribute of any span, nor any span name, carries more than the limit; nothing made up reaches one.
    for span in spans.iter().filter(|s| s.service == "codemode-bounded") {
        assert!(span.name.len() <= MAX, "{}", &span.name[..100]);
        for (key, value) in &span.attrs {
            assert!(value.len() <= MAX, "{key} on {} holds {} bytes", span.name, value.len());
            assert!(!value.contains("delete_everything") && !value.contains("xxxx") && !value.contains("éé"));
        }
    }
    // The server metric has one series for every made-up tool.
    let points = receiver.points();
    let tools: std::collections::BTreeSet<&str> = points
        .iter()
        .filter(|(name, _)| name == "mcp.server.operation.duration")
        .filter_map(|(_, attrs)| attrs.get("gen_ai.tool.name").map(String::as_str))
        .collect();
    assert_eq!(tools, ["_OTHER", "exec", "wait"].into_iter().collect(), "{points:?}");
    for (name, attrs) in &points {
        for (key, value) in attrs {
            assert!(value.len() <= MAX, "{key} of {name} holds {} bytes", value.len());
        }
    }
}
