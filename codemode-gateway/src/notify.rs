//! What the gateway sends its own client besides answers: progress and logging. [`ClientProgress`] turns a
//! request's activity events (each nested call started and finished, and the upstream servers' own progress that
//! `relay::UpstreamHandler` routes to the nested call) into `notifications/progress` on the client's progress token,
//! and [`forward_logs`] sends the upstream log messages (broadcast by the relay) to the client while its `exec` or
//! `wait` runs.
//!
//! Invariant: a client's progress values only increase, and none is sent after the request's answer.

#![allow(deprecated)] // MCP logging (`notifications/message`) is deprecated by SEP-2577 but still what servers send.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use codemode_telemetry::ActivityEvent;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::{broadcast, mpsc, oneshot};

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
            // The client made the request that began the cell: it needs no notice of it.
            ActivityEvent::CellStarted(_) => return,
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
