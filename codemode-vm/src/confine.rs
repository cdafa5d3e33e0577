//! What the host and a worker agree on about the worker's confinement: the [`Confinement`] mode the host chooses and
//! passes in the worker's environment, the steps, and the [`ConfinementReport`] the worker sends in its hello.
//! Invariant: under [`Confinement::Required`] a worker whose step failed exits with [`EXIT_CONFINEMENT`] before it
//! reads a single host message, so no guest code ever runs unconfined unless the host opted out. The worker side
//! that applies the steps is `codemode-worker`'s `confine`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Exit code of a worker that could not confine itself under [`Confinement::Required`].
pub const EXIT_CONFINEMENT: i32 = 87;
/// Environment variable that holds the worker's [`Confinement`] mode (`required`, `best_effort`, `off`); a worker
/// started without it confines itself as `required`.
pub const ENV_CONFINEMENT: &str = "CODEMODE_WORKER_CONFINEMENT";
/// Environment variable that holds the worker's address-space limit in bytes (`RLIMIT_AS`).
pub const ENV_ADDRESS_SPACE: &str = "CODEMODE_WORKER_ADDRESS_SPACE";
/// What a host tells an operator whose kernel cannot confine workers.
pub const OPT_OUT_HINT: &str = "on a kernel without Landlock or seccomp, set confinement to `best_effort` (or `off`): \
                                `PoolConfig::confinement`, `CodeModeBuilder::confinement`, `--confinement` or the \
                                gateway's `confinement` key";

/// How a worker confines itself, and what a step that fails does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Confinement {
    /// Every step must apply; a step that fails ends the worker before it runs anything (the default).
    #[default]
    Required,
    /// Every step is tried; one that fails is reported and the worker runs without it.
    BestEffort,
    /// No kernel confinement (no `no_new_privs`, Landlock or seccomp); only the address-space limit is set, best
    /// effort, as before this layer existed.
    Off,
}

impl Confinement {
    /// The mode's name in the environment, in TOML and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Confinement::Required => "required",
            Confinement::BestEffort => "best_effort",
            Confinement::Off => "off",
        }
    }

    /// Reads a mode name (`best-effort` is accepted for `best_effort`).
    pub fn parse(name: &str) -> Option<Confinement> {
        match name {
            "required" => Some(Confinement::Required),
            "best_effort" | "best-effort" => Some(Confinement::BestEffort),
            "off" => Some(Confinement::Off),
            _ => None,
        }
    }
}

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of the confinement, in the order the worker applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Step {
    /// `setrlimit(RLIMIT_AS)`: the address-space backstop behind the counting allocator.
    AddressSpace,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`: no privilege gained through `execve` (and required by the two below).
    NoNewPrivs,
    /// A Landlock domain that handles every filesystem and network right the kernel knows and grants none.
    Landlock,
    /// The seccomp-bpf allowlist, on every thread of the process.
    Seccomp,
}

impl Step {
    /// The step's name in reports and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::AddressSpace => "address_space",
            Step::NoNewPrivs => "no_new_privs",
            Step::Landlock => "landlock",
            Step::Seccomp => "seccomp",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StepOutcome {
    /// In force, with what exactly (e.g. the Landlock ABI).
    Applied {
        /// What is in force.
        detail: String,
    },
    /// Tried and not in force (only under [`Confinement::BestEffort`] or, for the address space, `Off`).
    Failed {
        /// Why.
        error: String,
    },
    /// Not tried ([`Confinement::Off`]).
    Skipped,
}

/// One step and its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReport {
    /// The step.
    pub step: Step,
    /// What became of it.
    #[serde(flatten)]
    pub outcome: StepOutcome,
}

/// What a worker applied, sent as its first message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfinementReport {
    /// The mode the worker ran.
    pub mode: Confinement,
    /// Every step, in the order applied.
    pub steps: Vec<StepReport>,
}

impl ConfinementReport {
    /// Whether every step is in force.
    pub fn fully_applied(&self) -> bool {
        self.steps.iter().all(|s| matches!(s.outcome, StepOutcome::Applied { .. }))
    }

    /// The steps that are not in force, with why.
    pub fn missing(&self) -> impl Iterator<Item = &StepReport> {
        self.steps.iter().filter(|s| !matches!(s.outcome, StepOutcome::Applied { .. }))
    }
}
