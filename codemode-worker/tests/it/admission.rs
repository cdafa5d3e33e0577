//! The admission of cells (`pool::Admission`): a cell holds a place from the message that sets it computing to the
//! worker's next report, cells queue for a place first in, first out, and a cell past its time slice gives its place
//! back while it still computes.
//!
//! Deterministic: no test waits on the clock. A queued checkout is polled by hand (`poll_once`), and the time slice
//! is zero (a place is given back as soon as the cell's worker has nothing to say) or an hour (never).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use codemode_bridge::Journal;
use codemode_vm::pool::{Admission, PoolConfig, WorkerCommand, WorkerPool};
use codemode_vm::protocol::{CellLimits, GuestOutcome, HostMessage, Start, WorkerMessage};

fn pool(admission: &Arc<Admission>) -> Arc<WorkerPool> {
    WorkerPool::new(PoolConfig {
        command: WorkerCommand { program: PathBuf::from(env!("CARGO_BIN_EXE_codemode-worker")), args: Vec::new() },
        warm: 0,
        max_idle: 4,
        idle_ttl: Duration::from_secs(3600),
        memory_limit_bytes: 64 * 1024 * 1024,
        // An endless loop must outlive the test rather than end on the budget.
        instructions: u64::MAX / 2,
        globals: None,
        confinement: Default::default(),
        require_fast_paths: false,
        admission: Some(admission.clone()),
    })
}

fn start(source: &str) -> HostMessage {
    HostMessage::Start(Box::new(Start {
        source: source.into(),
        globals: None,
        globals_key: None,
        limits: CellLimits::default(),
        journal: Journal::default(),
        skip_output: 0,
    }))
}

/// Polls `future` once: its output if it is ready now.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    match std::pin::Pin::new(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

#[tokio::test]
async fn a_cell_holds_its_place_until_its_report_and_queued_cells_get_places_in_order() {
    let admission = Admission::new(1, Duration::from_secs(3600));
    let pool = pool(&admission);
    let mut first = pool.checkout_admitted().await.expect("a worker starts");
    assert_eq!(admission.running(), 1);
    // The only place is taken: the next two checkouts queue, in this order, and hold no worker yet.
    let mut second = Box::pin(pool.checkout_admitted());
    let mut third = Box::pin(pool.checkout_admitted());
    assert!(poll_once(&mut second).is_none());
    assert!(poll_once(&mut third).is_none());
    assert_eq!(admission.queued(), 2);
    assert_eq!(pool.stats().admission_waits, 2);
    // The first cell's `Start` uses the place its checkout took, and its report gives it back.
    first.send(&start("return 6 * 7")).await.expect("the cell starts");
    assert_eq!(admission.running(), 1);
    let report = first.recv().await.expect("the cell reports");
    assert!(
        matches!(&report, WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Returned { value }), .. } if *value == 42),
        "{report:?}"
    );
    // The place went to the one that asked first, not to the later one.
    assert!(poll_once(&mut third).is_none(), "the third waits behind the second");
    let second = poll_once(&mut second).expect("the second got the place").expect("a worker starts");
    assert_eq!(admission.running(), 1);
    pool.checkin(first);
    // Returned to the pool without running a cell, a worker gives its place back.
    pool.checkin(second);
    let third = poll_once(&mut third).expect("the third got the place").expect("a worker starts");
    drop(third);
    assert_eq!(admission.running(), 0);
}

#[tokio::test]
async fn a_cell_past_its_time_slice_gives_its_place_back_and_computes_on() {
    let admission = Admission::new(1, Duration::ZERO);
    let pool = pool(&admission);
    let mut endless = pool.checkout_admitted().await.expect("a worker starts");
    endless.send(&start("while (true) {}")).await.expect("the cell starts");
    // While the host waits for its report, the cell is past its (zero) slice: its place goes to the next cell,
    // which runs to its end while the endless one still computes.
    let waiting = tokio::spawn(async move {
        let report = endless.recv().await;
        (endless, report)
    });
    let mut next = pool.checkout_admitted().await.expect("the place came back");
    next.send(&start("return 'next'")).await.expect("the cell starts");
    let report = next.recv().await.expect("the cell reports");
    assert!(matches!(&report, WorkerMessage::Quiescent { outcome: Some(_), .. }), "{report:?}");
    assert!(!waiting.is_finished(), "the endless cell computes on");
    // Dropping the endless cell's worker kills it.
    waiting.abort();
    assert!(waiting.await.is_err());
}

#[tokio::test]
async fn without_admission_checkouts_never_queue() {
    let pool = crate::pool_sizing::pool(4);
    let workers = [pool.checkout_admitted().await.unwrap(), pool.checkout_admitted().await.unwrap()];
    assert_eq!(pool.stats().admission_waits, 0);
    drop(workers);
}
