//! End-to-end speed of the facade with a warm worker pool, held against the anchors in DESIGN.md.
//!
//! Targets: trivial cell < 0.5 ms (OpenClaw QuickJS 10.6 ms); 10 sequential tool calls < 1.5 ms (19.9 ms); first
//! cell after process start < 50 ms (568 ms); suspend + resume on the live path < 1 ms (16.9 ms); resume by replay
//! < 15 µs per recorded call; checkpoint after 10 calls < 1 KB (1.5 MB).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use codemode::{CallContext, ToolError, ToolHost};
use codemode::{CodeMode, CodeModeResult, ExecOptions, Limits, RunScope, ToolDefinition};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

type BoxFuture = std::pin::Pin<Box<dyn std::future::Future<Output = CodeModeResult> + Send>>;

struct Ping;

#[async_trait]
impl ToolHost for Ping {
    async fn call_tool(&self, _tool: &str, _args: Value, _cx: CallContext) -> Result<Value, ToolError> {
        Ok(json!({ "ok": true }))
    }
}

fn ping_tool() -> ToolDefinition {
    ToolDefinition::new("ping", "Answers {ok: true}", json!({ "type": "object" })).replay_safe(true)
}

/// The 130 tools of ten npm MCP servers, as native tools (names two servers share get the server's prefix).
fn real_tools() -> Vec<ToolDefinition> {
    let raw: Value = serde_json::from_str(include_str!("../../codemode-catalog/tests/data/mcp-tools-130.json"))
        .expect("the fixture is JSON");
    let mut out: Vec<ToolDefinition> = Vec::new();
    for (server, tools) in raw.as_object().expect("the fixture is keyed by server") {
        for t in tools.as_array().expect("a tool list") {
            let mut name = t["name"].as_str().expect("a name").to_owned();
            if out.iter().any(|d| d.name == name) {
                name = format!("{}_{name}", server.replace('-', "_"));
            }
            let description = t.get("description").and_then(Value::as_str).unwrap_or("");
            out.push(ToolDefinition::new(name, description, t["inputSchema"].clone()));
        }
    }
    out
}

fn engine(replay: bool) -> CodeMode {
    let ping = ping_tool();
    CodeMode::builder()
        .limits(Limits { timeout_ms: 30_000, ..Limits::default() })
        .tools(vec![ping])
        .host(Arc::new(Ping))
        .warm_workers(2)
        .replay_on_resume(replay)
        .build()
        .expect("the engine builds; build codemode-worker first")
}

fn input(code: &str) -> Value {
    json!({ "title": "bench", "code": code })
}

fn run_id(result: &CodeModeResult) -> String {
    match result {
        CodeModeResult::Waiting(w) => w.run_id.clone(),
        other => panic!("expected waiting: {other:?}"),
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let live = rt.block_on(async { engine(false) });
    let replay = rt.block_on(async { engine(true) });
    // Let the pools fill.
    std::thread::sleep(Duration::from_millis(300));
    if let Some(n) = std::env::var("CODEMODE_EXEC_COUNT").ok().and_then(|n| n.parse::<u32>().ok()) {
        count_only(&rt, &live, &replay, n);
    }

    // Latency with a warm pool: between iterations (untimed, 60 ms) the workers finish building their next
    // context, as they do between an agent's turns. Each call runs in a task on the runtime, as it does in a
    // gateway's request handler (a `block_on` from outside the runtime adds a thread hop per message). Back to back
    // is measured separately.
    let warm = |iters: u64, run: &dyn Fn(CodeMode) -> BoxFuture| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            rt.block_on(async { tokio::time::sleep(Duration::from_millis(60)).await });
            let task = run(live.clone());
            let started = Instant::now();
            black_box(rt.block_on(async { tokio::spawn(task).await.expect("the cell's task") }));
            total += started.elapsed();
        }
        total
    };
    c.bench_function("exec/trivial_cell", |b| {
        b.iter_custom(|iters| {
            warm(iters, &|engine| Box::pin(async move { engine.exec(input("return 1+1"), RunScope::default()).await }))
        })
    });
    // A call with its own tools: its catalog's globals travel with the cell's start and are installed in a worker
    // of the shared pool (PERFORMANCE-NOTES, "Per-call catalogs"). One small set, and the 130 real tools.
    let small = ExecOptions::default().tools(vec![ping_tool()]);
    let real = ExecOptions::default().tools(real_tools());
    for (name, options) in
        [("exec/trivial_cell_per_call_tools_1", small), ("exec/trivial_cell_per_call_tools_130", real)]
    {
        c.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let options = options.clone();
                warm(iters, &move |engine| {
                    let options = options.clone();
                    Box::pin(async move { engine.exec_with(input("return 1+1"), RunScope::default(), &options).await })
                })
            })
        });
    }
    const TEN_CALLS: &str = "let n = 0; for (let i = 0; i < 10; i++) { if ((await ping({})).ok) n++ } return n";
    c.bench_function("exec/10_sequential_calls", |b| {
        b.iter_custom(|iters| {
            warm(iters, &|engine| Box::pin(async move { engine.exec(input(TEN_CALLS), RunScope::default()).await }))
        })
    });
    c.bench_function("wait/suspend_resume_live", |b| {
        b.iter_custom(|iters| {
            warm(iters, &|engine| {
                Box::pin(async move {
                    let first = engine
                        .exec(input("const r = await yield_control('x'); return r.status"), RunScope::default())
                        .await;
                    engine.wait(json!({ "runId": run_id(&first) }), RunScope::default()).await
                })
            })
        })
    });
    c.bench_function("exec/trivial_cell_back_to_back", |b| {
        b.to_async(&rt).iter(|| async { black_box(live.exec(input("return 1+1"), RunScope::default()).await) })
    });
    // One worker serves every cell (no warm spare, at most one idle): each cell waits for the context that worker
    // builds after the previous cell, so this is a cell plus a context build.
    let one = rt.block_on(async {
        CodeMode::builder()
            .limits(Limits { timeout_ms: 30_000, ..Limits::default() })
            .tools(vec![ping_tool()])
            .host(Arc::new(Ping))
            .warm_workers(0)
            .max_idle_workers(1)
            .build()
            .expect("the engine builds; build codemode-worker first")
    });
    c.bench_function("exec/trivial_cell_back_to_back_one_worker", |b| {
        b.to_async(&rt).iter(|| async { black_box(one.exec(input("return 1+1"), RunScope::default()).await) })
    });
    c.bench_function("exec/10_sequential_calls_back_to_back", |b| {
        b.to_async(&rt).iter(|| async { black_box(live.exec(input(TEN_CALLS), RunScope::default()).await) })
    });
    let mut group = c.benchmark_group("wait/resume_by_replay");
    group.sample_size(10);
    for n in [10u32, 100, 1000] {
        let code = format!("for (let i = 0; i < {n}; i++) await ping({{}}); await yield_control('x'); return {n}");
        group.bench_with_input(BenchmarkId::from_parameter(n), &code, |b, code| {
            b.to_async(&rt).iter_custom(|iters| {
                let code = code.clone();
                let replay = &replay;
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let first = replay.exec(input(&code), RunScope::default()).await;
                        let id = run_id(&first);
                        let started = Instant::now();
                        black_box(replay.wait(json!({ "runId": id }), RunScope::default()).await);
                        total += started.elapsed();
                    }
                    total
                }
            })
        });
    }
    group.finish();

    let mut cold = c.benchmark_group("exec/cold_first_cell");
    cold.sample_size(10);
    cold.bench_function("new_engine_and_first_cell", |b| {
        b.to_async(&rt).iter(|| async {
            let engine = engine(false);
            black_box(engine.exec(input("return 1+1"), RunScope::default()).await)
        })
    });
    cold.finish();

    // The checkpoint size is a figure, not a timing: print it once.
    let size = rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("codemode-bench-{}", std::process::id()));
        let engine = CodeMode::builder()
            .tools(vec![])
            .host(Arc::new(Ping))
            .state_dir(Some(dir.clone()))
            .build()
            .expect("engine");
        drop(engine);
        let engine = self::engine_with_state(&dir);
        let first = engine
            .exec(
                input("for (let i = 0; i < 10; i++) await ping({}); await yield_control('x'); return 1"),
                RunScope::default(),
            )
            .await;
        let id = run_id(&first);
        let size = std::fs::metadata(dir.join("runs").join(format!("{id}.json"))).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_dir_all(&dir);
        size
    });
    println!("checkpoint after 10 calls returning {{ok:true}}: {size} bytes");
}

/// `CODEMODE_EXEC_COUNT=n`: runs n cells of `CODEMODE_EXEC_KIND` back to back and exits, for instruction counts
/// of the host side under `valgrind --tool=callgrind` (which does not follow the worker processes): run two counts
/// and divide the difference. Kinds: `trivial` (default), `ten` (10 sequential calls), `live` (suspend and resume
/// on the live worker), `replay100` (the wait of a run that made 100 calls, resumed by replay; the exec that parks
/// it is counted too).
fn count_only(rt: &tokio::runtime::Runtime, live: &CodeMode, replay: &CodeMode, n: u32) -> ! {
    const TEN: &str = "let n = 0; for (let i = 0; i < 10; i++) { if ((await ping({})).ok) n++ } return n";
    const LIVE: &str = "const r = await yield_control('x'); return r.status";
    const REPLAY: &str = "for (let i = 0; i < 100; i++) await ping({}); await yield_control('x'); return 1";
    let kind = std::env::var("CODEMODE_EXEC_KIND").unwrap_or_default();
    let started = Instant::now();
    for _ in 0..n {
        let (live, replay, kind) = (live.clone(), replay.clone(), kind.clone());
        let task = async move {
            match kind.as_str() {
                "ten" => live.exec(input(TEN), RunScope::default()).await,
                "live" => {
                    let first = live.exec(input(LIVE), RunScope::default()).await;
                    live.wait(json!({ "runId": run_id(&first) }), RunScope::default()).await
                }
                "replay100" => {
                    let first = replay.exec(input(REPLAY), RunScope::default()).await;
                    replay.wait(json!({ "runId": run_id(&first) }), RunScope::default()).await
                }
                _ => live.exec(input("return 1+1"), RunScope::default()).await,
            }
        };
        let result = rt.block_on(async { tokio::spawn(task).await.expect("the cell's task") });
        assert!(matches!(result, CodeModeResult::Completed(_)), "{result:?}");
    }
    println!("{n} cells of kind {kind:?}: {:?} each", started.elapsed() / n);
    std::process::exit(0)
}

fn engine_with_state(dir: &std::path::Path) -> CodeMode {
    let ping = ping_tool();
    CodeMode::builder()
        .tools(vec![ping])
        .host(Arc::new(Ping))
        .state_dir(Some(dir.to_path_buf()))
        .build()
        .expect("engine")
}

criterion_group!(exec, benches);
criterion_main!(exec);
