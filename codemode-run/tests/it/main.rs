//! Integration tests of `codemode-run`: the run machine driven by scripted events, its command transcripts compared
//! with insta snapshots (deterministic: no processes, no sleeps, a clock the script moves), and the replay property
//! with real worker processes driven by the machine and a scripted host.

mod approvals;
mod hold;
mod replay;
mod script;
mod transcripts;
