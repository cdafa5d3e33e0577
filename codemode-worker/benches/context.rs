//! Context builds, in-process: what a worker pays for each fresh context (the guest API installed) and for a
//! trivial cell in it, and the pieces of that build. Not the worker or IPC path (see `codemode`'s `exec` and
//! `concurrency` benches for those). Targets (issue 19): a fresh context with the guest API installed <= 0.5 ms.

use std::hint::black_box;
use std::rc::Rc;
use std::time::{Duration, Instant};

use boa_engine::context::ContextBuilder;
use boa_engine::{Script, Source};
use codemode_bridge::Journal;
use codemode_vm::protocol::{CellLimits, GuestApiFile, GuestGlobals, GuestNamespace, Start};
use codemode_worker::engine::{Engine, PreparedGlobals, collect_output};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

/// A catalog of `tools` tool globals and `servers` MCP servers of 10 tools each.
fn globals(tools: usize, servers: usize) -> GuestGlobals {
    let tools: Vec<String> = (0..tools).map(|i| format!("tool{i}")).collect();
    let mcp = (0..servers)
        .map(|s| GuestNamespace {
            global: format!("server{s}"),
            server: format!("server-{s}"),
            tools: (0..10).map(|t| (format!("op{t}"), format!("op_{t}"))).collect(),
        })
        .collect();
    let api_files = tools
        .iter()
        .map(|t| GuestApiFile {
            path: format!("tools/{t}.d.ts"),
            description: format!("about {t}"),
            content: format!("declare function {t}(input: unknown): Promise<unknown>;"),
        })
        .collect();
    let handles =
        tools.iter().map(|t| json!({ "callableName": t, "toolName": t, "label": t, "source": "openclaw" })).collect();
    GuestGlobals { tools, mcp, api_files, handles }
}

fn fresh(prepared: &PreparedGlobals) -> Engine {
    let (sink, _) = collect_output();
    let mut engine = Engine::new(u64::MAX, sink).expect("the engine starts");
    engine.install(prepared).expect("the globals install");
    engine
}

fn start(source: &str) -> Start {
    Start {
        source: source.to_owned(),
        globals: None,
        globals_key: None,
        limits: CellLimits::default(),
        journal: Journal::default(),
        skip_output: 0,
    }
}

/// Times `iters` fresh contexts, each built after the last one was dropped and collected untimed, as a worker
/// collects while it waits for its next cell.
fn fresh_after_collect(prepared: &PreparedGlobals, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut last = None;
    for _ in 0..iters {
        drop(last.take());
        boa_gc::force_collect();
        let started = Instant::now();
        let engine = fresh(prepared);
        total += started.elapsed();
        last = Some(engine);
    }
    total
}

/// A context as Boa builds it, without our natives, prelude or globals.
fn bare_context() -> boa_engine::Context {
    ContextBuilder::new()
        .module_loader(Rc::new(boa_engine::module::IdleModuleLoader))
        .instructions_remaining(usize::MAX)
        .build()
        .expect("a context builds")
}

/// CPU time of the calling thread: on a shared machine it moves less than wall-clock time with the load.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn contexts(c: &mut Criterion) {
    // One tool, as `codemode`'s `exec` bench has; and a small gateway's catalog: 20 tool globals and two MCP
    // servers of 10 tools each.
    let prepared = PreparedGlobals::new(&globals(1, 0));
    let gateway = PreparedGlobals::new(&globals(20, 2));
    let empty = PreparedGlobals::new(&GuestGlobals::default());
    // `CODEMODE_CONTEXT_COUNT=n`: build n contexts the way a worker does (drop, collect, build) and exit, for
    // `perf stat -e instructions` (divide by n).
    if let Some(n) = std::env::var("CODEMODE_CONTEXT_COUNT").ok().and_then(|n| n.parse::<u64>().ok()) {
        // `CODEMODE_CONTEXT_KIND` picks one kind (`one`, `gateway`, `none`), e.g. under `valgrind --tool=callgrind`,
        // whose instruction counts do not move with the machine's load: run two counts and divide the difference.
        let kind = std::env::var("CODEMODE_CONTEXT_KIND").unwrap_or_default();
        for (name, what, globals) in [
            ("one", "with one tool", &prepared),
            ("gateway", "with 20 tools and 2 MCP servers", &gateway),
            ("none", "without tools", &empty),
        ] {
            if !kind.is_empty() && kind != name {
                continue;
            }
            let cpu = thread_cpu();
            let spent = fresh_after_collect(globals, n);
            let cpu = thread_cpu() - cpu;
            println!(
                "{n} contexts {what}: {:?} each (wall clock, build only); {:?} each of thread CPU time (build, \
                 drop and collect)",
                spent / n as u32,
                cpu / n as u32
            );
        }
        if !kind.is_empty() && kind != "bare" {
            std::process::exit(0);
        }
        let cpu = thread_cpu();
        for _ in 0..n {
            drop(bare_context());
        }
        println!(
            "{n} bare Boa contexts: {:?} each of thread CPU time (build and drop)",
            (thread_cpu() - cpu) / n as u32
        );
        std::process::exit(0);
    }
    let mut group = c.benchmark_group("context");
    group.bench_function("boa_builder_only", |b| b.iter_with_large_drop(bare_context));
    // A worker builds the next context after collecting the last one's garbage while idle (worker.rs).
    group.bench_function("fresh_with_api", |b| b.iter_custom(|iters| fresh_after_collect(&prepared, iters)));
    group.bench_function("fresh_with_api_no_tools", |b| b.iter_custom(|iters| fresh_after_collect(&empty, iters)));
    group.bench_function("fresh_with_api_gateway_catalog", |b| {
        b.iter_custom(|iters| fresh_after_collect(&gateway, iters))
    });
    // Dropping the last context and collecting it, then building the next: a worker serving cells back to back.
    group.bench_function("drop_collect_and_fresh_with_api", |b| {
        let mut last = Some(fresh(&prepared));
        b.iter(|| {
            drop(last.take());
            boa_gc::force_collect();
            last = Some(fresh(&prepared));
        })
    });
    group.bench_function("fresh_and_trivial_cell", |b| {
        b.iter_with_large_drop(|| {
            let mut engine = fresh(&prepared);
            let step = engine.start(start("return 1+1"), None);
            (engine, step)
        })
    });
    let mut engine = None;
    group.bench_function("trivial_cell_in_built_context", |b| {
        b.iter_batched(
            || fresh(&prepared),
            |mut built| {
                let step = built.start(start("return 1+1"), None);
                // Dropped outside the timing, as a worker drops it after reporting.
                engine = Some(built);
                black_box(step)
            },
            criterion::BatchSize::SmallInput,
        )
    });
    drop(engine);
    group.finish();
    parts(c);
}

/// The pieces of a context build, each on a context of its own: where the time of `fresh_with_api` goes.
fn parts(c: &mut Criterion) {
    const PRELUDE: &str = include_str!("../src/engine/prelude.js");
    let bare = bare_context;
    let mut group = c.benchmark_group("context_parts");
    group.bench_function("natives_install", |b| {
        b.iter_batched(
            bare,
            |mut context| {
                codemode_worker::natives::install(&mut context).expect("install");
                context
            },
            criterion::BatchSize::LargeInput,
        )
    });
    group.bench_function("prelude_parse", |b| {
        b.iter_batched(
            bare,
            |mut context| {
                let script = Script::parse(Source::from_bytes(PRELUDE), None, &mut context).expect("parses");
                (script, context)
            },
            criterion::BatchSize::LargeInput,
        )
    });
    group.bench_function("prelude_parse_compile", |b| {
        b.iter_batched(
            bare,
            |mut context| {
                let script = Script::parse(Source::from_bytes(PRELUDE), None, &mut context).expect("parses");
                script.codeblock(&mut context).expect("compiles");
                (script, context)
            },
            criterion::BatchSize::LargeInput,
        )
    });
    group.bench_function("prelude_parse_compile_evaluate", |b| {
        b.iter_batched(
            bare,
            |mut context| {
                let script = Script::parse(Source::from_bytes(PRELUDE), None, &mut context).expect("parses");
                let value = script.evaluate(&mut context).expect("evaluates");
                (value, context)
            },
            criterion::BatchSize::LargeInput,
        )
    });
    group.bench_function("create_realm", |b| {
        let mut context = bare();
        b.iter_with_large_drop(|| context.create_realm().expect("a realm"))
    });
    group.finish();
}

criterion_group!(benches, contexts);
criterion_main!(benches);
