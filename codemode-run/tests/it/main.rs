//! Integration tests of `codemode-run`: the run machine driven by scripted events, its command transcripts compared
//! with insta snapshots (deterministic: no processes, no sleeps, a clock the script moves), and the replay property
//! with real worker processes driven by the machine and a scripted host; and the async driver itself over the scripted
//! fake cell.

mod approvals;
mod driver;
mod hold;
mod replay;
mod script;
mod transcripts;
