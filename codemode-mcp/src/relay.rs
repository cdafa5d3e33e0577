//! What upstream servers ask of and tell the gateway as their MCP client, through one handler per connection
//! ([`UpstreamHandler`]): `elicitation/create` relayed to the person behind the gateway's own client,
//! `sampling/createMessage` refused (or relayed, with `sampling = "client"`), `notifications/tools/list_changed`
//! reported so the catalog is rebuilt for the next cell, `notifications/progress` handed to the nested call that sent
//! the progress token (the `ProgressSink` of its `CallContext`, so the run's activity hook sees it), and
//! `notifications/message` broadcast with the server's name as the logger (`notify::forward_logs` sends it on).
//!
//! An upstream request carries nothing that names the nested call it belongs to, so the relay routes it by what is
//! in flight on that server: the nested calls running there and the run owner (client session or principal) of
//! each. When they all belong to one owner, that owner's client is asked, through the `exec`/`wait` request in
//! progress, and every one of those calls' runs has its deadline paused while the person answers. Otherwise (no
//! call in flight, calls of several owners, an owner whose client declared no elicitation or asked over the
//! sessionless revision) the relay declines: a question never reaches a person who did not start the call.
//! Invariant: the answer the upstream server gets is the client's own reply, unchanged, or a decline. A progress
//! report reaches only the call whose token it names (tokens are per upstream connection, so the key is the server
//! and the token).

// Sampling and logging are deprecated by SEP-2577 (the sessionless revision), and servers on earlier revisions still
// send them.
#![allow(deprecated)]

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use codemode_bridge::{AbortSignal, PauseSink, ProgressSink};
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, ErrorCode, ErrorData, FormElicitationCapability,
    Implementation, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    SamplingCapability, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use tokio::sync::{broadcast, mpsc};

/// How many upstream log messages wait for slow forwarders before the oldest are dropped.
const LOG_BACKLOG: usize = 256;

/// What the gateway does with an upstream server's `sampling/createMessage` (`sampling` in the config).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sampling {
    /// Refuse it with an error that names the config key (the default): a server must not spend the user's model
    /// budget without the operator saying so.
    #[default]
    Refuse,
    /// Pass it to the gateway's client when that client declared sampling, as an elicitation is passed.
    Client,
}

impl Sampling {
    /// Reads the config value: `refuse` or `client`.
    pub fn parse(name: &str) -> Option<Sampling> {
        match name {
            "refuse" => Some(Sampling::Refuse),
            "client" => Some(Sampling::Client),
            _ => None,
        }
    }
}

/// One client request that can reach its person: the peer of an `exec`/`wait` on a session that negotiated a
/// revision with `initialize` (the sessionless revision lets a server send no requests), and what it declared.
#[derive(Clone, Debug)]
pub struct Asker {
    peer: Peer<RoleServer>,
    form: bool,
    url: bool,
    sampling: bool,
}

impl Asker {
    /// The asker of one request, if its client can be asked anything.
    pub fn of(context: &RequestContext<RoleServer>) -> Option<Asker> {
        if context.protocol_version().is_some_and(|v| !v.has_initialize()) {
            return None;
        }
        let caps = context.client_capabilities()?;
        let (form, url) = match &caps.elicitation {
            // An empty elicitation capability means form mode.
            Some(e) => (e.form.is_some() || e.url.is_none(), e.url.is_some()),
            None => (false, false),
        };
        let sampling = caps.sampling.is_some();
        (form || url || sampling).then(|| Asker { peer: context.peer.clone(), form, url, sampling })
    }
}

/// One registered asker, with its registration's token.
type Registered = (u64, Asker);

/// A nested call running on an upstream server.
struct InFlight {
    token: u64,
    owner: Option<String>,
    pause: PauseSink,
    abort: AbortSignal,
}

/// The routing state every upstream connection's handler shares.
pub struct Relay {
    next: AtomicU64,
    /// The requests in progress that can reach a person, by run owner, latest last.
    askers: Mutex<HashMap<Option<String>, Vec<Registered>>>,
    /// The nested calls in flight, by upstream server.
    calls: Mutex<HashMap<String, Vec<InFlight>>>,
    sampling: Sampling,
    /// Where a server's `tools/list_changed` (or a restart with other tools) is reported, by server name.
    changes: mpsc::UnboundedSender<String>,
    /// (server, token) → where that nested call reports progress.
    progress: Mutex<HashMap<(String, ProgressToken), ProgressSink>>,
    /// The servers' log messages, each with its server's name as `logger`.
    logs: broadcast::Sender<LoggingMessageNotificationParam>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("sampling", &self.sampling).finish_non_exhaustive()
    }
}

impl Relay {
    /// A relay with the configured sampling mode, and the receiver of the servers whose tools changed.
    pub fn new(sampling: Sampling) -> (Arc<Relay>, mpsc::UnboundedReceiver<String>) {
        let (changes, changed) = mpsc::unbounded_channel();
        let relay = Relay {
            next: AtomicU64::new(1),
            askers: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
            sampling,
            changes,
            progress: Mutex::new(HashMap::new()),
            logs: broadcast::channel(LOG_BACKLOG).0,
        };
        (Arc::new(relay), changed)
    }

    /// Makes `asker` the way to reach `owner`'s person until the guard is dropped (the `exec`/`wait` answered).
    pub fn register_asker(self: &Arc<Self>, owner: Option<String>, asker: Asker) -> AskerGuard {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.askers).entry(owner.clone()).or_default().push((token, asker));
        AskerGuard { relay: self.clone(), owner, token }
    }

    /// Records a nested call of `owner` running on `server` until the guard is dropped.
    pub fn register_call(
        self: &Arc<Self>,
        server: &str,
        owner: Option<String>,
        pause: PauseSink,
        abort: AbortSignal,
    ) -> CallGuard {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.calls).entry(server.to_owned()).or_default().push(InFlight { token, owner, pause, abort });
        CallGuard { relay: self.clone(), server: server.to_owned(), token }
    }

    /// Reports that `server`'s tools changed.
    pub fn tools_changed(&self, server: &str) {
        let _ = self.changes.send(server.to_owned());
    }

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

    /// The person the calls in flight on `server` belong to: their asker, their pause sinks and one abort signal.
    /// `None` when no call is in flight, when they belong to several owners, or when the owner cannot be asked.
    fn route(&self, server: &str) -> Result<(Asker, Vec<PauseSink>, AbortSignal), String> {
        let (owner, pauses, abort) = {
            let calls = lock(&self.calls);
            let running = calls.get(server).map(Vec::as_slice).unwrap_or_default();
            let owners: BTreeSet<&Option<String>> = running.iter().map(|c| &c.owner).collect();
            let (Some(first), 1) = (running.first(), owners.len()) else {
                return Err(if running.is_empty() {
                    "no call of the gateway's is running on it".to_owned()
                } else {
                    "calls of several clients are running on it, and the request does not say whose it is".to_owned()
                });
            };
            (first.owner.clone(), running.iter().map(|c| c.pause.clone()).collect(), first.abort.clone())
        };
        let asker = lock(&self.askers).get(&owner).and_then(|list| list.last()).map(|(_, a)| a.clone());
        match asker {
            Some(asker) => Ok((asker, pauses, abort)),
            None => Err("the client that started the call cannot be asked now (no exec or wait of it is in \
                         progress, it declared no elicitation, or it uses the sessionless revision)"
                .to_owned()),
        }
    }

    /// Relays one `elicitation/create` of `server` to the person behind the calls in flight there; declines when
    /// there is no such person or their client lacks the mode asked for. While the person answers, the deadlines
    /// of those calls' runs stand still.
    pub async fn elicit(&self, server: &str, params: ElicitRequestParams) -> ElicitResult {
        let (asker, pauses, abort) = match self.route(server) {
            Ok(found) => found,
            Err(why) => {
                eprintln!("codemode gateway: declined an elicitation of MCP server \"{server}\": {why}");
                return ElicitResult::new(ElicitationAction::Decline);
            }
        };
        let url = matches!(params, ElicitRequestParams::UrlElicitationParams { .. });
        if (url && !asker.url) || (!url && !asker.form) {
            let mode = if url { "URL" } else { "form" };
            eprintln!(
                "codemode gateway: declined a {mode} elicitation of MCP server \"{server}\": the client did not \
                 declare {mode} elicitation"
            );
            return ElicitResult::new(ElicitationAction::Decline);
        }
        let _paused: Vec<_> = pauses.iter().map(PauseSink::hold).collect();
        tokio::select! {
            answer = asker.peer.create_elicitation(params) => match answer {
                Ok(result) => result,
                // A client that fails the request gave no answer: the server sees the dialog dismissed.
                Err(e) => {
                    eprintln!("codemode gateway: the client failed an elicitation of MCP server \"{server}\": {e}");
                    ElicitResult::new(ElicitationAction::Cancel)
                }
            },
            () = abort.aborted() => ElicitResult::new(ElicitationAction::Cancel),
        }
    }

    /// Refuses one `sampling/createMessage` of `server`, or relays it to the client with `sampling = "client"`.
    ///
    /// # Errors
    ///
    /// The refusal (naming the config key), a client that declared no sampling, or the client's own error.
    pub async fn sample(
        &self,
        server: &str,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ErrorData> {
        if self.sampling == Sampling::Refuse {
            return Err(ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "the codemode gateway does not pass sampling/createMessage from MCP server \"{server}\" to its \
                     client; its operator can allow it with `sampling = \"client\"` in the gateway config"
                ),
                None,
            ));
        }
        let (asker, _, abort) = self.route(server).map_err(|why| {
            ErrorData::new(ErrorCode::INVALID_REQUEST, format!("sampling/createMessage cannot be relayed: {why}"), None)
        })?;
        if !asker.sampling {
            return Err(ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "sampling/createMessage cannot be relayed: the gateway's client did not declare sampling",
                None,
            ));
        }
        let asked = asker.peer.create_message(params);
        tokio::select! {
            answer = asked => answer.map_err(|e| match e {
                rmcp::ServiceError::McpError(e) => e,
                other => ErrorData::internal_error(format!("the gateway's client failed sampling: {other}"), None),
            }),
            () = abort.aborted() => Err(ErrorData::internal_error("the call that asked was cancelled", None)),
        }
    }
}

/// Removes an asker when dropped.
pub struct AskerGuard {
    relay: Arc<Relay>,
    owner: Option<String>,
    token: u64,
}

impl Drop for AskerGuard {
    fn drop(&mut self) {
        let mut askers = lock(&self.relay.askers);
        if let Some(list) = askers.get_mut(&self.owner) {
            list.retain(|(t, _)| *t != self.token);
            if list.is_empty() {
                askers.remove(&self.owner);
            }
        }
    }
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

/// Removes a call in flight when dropped.
pub struct CallGuard {
    relay: Arc<Relay>,
    server: String,
    token: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut calls = lock(&self.relay.calls);
        if let Some(list) = calls.get_mut(&self.server) {
            list.retain(|c| c.token != self.token);
            if list.is_empty() {
                calls.remove(&self.server);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The gateway as the MCP client of one upstream server.
#[derive(Clone, Debug)]
pub struct UpstreamHandler {
    server: String,
    relay: Arc<Relay>,
}

impl UpstreamHandler {
    /// The handler of the connection to `server`.
    pub fn new(server: &str, relay: Arc<Relay>) -> Self {
        UpstreamHandler { server: server.to_owned(), relay }
    }
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        // Elicitation is declared always: servers offer some tools only to clients that do. Whether a person is
        // reachable is decided per request, and a request without one is declined.
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::new()),
        );
        if self.relay.sampling == Sampling::Client {
            caps.sampling = Some(SamplingCapability::default());
        }
        // The latest revision with `initialize`: on the sessionless revision a server may send its client no
        // requests (no elicitation) and list changes only on a stream the client subscribed.
        ClientConfig::new(caps, Implementation::new("codemode-gateway", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.relay.elicit(&self.server, request).await)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.relay.sample(&self.server, params).await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relay.tools_changed(&self.server);
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
