//! The MCP sessions (Streamable HTTP) of each principal: who opened each, at most `max_sessions` open per principal,
//! and each closed once it has had no request in progress for `session_idle_seconds`.
//!
//! A session is busy while the response of one of its `POST` requests is being sent (a call that runs a minute is a
//! minute of activity); a `GET` stream left open is not activity, so abandoned sessions cannot be held open by it.
//! Invariant: a session is forgotten here before it is closed, so the place it held is free before its streams end;
//! rmcp's own idle timer is off, this one closes sessions.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper::body::{Bytes, Frame, SizeHint};
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::sync::watch;

use super::Body;

/// The sessions of every principal, and the rmcp session manager that holds them.
pub struct Sessions {
    manager: Arc<LocalSessionManager>,
    max: usize,
    idle: Duration,
    open: Mutex<HashMap<String, Open>>,
    /// Itself, for the reapers (which must not keep it alive).
    this: Weak<Sessions>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").field("max", &self.max).field("idle", &self.idle).finish_non_exhaustive()
    }
}

/// One open session: its principal, and its requests in progress (watched by its reaper).
struct Open {
    owner: String,
    busy: watch::Sender<usize>,
}

/// A new session refused: its principal already has `max` open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManySessions {
    /// `max_sessions`.
    pub max: usize,
    /// `session_idle_seconds`.
    pub idle_seconds: u64,
}

/// A request in progress on a session; dropping it ends it.
pub struct Busy(watch::Sender<usize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Sessions {
    /// Sessions of at most `max` per principal, closed after `idle` without a request in progress.
    pub fn new(max: usize, idle: Duration) -> Arc<Sessions> {
        let mut manager = LocalSessionManager::default();
        // This registry closes idle sessions (and forgets them first); rmcp's timer would close them behind its back.
        manager.session_config.keep_alive = None;
        Arc::new_cyclic(|this| Sessions {
            manager: Arc::new(manager),
            max,
            idle,
            open: Mutex::default(),
            this: this.clone(),
        })
    }

    /// The rmcp session manager the Streamable HTTP service must use.
    pub fn manager(&self) -> Arc<LocalSessionManager> {
        self.manager.clone()
    }

    /// The principal (owner key) that opened session `id`, if it is open.
    pub fn owner(&self, id: &str) -> Option<String> {
        self.lock().get(id).map(|open| open.owner.clone())
    }

    /// Starts a request on session `id` (a `POST`); `None` for a session that is not open.
    pub fn begin(&self, id: &str) -> Option<Busy> {
        let open = self.lock();
        let busy = &open.get(id)?.busy;
        busy.send_modify(|n| *n += 1);
        Some(Busy(busy.clone()))
    }

    /// Records session `id`, just opened by `owner`, with its first request (the `initialize`) in progress.
    ///
    /// # Errors
    ///
    /// [`TooManySessions`] when `owner` already has `max_sessions` open; the new session is closed.
    pub async fn opened(&self, id: &str, owner: &str) -> Result<Busy, TooManySessions> {
        let busy = {
            let mut open = self.lock();
            if open.values().filter(|o| o.owner == owner).count() >= self.max {
                None
            } else {
                let (busy, watching) = watch::channel(1);
                open.insert(id.to_owned(), Open { owner: owner.to_owned(), busy: busy.clone() });
                tokio::spawn(reap(self.this.clone(), id.to_owned(), watching, self.idle));
                Some(Busy(busy))
            }
        };
        match busy {
            Some(busy) => Ok(busy),
            None => {
                // Never handed to its client; the handler it started goes with it.
                let _ = self.manager.close_session(&id.into()).await;
                Err(TooManySessions { max: self.max, idle_seconds: self.idle.as_secs() })
            }
        }
    }

    /// Forgets session `id`, closed by its client (`DELETE`).
    pub fn closed(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
        // Every critical section leaves the map consistent, so a poisoned lock is safe.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Closes session `id` once it has had no request in progress for `idle`; returns early when the session is
/// forgotten otherwise (closed by its client, its registry gone).
async fn reap(sessions: Weak<Sessions>, id: String, mut busy: watch::Receiver<usize>, idle: Duration) {
    loop {
        if *busy.borrow_and_update() > 0 {
            if busy.changed().await.is_err() {
                return;
            }
            continue;
        }
        // Idle: any request starting or ending restarts the wait.
        tokio::select! {
            changed = busy.changed() => if changed.is_err() { return } else { continue },
            () = tokio::time::sleep(idle) => {}
        }
        let Some(sessions) = sessions.upgrade() else { return };
        let removed = {
            let mut open = sessions.lock();
            // A request may have started between the timer and the lock: then the session stays.
            match open.get(&id) {
                Some(entry) if *entry.busy.borrow() == 0 => open.remove(&id),
                Some(_) => continue,
                None => return,
            }
        };
        drop(removed);
        let _ = sessions.manager.close_session(&id.as_str().into()).await;
        return;
    }
}

/// `body` holding `busy` until it has been sent (or dropped, when the client goes away).
pub fn tracked(body: Body, busy: Busy) -> Body {
    Tracked { body, busy: Some(busy) }.boxed()
}

struct Tracked {
    body: Body,
    busy: Option<Busy>,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.busy = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
