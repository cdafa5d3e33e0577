//! The worker process: reads host messages from stdin, runs one cell at a time on a thread with a large stack, and
//! writes reports and streamed output to stdout.
//!
//! Each cell gets a fresh context, built (with the globals the host configured) before the `Start` that uses it
//! arrives, so nothing leaks between cells and a warm worker pays only for the program. The next context is built
//! once the host has taken the last result, and an idle worker keeps its engine code warm for a while (see
//! `KeepWarm`). The process is disposable: the host kills it on a deadline, and the counting allocator ends it
//! with a recognisable exit code when the guest passes its memory limit. Before it reads anything, a worker
//! introduces itself with [`WorkerMessage::Hello`]: its protocol version and whether its engine has append strings.

use std::alloc::{GlobalAlloc, Layout};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mimalloc::MiMalloc;

use codemode_vm::confine::{ConfinementReport, ENV_ADDRESS_SPACE};
use codemode_vm::protocol::{
    ENV_INSTRUCTIONS, ENV_MEMORY, EXIT_MEMORY, FastPaths, HostMessage, KeptGlobals, WorkerHello, WorkerMessage,
};

use crate::confine::Confiner;
use crate::engine::{Engine, PreparedGlobals};

/// How long a worker lets the host take a result before it builds its next context.
const NEXT_CONTEXT_DELAY_MS: i32 = 2;
/// How long a context must wait for its cell for the worker to count as serving turns rather than a busy host.
const IDLE_THRESHOLD: std::time::Duration = std::time::Duration::from_millis(20);
/// Stack of the engine thread: Boa recurses natively in its parser, `JSON.stringify` and friends. `String()` of an
/// array nested 100,000 deep (a corpus fixture) needs about 250 MiB in a debug build; 384 MiB leaves room. Only the
/// pages a program touches are committed.
const ENGINE_STACK: usize = 384 * 1024 * 1024;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// A global allocator that counts live bytes and ends the process when a limit is passed; the memory itself comes
/// from mimalloc, which takes about 20% off a context's build and collection against glibc's malloc
/// (PERFORMANCE-NOTES.md, "The worker's allocator and the build's turn").
///
/// Install it in the binary that serves as a worker (`#[global_allocator]`); the limit is only armed by
/// [`run_worker`], so the same binary can be a host too.
#[derive(Debug)]
pub struct CountingAlloc;

impl CountingAlloc {
    fn admit(size: usize) {
        let now = ALLOCATED.fetch_add(size, Ordering::Relaxed) + size;
        if now > LIMIT.load(Ordering::Relaxed) {
            over_limit();
        }
    }
}

#[cold]
fn over_limit() -> ! {
    const MESSAGE: &[u8] = b"codemode worker: memory limit exceeded\n";
    // SAFETY: write(2) and _exit(2) are async-signal-safe and allocate nothing; this is the only way out of an
    // allocator that must not allocate or unwind.
    unsafe {
        libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
        libc::_exit(EXIT_MEMORY)
    }
}

// SAFETY: every method forwards to `MiMalloc` with the same layout; the counter is only bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::admit(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `MiMalloc` shares.
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::admit(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `MiMalloc` with `layout`.
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            Self::admit(new_size - layout.size());
        } else {
            ALLOCATED.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: `ptr` was allocated by `MiMalloc` with `layout`; the caller upholds the rest.
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// Serves cells on stdin/stdout until the host hangs up, then exits the process.
///
/// Call it first thing in a binary's `main` when that binary is started as a worker.
pub fn run_worker() -> ! {
    let memory = std::env::var(ENV_MEMORY).ok().and_then(|v| v.parse::<usize>().ok());
    let instructions = std::env::var(ENV_INSTRUCTIONS).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(u64::MAX);
    let address_space = std::env::var(ENV_ADDRESS_SPACE).ok().and_then(|v| v.parse::<u64>().ok());
    // Confinement comes before any host message is read: the Landlock steps here, while this is the only thread,
    // the seccomp filter on the engine thread once it exists (see `confine`).
    let mut confiner = Confiner::from_env();
    confiner.before_threads(address_space);
    let engine_thread = std::thread::Builder::new()
        .name("codemode-engine".into())
        .stack_size(ENGINE_STACK)
        .spawn(move || {
            #[cfg(feature = "confine-probe")]
            let probe_skips_seccomp = crate::confine::probe::without_seccomp();
            #[cfg(not(feature = "confine-probe"))]
            let probe_skips_seccomp = false;
            if !probe_skips_seccomp {
                confiner.seccomp();
            }
            #[cfg(feature = "confine-probe")]
            if crate::confine::probe::enabled() {
                crate::confine::probe::run(confiner.report());
                return Ok(());
            }
            if let Some(memory) = memory {
                // Arm the limit above what the process already holds, so the budget is the guest's.
                LIMIT.store(ALLOCATED.load(Ordering::Relaxed).saturating_add(memory), Ordering::Relaxed);
            }
            serve(instructions, confiner.into_report())
        })
        .expect("the engine thread starts");
    let code = match engine_thread.join() {
        Ok(Ok(())) => 0,
        Ok(Err(_)) | Err(_) => 70,
    };
    std::process::exit(code)
}

fn write_message(out: &mut impl Write, message: &WorkerMessage) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, message)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// The fast paths this worker's engine has: append strings as measured, shared scripts as built.
pub fn engine_fast_paths() -> FastPaths {
    FastPaths::new(engine_has_append_strings(), crate::engine::SHARED_SCRIPTS)
}

/// Whether the engine's strings append in place (`vendor/boa_string`'s patch) rather than copying the left operand
/// on every concatenation (crates.io's `boa_string`).
///
/// Measured, not assumed: it appends twice to a long string and checks that the second result starts at the same
/// address as the first, which only an append buffer does (a copying concatenation allocates anew while the first
/// result is still alive). Which `boa_string` is linked is decided by the embedder's `[patch.crates-io]`, not by
/// this crate, so only a run-time test can tell.
pub fn engine_has_append_strings() -> bool {
    use boa_engine::string::{JsStr, JsStrVariant, JsString};
    fn start(s: &JsString) -> usize {
        match s.as_str().variant() {
            JsStrVariant::Latin1(units) => units.as_ptr() as usize,
            JsStrVariant::Utf16(units) => units.as_ptr() as usize,
        }
    }
    let long = JsString::from("x".repeat(512).as_str());
    let once = JsString::concat(long.as_str(), JsStr::latin1(b"y"));
    let twice = JsString::concat(once.as_str(), JsStr::latin1(b"z"));
    start(&once) == start(&twice)
}

fn serve(instructions: u64, confinement: ConfinementReport) -> std::io::Result<()> {
    let mut input = BufReader::new(File::from(std::io::stdin().as_fd().try_clone_to_owned()?));
    let out = Rc::new(std::cell::RefCell::new(BufWriter::new(std::io::stdout())));
    let mut line = String::new();
    // The first message: the protocol version, the engine's fast paths and the confinement in force.
    let hello = WorkerHello::new(engine_fast_paths(), confinement);
    write_message(&mut *out.borrow_mut(), &WorkerMessage::Hello(hello))?;
    // The first message may configure the globals every context is built with; anything else is kept for the
    // first context.
    let mut next = read_message(&mut input, &mut line)?;
    let globals = match next.take() {
        None => return Ok(()),
        Some(HostMessage::Configure(globals)) => Some(PreparedGlobals::new(&globals)),
        Some(other) => {
            next = Some(other);
            None
        }
    };
    // Whether the last context waited long for its cell: the worker serves an agent's turns, not a busy host.
    let mut sat_idle = false;
    let mut warm = KeepWarm::new();
    let mut spin = SettleSpin::default();
    // The globals of keyed starts (a pool shared by several catalogs), prepared once each.
    let mut kept: KeptGlobals<Rc<PreparedGlobals>> = KeptGlobals::default();
    loop {
        if sat_idle && next.is_none() {
            // The host is still taking the result this worker just sent; building the next context right away
            // would compete with it for a core (measured: +2 ms per cell on a 2-core machine). A worker kept busy
            // builds at once instead: there the wait would only cost throughput. A message cuts the wait.
            wait_for_input(&input, NEXT_CONTEXT_DELAY_MS);
        } else if next.is_none() {
            // A busy host: the thread that reads the result this worker just wrote may be runnable on this CPU,
            // preempted, and the collection and build that follow would keep it waiting for all of their 300-600
            // µs (seen with `perf sched`: a back-to-back cell's answer read 500 µs after it was written). It goes
            // first.
            // SAFETY: sched_yield has no preconditions; it only lets another runnable thread have this CPU.
            unsafe { libc::sched_yield() };
        }
        // The last context is dropped; collect its garbage now, before the next one is built, so that the build
        // and the next cell run on a heap holding only live objects and do not stop to collect a whole dead
        // context (PERFORMANCE-NOTES.md, "Fresh contexts").
        boa_gc::force_collect();
        let mut engine = new_engine(instructions, &out)?;
        if let Some(globals) = &globals
            && let Err(e) = engine.install(globals)
        {
            eprintln!("codemode worker: the globals could not be installed: {e}");
            return Err(std::io::Error::other("globals rejected"));
        }
        // A worker of a shared pool installs the globals of the last keyed start ahead of need: the next cell of
        // the same catalog (an agent's next turn) then starts as a configured worker's does.
        let mut ahead = None;
        if globals.is_none()
            && let Some((key, prepared)) = kept.last()
        {
            match engine.install(prepared) {
                Ok(()) => ahead = Some(key),
                // The start installs what it names, in a context nothing was installed in.
                Err(_) => engine = new_engine(instructions, &out)?,
            }
        }
        // No `Ready` is written: the host never waits for one, and the write woke the host's I/O driver for
        // nothing once per cell.
        let ready_at = std::time::Instant::now();
        let mut started = false;
        if next.is_none() {
            warm.idle_until_input(&input);
        }
        loop {
            let message = match next.take() {
                Some(message) => message,
                None => match read_message(&mut input, &mut line)? {
                    Some(message) => message,
                    None => return Ok(()),
                },
            };
            let step = match message {
                HostMessage::Shutdown => return Ok(()),
                HostMessage::Start(mut start) if !started => {
                    started = true;
                    sat_idle = ready_at.elapsed() >= IDLE_THRESHOLD;
                    if ahead.is_some() && start.globals_key != ahead {
                        // The context carries another catalog's globals: this cell gets a clean one.
                        engine = new_engine(instructions, &out)?;
                    }
                    let prepared = match (start.globals_key, start.globals.take()) {
                        (None, globals) => {
                            start.globals = globals;
                            None
                        }
                        (Some(key), _) if ahead == Some(key) => {
                            kept.touch(key);
                            None
                        }
                        (Some(key), Some(globals)) => {
                            let prepared = Rc::new(PreparedGlobals::new(&globals));
                            kept.insert(key, prepared.clone());
                            Some(prepared)
                        }
                        (Some(key), None) => match kept.touch(key) {
                            Some(prepared) => Some(prepared.clone()),
                            None => {
                                eprintln!("codemode worker: a start without globals names a key it does not keep");
                                return Err(std::io::Error::other("unknown globals key"));
                            }
                        },
                    };
                    engine.start(*start, prepared.as_deref())
                }
                HostMessage::Settle(round) if started => engine.settle(&round),
                // The run parked and resumes by replay elsewhere: this context is dropped like a finished one.
                HostMessage::Reset if started => break,
                _ => {
                    eprintln!("codemode worker: message out of order");
                    return Err(std::io::Error::other("message out of order"));
                }
            };
            // The outcome is reported once; a later report of the same cell drains its last requests.
            let done = matches!(step, WorkerMessage::Failed { .. }) || engine.is_finished();
            let awaits_host = matches!(&step, WorkerMessage::Quiescent { open, .. } if *open > 0);
            write_message(&mut *out.borrow_mut(), &step)?;
            if done {
                break;
            }
            if awaits_host {
                spin.wait(&input);
            }
        }
    }
}

/// A fresh engine whose output goes to `out`.
fn new_engine(instructions: u64, out: &Rc<std::cell::RefCell<BufWriter<std::io::Stdout>>>) -> std::io::Result<Engine> {
    let sink_out = out.clone();
    let sink = Box::new(move |item| {
        // A broken pipe means the host is gone; the next read sees EOF and ends the worker.
        let _ = write_message(&mut *sink_out.borrow_mut(), &WorkerMessage::Output(item));
    });
    Engine::new(instructions, sink).map_err(|e| {
        eprintln!("codemode worker: the engine could not start: {e}");
        std::io::Error::other("engine start failed")
    })
}

/// The next host message, or `None` when the host hung up.
fn read_message(input: &mut impl BufRead, line: &mut String) -> std::io::Result<Option<HostMessage>> {
    line.clear();
    if input.read_line(line)? == 0 {
        return Ok(None);
    }
    serde_json::from_str(line).map(Some).map_err(|e| {
        eprintln!("codemode worker: bad host message: {e}");
        std::io::Error::other("bad host message")
    })
}

/// Keeps an idle worker's engine code hot while its next cell may come soon.
///
/// A cell that starts after the worker sat idle for tens of milliseconds runs mostly from cold caches (measured:
/// the trivial cell's engine time 230 µs instead of 40 µs). For [`KEEP_WARM_FOR`] after its context is ready, the
/// worker therefore runs a tiny fixed script every [`KEEP_WARM_EVERY`] in a scratch context of its own (never the
/// guest's), about 0.3% of a core; after that it sleeps until the host writes.
struct KeepWarm {
    scratch: Option<boa_engine::Context>,
}

/// How long an idle worker keeps warm: an agent's turns are usually seconds apart.
const KEEP_WARM_FOR: std::time::Duration = std::time::Duration::from_secs(30);
/// How often it runs the warming script meanwhile.
const KEEP_WARM_EVERY_MS: i32 = 10;
/// The warming script: the parser, the compiler, an async function, objects, arrays and the job queue.
const KEEP_WARM_SCRIPT: &str = "(async () => {\nconst o = { a: [1, 'x'] };\nreturn o.a[0] + o.a.length\n})()";

impl KeepWarm {
    fn new() -> Self {
        KeepWarm { scratch: None }
    }

    /// Returns when the host has written something.
    fn idle_until_input(&mut self, input: &BufReader<File>) {
        let since = std::time::Instant::now();
        while since.elapsed() < KEEP_WARM_FOR {
            if wait_for_input(input, KEEP_WARM_EVERY_MS) {
                return;
            }
            self.tick();
        }
        wait_for_input(input, -1);
    }

    fn tick(&mut self) {
        let scratch = match &mut self.scratch {
            Some(scratch) => scratch,
            None => match boa_engine::context::ContextBuilder::new()
                .module_loader(Rc::new(boa_engine::module::IdleModuleLoader))
                .instructions_remaining(1_000_000)
                .build()
            {
                Ok(context) => self.scratch.insert(context),
                Err(_) => return,
            },
        };
        // The script is fixed and cannot fail; a scratch context that ran out of budget is simply rebuilt.
        let evaluated = scratch.eval(boa_engine::Source::from_bytes(KEEP_WARM_SCRIPT)).and_then(|_| scratch.run_jobs());
        if evaluated.is_err() || scratch.instructions_remaining() < 1_000 {
            self.scratch = None;
        }
    }
}

/// Waits briefly, awake, for the host's answer to the requests a report released, before the blocking read.
///
/// A host that answers at once (a tool host that settles without a task) writes its `Settle` within tens of
/// microseconds; a worker asleep in `read` must then be woken, which costs about 20 µs on this kind of VM when its
/// CPU had halted (PERFORMANCE-NOTES.md, "The per-cell path"). For at most [`SETTLE_SPIN`] the worker therefore
/// polls its input without blocking, yielding its CPU to any other runnable thread between polls, so a loaded
/// machine loses nothing but the polls. A wait that found nothing makes the next waits skip the spin (doubling up
/// to [`SPIN_BACKOFF_MAX`] waits), so a host whose answers take longer (slow tools, a loaded host) costs at most
/// one spin in that many.
#[derive(Default)]
struct SettleSpin {
    /// Waits left to skip before spinning again.
    skip: u32,
    /// How many waits the last miss made the worker skip.
    backoff: u32,
}

/// The longest a worker spins for a `Settle`.
const SETTLE_SPIN: std::time::Duration = std::time::Duration::from_micros(60);
/// The most waits a miss makes the worker skip spinning for.
const SPIN_BACKOFF_MAX: u32 = 64;

impl SettleSpin {
    fn wait(&mut self, input: &BufReader<File>) {
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        let since = std::time::Instant::now();
        loop {
            if wait_for_input(input, 0) {
                self.backoff = 0;
                return;
            }
            if since.elapsed() >= SETTLE_SPIN {
                self.backoff = (self.backoff * 2).clamp(1, SPIN_BACKOFF_MAX);
                self.skip = self.backoff;
                return;
            }
            // SAFETY: sched_yield has no preconditions; it only lets another runnable thread have this CPU.
            unsafe { libc::sched_yield() };
        }
    }
}

/// Waits until the host writes something (`true`) or `timeout_ms` pass (`false`); a negative timeout waits forever.
fn wait_for_input(input: &BufReader<File>, timeout_ms: i32) -> bool {
    if !input.buffer().is_empty() {
        return true;
    }
    let mut fd = libc::pollfd { fd: input.get_ref().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: `fd` is a valid pollfd for the duration of the call; poll only writes its `revents`.
    let ready = unsafe { libc::poll(&mut fd, 1, timeout_ms) };
    // An error (EINTR) counts as input: the caller reads and sees what there is.
    ready != 0
}
