//! What the gateway relays between its client and its upstream servers besides requests: progress and logging.
//!
//! Upstream to gateway: each upstream connection is served by an [`UpstreamClient`], which hands the server's
//! `notifications/progress` to the nested call that sent the progress token (the [`ProgressSink`] of its
//! `CallContext`, so the run's activity hook sees it) and broadcasts its `notifications/message` with the server's
//! name as the logger. Gateway to client: [`ClientProgress`] turns a request's activity events into
//! `notifications/progress` on the client's progress token, and [`forward_logs`] sends the upstream log messages to
//! the client while its `exec` or `wait` runs.
//!
//! Invariant: a progress report reaches only the call whose token it names (tokens are per upstream connection, so
//! the key is the server and the token), and a client's progress values only increase.

#![allow(deprecated)] // MCP logging (`notifications/message`) is deprecated by SEP-2577 but still what servers send.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use codemode_bridge::ProgressSink;
use codemode_telemetry::ActivityEvent;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, Peer, RoleClient, RoleServer};
use tokio::sync::{broadcast, mpsc, oneshot};

/// How many upstream log messages wait for slow forwarders before the oldest are dropped.
const LOG_BACKLOG: usize = 256;

/// Upstream progress tokens of calls in flight, and the upstream log messages, shared by every connection.
pub struct Relay {
    /// (server, token) → where that call reports progress.
    progress: Mutex<HashMap<(String, ProgressToken), ProgressSink>>,
    logs: broadcast::Sender<LoggingMessageNotificationParam>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let calls = self.progress.lock().map_or(0, |p| p.len());
        f.debug_struct("Relay").field("calls_with_progress", &calls).finish()
    }
}

impl Default for Relay {
    fn default() -> Self {
        Relay { progress: Mutex::new(HashMap::new()), logs: broadcast::channel(LOG_BACKLOG).0 }
    }
}

impl Relay {
    /// Routes `server`'s progress for `token` to `sink` until the returned guard is dropped (the call answered or
    /// was abandoned).
    pub fn track(self: &Arc<Self>, server: &str, token: ProgressToken, sink: ProgressSink) -> Tracked {
        let key = (server.to_owned(), token);
        lock(&self.progress).insert(key.clone(), sink);
        Tracked { relay: self.clone(), key: Some(key) }
    }

    /// The upstream log messages from now on, each with its server's name as `logger`.
    pub fn logs(&self) -> broadcast::Receiver<LoggingMessageNotificationParam> {
        self.logs.subscribe()
    }

    fn progress(&self, server: &str, params: ProgressNotificationParam) {
        let sink = lock(&self.progress).get(&(server.to_owned(), params.progress_token.clone())).cloned();
        if let Some(sink) = sink {
            sink.report(params.progress, params.total, params.message);
        }
    }

    fn log(&self, server: &str, mut params: LoggingMessageNotificationParam) {
        // The upstream's own logger name, if any, stays visible after the server's.
        params.logger = Some(match params.logger.take() {
            Some(logger) if !logger.is_empty() => format!("{server}/{logger}"),
            _ => server.to_owned(),
        });
        params.meta = None;
        // No receiver (no client call in flight) drops the message.
        let _ = self.logs.send(params);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Stops routing one call's progress when dropped.
pub struct Tracked {
    relay: Arc<Relay>,
    key: Option<(String, ProgressToken)>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.relay.progress).remove(&key);
        }
    }
}

/// The client side of one upstream connection: the gateway's client info, and the server's notifications relayed.
#[derive(Clone)]
pub struct UpstreamClient {
    server: String,
    relay: Arc<Relay>,
}

impl UpstreamClient {
    /// The handler of a connection to `server`.
    pub fn new(server: &str, relay: Arc<Relay>) -> Self {
        UpstreamClient { server: server.to_owned(), relay }
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("codemode-gateway", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.relay.progress(&self.server, params);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relay.log(&self.server, params);
    }
}

/// A client request's progress: each activity event of its run becomes one `notifications/progress` on the
/// request's token, in order, with a value that increases by one per event (the total is unknown). Once the request
/// answers ([`finish`](Self::finish)), later events (a parked run's calls still reporting) are not sent: the token
/// belongs to the answered request.
pub struct ClientProgress {
    queue: mpsc::UnboundedSender<Queued>,
    sent: AtomicU64,
    token: ProgressToken,
    finished: AtomicBool,
}

enum Queued {
    Progress(ProgressNotificationParam),
    /// Answered once everything queued before it was sent.
    Flush(oneshot::Sender<()>),
}

impl ClientProgress {
    /// Progress on `token` to `peer`, sent in order by a task of its own.
    pub fn start(peer: Peer<RoleServer>, token: ProgressToken) -> Arc<ClientProgress> {
        let (queue, mut queued) = mpsc::unbounded_channel::<Queued>();
        tokio::spawn(async move {
            let mut connected = true;
            while let Some(item) = queued.recv().await {
                match item {
                    Queued::Progress(params) if connected => connected = peer.notify_progress(params).await.is_ok(),
                    Queued::Progress(_) => {}
                    Queued::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Arc::new(ClientProgress { queue, sent: AtomicU64::new(0), token, finished: AtomicBool::new(false) })
    }

    /// Sends the notification for one activity event, unless the request has answered.
    pub fn event(&self, event: &ActivityEvent) {
        if self.finished.load(Ordering::SeqCst) {
            return;
        }
        let message = match event {
            ActivityEvent::CallStarted(start) => format!("started {}", start.path),
            ActivityEvent::Progress(report) => {
                let of = report.total.map(|total| format!("/{total}")).unwrap_or_default();
                match &report.message {
                    Some(message) => format!("{}: {}{of} {message}", report.call_id, report.progress),
                    None => format!("{}: {}{of}", report.call_id, report.progress),
                }
            }
            ActivityEvent::CallFinished(record) => {
                let status = serde_json::to_value(record.status).ok();
                let status = status.as_ref().and_then(serde_json::Value::as_str).unwrap_or("done");
                format!("finished {} ({status}, {} ms)", record.start.path, record.duration_ms)
            }
        };
        let progress = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        let mut params = ProgressNotificationParam::new(self.token.clone(), progress as f64);
        params.message = Some(message);
        let _ = self.queue.send(Queued::Progress(params));
    }

    /// Sends what is queued, then stops: called before the request's answer goes out, so every notification
    /// precedes it.
    pub async fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
        let (done, flushed) = oneshot::channel();
        if self.queue.send(Queued::Flush(done)).is_ok() {
            let _ = flushed.await;
        }
    }
}

/// Sends `client` every upstream log message broadcast while it runs, as `notifications/message` at the upstream's
/// level (those below `min_level` left out), with the upstream server's name as the logger.
pub async fn forward_logs(
    client: Peer<RoleServer>,
    mut logs: broadcast::Receiver<LoggingMessageNotificationParam>,
    min_level: Option<LoggingLevel>,
) {
    loop {
        match logs.recv().await {
            Ok(params) => {
                if min_level.is_some_and(|min| severity(params.level) < severity(min)) {
                    continue;
                }
                if client.notify_logging_message(params).await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A logging level's rank, lowest (debug) first.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
