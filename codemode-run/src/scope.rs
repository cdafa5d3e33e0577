//! Catalog scopes: what the cells of one run catalog share across their `exec`s and `wait`s: the cumulative
//! search/describe/call counters that telemetry reports with their `counterScope`, and the scheduling of
//! `executionMode: "sequential"` tools.
//!
//! A scope belongs to one owner (session, agent, agent run) of one catalog; separate owners stay independent. The
//! counters of a scope only grow; a scope is forgotten (oldest first) only past [`MAX_SCOPES`]. A new catalog is a
//! new counter lifetime: the engine starts new scopes when its tools are replaced (not when tools are only
//! appended), and a run restored from a checkpoint joins its owner's scope in this process, never the parked one's.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use codemode_catalog::{Catalog, ExecutionMode};
use codemode_snapshot::{RunCounters, RunOwner};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// Scopes kept at most; past it the oldest is forgotten (its counters restart under a new `counterScope`).
pub const MAX_SCOPES: usize = 4096;

/// The scopes of one engine, by owner.
#[derive(Default)]
pub struct CatalogScopes {
    state: Mutex<ScopesState>,
}

#[derive(Default)]
struct ScopesState {
    by_owner: HashMap<RunOwner, Arc<CatalogScope>>,
    order: VecDeque<RunOwner>,
}

impl CatalogScopes {
    /// The scope of `owner`'s catalog, created on first use with a fresh `counterScope` and zero counters.
    pub fn get(&self, owner: &RunOwner, catalog: &Catalog) -> Arc<CatalogScope> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(scope) = state.by_owner.get(owner) {
            return scope.clone();
        }
        let scope = Arc::new(CatalogScope::new(format!("cs_{}", uuid::Uuid::new_v4().simple()), catalog));
        if state.order.len() >= MAX_SCOPES
            && let Some(oldest) = state.order.pop_front()
        {
            state.by_owner.remove(&oldest);
        }
        state.order.push_back(owner.clone());
        state.by_owner.insert(owner.clone(), scope.clone());
        scope
    }
}

/// One run catalog's shared state.
pub struct CatalogScope {
    id: String,
    search: AtomicU32,
    describe: AtomicU32,
    calls: AtomicU32,
    /// `Some` when the catalog holds a sequential tool: every catalog call then takes this lock, a parallel call
    /// shared and a sequential one exclusive, in the order the calls were dispatched (tokio's lock is fair).
    schedule: Option<Arc<RwLock<()>>>,
}

/// A call's place in the schedule, held until its result is in.
#[must_use]
pub enum Turn {
    /// Ungated: the catalog has no sequential tool.
    Free,
    /// A parallel call, overlapping other parallel calls.
    Shared(OwnedRwLockReadGuard<()>),
    /// A sequential call, alone.
    Exclusive(OwnedRwLockWriteGuard<()>),
}

impl CatalogScope {
    fn new(id: String, catalog: &Catalog) -> Self {
        let gated = catalog.entries().iter().any(|e| e.definition.execution_mode == ExecutionMode::Sequential);
        CatalogScope {
            id,
            search: AtomicU32::new(0),
            describe: AtomicU32::new(0),
            calls: AtomicU32::new(0),
            schedule: gated.then(|| Arc::new(RwLock::new(()))),
        }
    }

    /// The `counterScope` of this scope's telemetry.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The totals so far.
    pub fn counters(&self) -> RunCounters {
        RunCounters {
            search_count: self.search.load(Ordering::Relaxed),
            describe_count: self.describe.load(Ordering::Relaxed),
            call_count: self.calls.load(Ordering::Relaxed),
        }
    }

    /// Counts one `catalog.search` (or `catalog.all`, when it is counted).
    pub fn count_search(&self) {
        self.search.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one `describe()`.
    pub fn count_describe(&self) {
        self.describe.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one nested call.
    pub fn count_call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits for the turn of a call of a tool in `mode`: a sequential call after every earlier call, a parallel
    /// call after every earlier sequential one. Its place in line is taken at the first poll.
    pub async fn turn(&self, mode: ExecutionMode) -> Turn {
        match (&self.schedule, mode) {
            (None, _) => Turn::Free,
            (Some(lock), ExecutionMode::Sequential) => Turn::Exclusive(lock.clone().write_owned().await),
            (Some(lock), _) => Turn::Shared(lock.clone().read_owned().await),
        }
    }
}
