//! Approvals in a run: who decides them during the current `exec` or `wait`, the tools approved for the rest of the
//! run, and the decisions and pauses the calls' tasks send back to their run.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use codemode_bridge::{ApprovalDecision, Approver};
use codemode_snapshot::Clock;
use tokio::sync::mpsc;

use crate::RunOptions;

use super::LiveRun;

/// A decision on a call's approval, sent by the call's task to its run before the task ends.
#[derive(Debug)]
pub(crate) struct Notice {
    pub(crate) id: u32,
    pub(crate) decision: ApprovalDecision,
    /// When it arrived (epoch ms, the engine's clock).
    pub(crate) at_ms: u64,
    /// Whether the call is write-class.
    pub(crate) write: bool,
}

/// A nested call starting (`on`) or ending a wait for a person (an elicitation relayed by the host), sent by the
/// call's [`PauseSink`](codemode_bridge::PauseSink) with the time it happened.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) id: u32,
    pub(crate) on: bool,
    /// When (epoch ms, the engine's clock).
    pub(crate) at_ms: u64,
}

/// What a run keeps about approvals.
pub(super) struct RunApprovals {
    /// The approver, answers and title of the current `exec` or `wait`.
    pub(super) options: RunOptions,
    /// Tools approved for the rest of the run (`<server>.<tool>` or the tool's name); shared with the calls'
    /// tasks, so a call waiting in the queue sees an approval given meanwhile.
    pub(super) approved: Arc<Mutex<BTreeSet<String>>>,
    /// What the calls' tasks share with the run, made at its first dispatch: a run that calls nothing makes none.
    pub(super) links: Option<Links>,
}

/// The turn and the channels a run shares with its calls' tasks.
pub(super) struct Links {
    /// Held by the call being asked about: a run asks one question at a time, so a second call of a tool waits
    /// for the first's answer and is not asked at all when that answer covers the rest of the run.
    pub(super) turn: Arc<tokio::sync::Mutex<()>>,
    pub(super) notices: mpsc::UnboundedSender<Notice>,
    received: mpsc::UnboundedReceiver<Notice>,
    /// The pauses of nested calls waiting for a person (elicitations), sent by their tasks.
    pub(super) holds: mpsc::UnboundedSender<Hold>,
    held: mpsc::UnboundedReceiver<Hold>,
}

impl Links {
    pub(super) fn new() -> Links {
        let (notices, received) = mpsc::unbounded_channel();
        let (holds, held) = mpsc::unbounded_channel();
        Links { turn: Arc::new(tokio::sync::Mutex::new(())), notices, received, holds, held }
    }
}

impl RunApprovals {
    pub(super) fn new(options: RunOptions, approved: BTreeSet<String>) -> Self {
        RunApprovals { options, approved: Arc::new(Mutex::new(approved)), links: None }
    }
}

/// The parts of a run's approvals that dispatch reads.
pub(crate) struct ApprovalParts<'a> {
    pub(crate) approver: &'a Option<Arc<dyn Approver>>,
    pub(crate) answers: &'a [(String, ApprovalDecision)],
    pub(crate) title: &'a Option<String>,
    pub(crate) approved: &'a Arc<Mutex<BTreeSet<String>>>,
    pub(crate) turn: &'a Arc<tokio::sync::Mutex<()>>,
    pub(crate) notices: &'a mpsc::UnboundedSender<Notice>,
    /// Where a call's pause sink sends its holds, and the clock that dates them.
    pub(crate) holds: (&'a mpsc::UnboundedSender<Hold>, &'a Arc<dyn Clock>),
}

/// Hands the machine the approval decisions that arrived. A call's task sends its decision before it ends, so
/// taking them before each settlement keeps a decision ahead of its call's settlement.
pub(super) fn take_notices<C>(run: &mut LiveRun<C>) {
    let Some(links) = run.approvals.links.as_mut() else { return };
    while let Ok(notice) = links.received.try_recv() {
        run.machine.approval_decided(notice.id, notice.decision, notice.at_ms, notice.write);
    }
    while let Ok(hold) = links.held.try_recv() {
        run.machine.hold_changed(hold.id, hold.on, hold.at_ms);
    }
}
