//! The worker's confinement, applied before it runs any guest code: an address-space limit, `no_new_privs`, Landlock
//! with no filesystem or network access, and a seccomp-bpf allowlist installed on every thread (TSYNC).
//!
//! The host chooses the [`Confinement`] mode and passes it in the worker's environment (`codemode_vm::confine`
//! holds the mode, the steps and the report both sides share).

use codemode_vm::confine::{
    Confinement, ConfinementReport, ENV_CONFINEMENT, EXIT_CONFINEMENT, Step, StepOutcome, StepReport,
};

/// A confinement in progress: the steps taken so far and the mode that decides what a failure does.
#[derive(Debug)]
pub struct Confiner {
    report: ConfinementReport,
}

impl Confiner {
    /// The mode named in the environment ([`ENV_CONFINEMENT`]); absent means [`Confinement::Required`]. An unknown
    /// name also means `Required`, so a typo never weakens the worker.
    pub fn from_env() -> Confiner {
        let mode = std::env::var(ENV_CONFINEMENT).ok().and_then(|v| Confinement::parse(&v)).unwrap_or_default();
        Confiner::new(mode)
    }

    /// A confinement in `mode` with no step taken yet.
    pub fn new(mode: Confinement) -> Confiner {
        Confiner { report: ConfinementReport { mode, steps: Vec::new() } }
    }

    /// The steps that must run on the main thread before any other thread exists: the address-space limit,
    /// `no_new_privs` and Landlock (a Landlock domain is inherited by threads created after it, not given to
    /// threads that exist).
    pub fn before_threads(&mut self, address_space: Option<u64>) {
        let mode = self.report.mode;
        match address_space {
            Some(bytes) => {
                let outcome = set_address_space(bytes);
                // The limit predates this layer and `Off` keeps it, best effort, as before.
                let fatal = mode == Confinement::Required;
                self.record(Step::AddressSpace, outcome, fatal);
            }
            None => self.record(Step::AddressSpace, Ok("no limit configured".into()), false),
        }
        if mode == Confinement::Off {
            self.skip(Step::NoNewPrivs);
            self.skip(Step::Landlock);
            return;
        }
        let fatal = mode == Confinement::Required;
        self.record(Step::NoNewPrivs, set_no_new_privs(), fatal);
        self.record(Step::Landlock, landlock(), fatal);
    }

    /// Installs the seccomp allowlist on every thread of the process. Call it from the thread that will run guest
    /// code, once every thread the worker needs exists: the filter allows no new thread or process.
    pub fn seccomp(&mut self) {
        match self.report.mode {
            Confinement::Off => self.skip(Step::Seccomp),
            mode => self.record(Step::Seccomp, seccomp(), mode == Confinement::Required),
        }
    }

    /// The report of the steps taken.
    pub fn report(&self) -> &ConfinementReport {
        &self.report
    }

    /// Consumes the confiner into its report.
    pub fn into_report(self) -> ConfinementReport {
        self.report
    }

    fn skip(&mut self, step: Step) {
        self.report.steps.push(StepReport { step, outcome: StepOutcome::Skipped });
    }

    fn record(&mut self, step: Step, outcome: Result<String, String>, fatal: bool) {
        #[cfg(feature = "confine-probe")]
        let outcome = probe::inject(step, outcome);
        match outcome {
            Ok(detail) => self.report.steps.push(StepReport { step, outcome: StepOutcome::Applied { detail } }),
            Err(error) if fatal => abandon(step, &error),
            Err(error) => self.report.steps.push(StepReport { step, outcome: StepOutcome::Failed { error } }),
        }
    }
}

/// Ends the worker: a required step failed. The host reads the stderr line and the exit code.
fn abandon(step: Step, error: &str) -> ! {
    eprintln!("codemode worker: confinement step {step} failed: {error}");
    std::process::exit(EXIT_CONFINEMENT)
}

fn set_address_space(bytes: u64) -> Result<String, String> {
    let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
    // SAFETY: setrlimit reads the struct it is given and changes only this process's limits.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    if rc != 0 {
        return Err(format!("setrlimit(RLIMIT_AS, {bytes}): {}", std::io::Error::last_os_error()));
    }
    Ok(format!("{bytes} bytes"))
}

fn set_no_new_privs() -> Result<String, String> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments and only sets a flag on this thread (and its children).
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(format!("prctl(PR_SET_NO_NEW_PRIVS): {}", std::io::Error::last_os_error()));
    }
    Ok("set".into())
}

/// A Landlock domain without a single rule: every filesystem right the running kernel's ABI knows (and the network
/// and scope rights where it knows them) is handled, and none is granted. Files the worker already holds open
/// (stdin, stdout, stderr) stay usable; nothing can be opened, created, renamed, connected to or bound.
fn landlock() -> Result<String, String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope,
    };
    // The newest ABI this crate knows; best-effort compatibility then drops what the kernel does not.
    let abi = ABI::V7;
    let status: Result<RestrictionStatus, landlock::RulesetError> = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.handle_access(AccessNet::from_all(abi)))
        .and_then(|r| r.scope(Scope::from_all(abi)))
        .and_then(|r| r.create())
        // `no_new_privs` is its own step, taken just before.
        .and_then(|r| r.no_new_privs(false).restrict_self());
    let status = status.map_err(|e| format!("landlock: {e}"))?;
    let kernel = kernel_abi();
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(format!("no file or network access (ABI {kernel})")),
        RulesetStatus::PartiallyEnforced => {
            Ok(format!("no file access the kernel's ABI {kernel} can deny (newer rights unknown to it)"))
        }
        RulesetStatus::NotEnforced => Err("landlock is not supported or not enabled by this kernel".into()),
    }
}

/// The running kernel's Landlock ABI version (0 when it has none).
fn kernel_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
    // SAFETY: with a null attribute and size 0, this flag only returns the ABI version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    v.max(0)
}

/// The syscalls the worker makes once confined, found with `strace -f` on workers running the corpus and the
/// benchmarks: reading host messages and writing reports on the fds it holds, waiting for input, memory, time,
/// randomness, signals for its own stack-overflow and abort paths, and exiting.
///
/// Anything else returns `EPERM` rather than killing the process: guest JavaScript cannot make a syscall itself,
/// so a denied one can only come from engine or library code, where an error stays an error (a failed cell, a
/// worker that exits) instead of a `SIGSYS` that takes down a cell mid-write; and a denied attempt stays observable
/// (the confinement test checks each forbidden operation's `EPERM`). Denied notably: `open`/`openat`/`creat`,
/// `socket`/`connect`/`bind`, `execve`/`execveat`, `ptrace`, `process_vm_readv`/`writev`, `clone`/`clone3`/`fork`/
/// `vfork` (no new thread or process at all), `kill`/`tgkill` of other processes, `mmap`/`mprotect` with
/// `PROT_EXEC` (the engine interprets; it never makes memory executable).
#[cfg(target_arch = "x86_64")]
fn seccomp() -> Result<String, String> {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
        TargetArch,
    };

    let plain: &[libc::c_long] = &[
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_writev,
        libc::SYS_close,
        libc::SYS_fcntl,
        libc::SYS_poll,
        libc::SYS_ppoll,
        libc::SYS_futex,
        libc::SYS_munmap,
        libc::SYS_mremap,
        libc::SYS_madvise,
        libc::SYS_brk,
        libc::SYS_clock_gettime,
        libc::SYS_clock_nanosleep,
        libc::SYS_gettimeofday,
        libc::SYS_sched_yield,
        libc::SYS_getrandom,
        libc::SYS_sigaltstack,
        libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigaction,
        libc::SYS_getpid,
        libc::SYS_gettid,
        libc::SYS_exit,
        libc::SYS_exit_group,
    ];
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = plain.iter().map(|nr| (*nr, Vec::new())).collect();
    let err = |e: seccompiler::BackendError| format!("seccomp filter: {e}");
    // Memory may be mapped and protected, never executable.
    let no_exec = || {
        SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(libc::PROT_EXEC as u64), 0)
            .and_then(|c| SeccompRule::new(vec![c]))
    };
    rules.insert(libc::SYS_mmap, vec![no_exec().map_err(err)?]);
    rules.insert(libc::SYS_mprotect, vec![no_exec().map_err(err)?]);
    // A signal only to this process (abort raises SIGABRT with tgkill on itself).
    let pid = u64::from(std::process::id());
    let own = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, pid)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(err)?;
    rules.insert(libc::SYS_tgkill, vec![own]);
    let filter =
        SeccompFilter::new(rules, SeccompAction::Errno(libc::EPERM as u32), SeccompAction::Allow, TargetArch::x86_64)
            .map_err(err)?;
    let program: BpfProgram = filter.try_into().map_err(|e: seccompiler::BackendError| err(e))?;
    seccompiler::apply_filter_all_threads(&program).map_err(|e| format!("seccomp: {e}"))?;
    Ok(format!("allowlist of {} syscalls, every other one EPERM, on all threads", plain.len() + 3))
}

#[cfg(not(target_arch = "x86_64"))]
fn seccomp() -> Result<String, String> {
    Err("the allowlist is written for x86_64 only".into())
}

/// A test-only probe, compiled in only with the `confine-probe` feature (enabled by this crate's own tests) and run
/// only when [`probe::ENV_PROBE`] is set in the worker's environment, which the pool never sets: after confining,
/// the worker attempts each forbidden operation from native code, prints one JSON line with the report and every
/// result, and exits. JavaScript cannot reach it.
#[cfg(feature = "confine-probe")]
pub mod probe {
    use super::ConfinementReport;

    /// Environment variable that turns a worker into the probe: `all` (every step, then the forbidden operations),
    /// `landlock` (the same with the seccomp step left out, to see Landlock deny on its own), or `fail-<step>` (that
    /// step fails, then the worker serves as usual).
    pub const ENV_PROBE: &str = "CODEMODE_WORKER_PROBE";

    fn mode() -> Option<String> {
        std::env::var(ENV_PROBE).ok()
    }

    /// Whether the worker runs the probe instead of serving.
    pub fn enabled() -> bool {
        mode().is_some_and(|m| m == "all" || m == "landlock")
    }

    /// Whether the probe asked to leave the seccomp step out.
    pub fn without_seccomp() -> bool {
        mode().is_some_and(|m| m == "landlock")
    }

    /// A step's outcome, or a failure when the probe asked for one at that step.
    pub(super) fn inject(step: super::Step, outcome: Result<String, String>) -> Result<String, String> {
        if mode().is_some_and(|m| m.strip_prefix("fail-") == Some(step.as_str())) {
            return Err("failure injected by the confinement probe".into());
        }
        outcome
    }

    fn result(rc: i64) -> String {
        if rc >= 0 {
            return "ok".into();
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        match errno {
            libc::EPERM => "EPERM".into(),
            libc::EACCES => "EACCES".into(),
            other => format!("errno {other}"),
        }
    }

    /// Attempts every forbidden operation and prints the results.
    pub fn run(report: &ConfinementReport) {
        let mut probes: Vec<(&str, String)> = Vec::new();
        let passwd = c"/etc/passwd";
        let new_file = std::ffi::CString::new(format!("/tmp/codemode-probe-{}", std::process::id()))
            .expect("the path has no nul byte");
        // SAFETY (every block below): each call gets valid pointers to live, nul-terminated or sized buffers; a
        // call that unexpectedly succeeds is undone (the fd closed, the file removed, the child ended at once).
        unsafe {
            let fd = libc::open(passwd.as_ptr(), libc::O_RDONLY);
            probes.push(("open /etc/passwd", result(fd.into())));
            if fd >= 0 {
                libc::close(fd);
            }
            let fd = libc::openat(libc::AT_FDCWD, new_file.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600);
            probes.push(("openat a new file", result(fd.into())));
            if fd >= 0 {
                libc::close(fd);
                libc::unlink(new_file.as_ptr());
            }
            let sock = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            probes.push(("socket", result(sock.into())));
            // Connect on the socket if there is one, else on stdout: a filter answers before the fd is looked at.
            let target = if sock >= 0 { sock } else { 1 };
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 9u16.to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be() },
                sin_zero: [0; 8],
            };
            let rc = libc::connect(
                target,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            probes.push(("connect", result(rc.into())));
            if sock >= 0 {
                libc::close(sock);
            }
            let path = c"/bin/true";
            let argv = [path.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            let rc = libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            probes.push(("execve /bin/true", result(rc.into())));
            let parent = libc::getppid();
            let rc = libc::ptrace(libc::PTRACE_ATTACH, parent, 0, 0);
            probes.push(("ptrace attach", result(rc)));
            let mut buf = [0u8; 8];
            let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
            let remote = libc::iovec { iov_base: 0x1000 as *mut libc::c_void, iov_len: buf.len() };
            let rc = libc::process_vm_readv(parent, &local, 1, &remote, 1, 0);
            probes.push(("process_vm_readv", result(rc as i64)));
            let pid = libc::fork();
            if pid == 0 {
                libc::_exit(0);
            }
            probes.push(("fork", result(pid.into())));
            let spawned = std::thread::Builder::new().spawn(|| ());
            probes.push(("thread spawn", if spawned.is_ok() { "ok".into() } else { "EPERM".into() }));
            let rc = libc::kill(parent, 0);
            probes.push(("kill parent", result(rc.into())));
            let page = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            probes.push(("mmap PROT_EXEC", result(if page == libc::MAP_FAILED { -1 } else { 0 })));
        }
        let line = serde_json::json!({
            "report": report,
            "probes": probes.iter().map(|(op, r)| serde_json::json!({ "op": op, "result": r })).collect::<Vec<_>>(),
        });
        println!("{line}");
    }
}
