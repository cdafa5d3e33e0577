//! The approval console: the questions of parked runs that a person answers in a browser, the decisions taken, and
//! the runs this replica served.
//!
//! A run whose call needs approval parks with reason `approval` when its client cannot ask (`[policy] fallback =
//! "park"`) or when every question goes here (`[approvals] route = "console"`). [`Console::ask`] records each
//! question in the ledger, a reserved space of the run store, so every replica of a fleet lists it and a restart
//! keeps it; it signs a single-use link for it and posts a notice to the webhook. A decision (the console's buttons
//! or the link's) is recorded once per call, first writer wins, in the same ledger; the run's next `wait` reads it
//! ([`Console::answers`]) and resumes. `web` serves the pages.
//!
//! Invariant: a decision is taken only by a signed-in principal who may see the run, or through the link signed
//! for that very call (run, call id, tool, arguments digest) before it expires; it applies once.

pub mod web;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode::store::{Accepted, Clock, FleetBackend, StoreError};
use codemode::{ActivityEvent, CallEffect, CallRecord};
use codemode::{ApprovalDecision, CodeModeResult, PendingApproval};
use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::config::ConsoleConfig;

/// The ledger's space in the run store: a session name no run scope takes (scopes are `stdio-…`, `http-…`,
/// `token:…` or `jwt:…`).
const LEDGER: &str = "codemode/console";

/// The most questions and decisions the ledger keeps; the oldest decisions go first.
const MAX_LEDGER_KEYS: usize = 4_096;

/// What a link's seal is bound to besides its content, so a `requestState` never opens as a link nor the reverse.
const LINK_CONTEXT: &[u8] = b"codemode console link v1";

/// The runs a replica lists, the most recent first; older ones are forgotten.
const MAX_RUNS: usize = 200;

/// The nested calls kept per listed run.
const MAX_CALLS_PER_RUN: usize = 100;

/// How often a `wait` holding for a decision looks in the ledger for one another replica recorded.
const LEDGER_POLL: Duration = Duration::from_millis(500);

/// A question a person answers: one call of a parked run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    /// The parked run.
    pub run_id: String,
    /// The call, `bridge:<method>:<n>`.
    pub call_id: String,
    /// The run's owner key (`token:alice`, `jwt:…`, or a session), who may see and decide it.
    pub owner: Option<String>,
    /// The tool's own name.
    pub tool: String,
    /// The path the program called, e.g. `MCP.fs.write_file`.
    pub path: String,
    /// The arguments as the question shows them: redacted, compact JSON, capped.
    pub preview: String,
    /// The program's `exec` title (its own words).
    pub title: Option<String>,
    /// When the question was asked (epoch ms).
    pub asked_at_ms: u64,
    /// When its link stops working (epoch ms).
    pub expires_ms: u64,
}

impl Question {
    /// What binds a link to this call: the SHA-256 of the run, the call, the tool and the arguments shown.
    pub fn digest(&self) -> String {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        for part in [&self.run_id, &self.call_id, &self.path, &self.preview] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        hex::encode(hash.finalize())
    }
}

/// A person's answer to a question.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// This call runs.
    ApproveOnce,
    /// This call runs, and later calls of the same tool in the run run without asking.
    ApproveForRun,
    /// This call is refused; the program sees a catchable error.
    Deny,
}

impl Answer {
    /// The form value of each button.
    pub fn parse(value: &str) -> Option<Answer> {
        match value {
            "approve_once" => Some(Answer::ApproveOnce),
            "approve_for_run" => Some(Answer::ApproveForRun),
            "deny" => Some(Answer::Deny),
            _ => None,
        }
    }

    /// What the history shows.
    pub fn label(self) -> &'static str {
        match self {
            Answer::ApproveOnce => "approved once",
            Answer::ApproveForRun => "approved for the run",
            Answer::Deny => "denied",
        }
    }

    fn decision(self) -> ApprovalDecision {
        match self {
            Answer::ApproveOnce => ApprovalDecision::Approve,
            Answer::ApproveForRun => ApprovalDecision::ApproveForRun,
            Answer::Deny => ApprovalDecision::Deny,
        }
    }
}

/// A decision taken, as the history shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decided {
    /// The question answered.
    pub question: Question,
    /// The answer.
    pub answer: Answer,
    /// Who answered: a principal's name, or `link` for the single-use link.
    pub by: String,
    /// When (epoch ms).
    pub at_ms: u64,
}

/// What a single-use link is signed over.
#[derive(Debug, Serialize, Deserialize)]
struct Link {
    run: String,
    call: String,
    tool: String,
    digest: String,
}

/// Why a decision was not recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The link is not one this gateway signed, was altered, or expired.
    #[error("this link is not valid: it was not issued by this gateway, was altered, or expired")]
    BadLink,
    /// The question is gone: the run ended or its snapshot expired.
    #[error("there is no such question any more: the run ended or expired")]
    NoQuestion,
    /// The link was signed for another call than the question now holds.
    #[error("this link was issued for another call")]
    OtherCall,
    /// Someone answered first.
    #[error("this question was answered already ({0}); a link decides once")]
    Answered(String),
    /// The ledger could not be read or written.
    #[error("the run store is unavailable: {0}")]
    Store(String),
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Refused {
        Refused::Store(e.to_string())
    }
}

/// A run as this replica saw it: its owner, title, status and nested calls.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// Its owner key.
    pub owner: Option<String>,
    /// Its `exec` title.
    pub title: Option<String>,
    /// `running`, `completed`, `failed`, or `waiting (<reason>)`.
    pub status: String,
    /// When this replica last saw it change (epoch ms).
    pub updated_ms: u64,
    /// Its nested calls, oldest first (at most 100).
    pub calls: Vec<CallView>,
}

/// One nested call of a listed run.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallView {
    /// The path the program called.
    pub path: String,
    /// The cell that made it (1: the exec).
    pub cell: u32,
    /// How long it took (ms).
    pub duration_ms: u64,
    /// `ok` or the error code.
    pub outcome: String,
    /// `completed`, `failed`, `uncertain` or `not_started`.
    pub effect: &'static str,
    /// Whether a resume by replay delivered it again.
    pub replayed: bool,
}

impl CallView {
    fn of(record: &CallRecord) -> CallView {
        CallView {
            path: record.start.path.clone(),
            cell: record.start.cell,
            duration_ms: record.duration_ms,
            outcome: record.error_code.clone().unwrap_or_else(|| "ok".into()),
            effect: match record.effect {
                CallEffect::Completed => "completed",
                CallEffect::Failed => "failed",
                CallEffect::Uncertain => "uncertain",
                CallEffect::NotStarted => "not_started",
            },
            replayed: record.start.replayed,
        }
    }
}

/// The console's state: the ledger, the link seal, the webhook, and the runs this replica served.
pub struct Console {
    config: ConsoleConfig,
    ledger: Arc<dyn FleetBackend>,
    links: RequestStateCodec,
    webhook: Option<String>,
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    /// How long a question's link works: as long as a parked run stays resumable.
    ttl_ms: u64,
    changed: broadcast::Sender<()>,
    runs: Mutex<VecDeque<RunView>>,
    /// The base of links: `public_url`, else the address the console listens on, known once it is bound.
    base: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").field("listen", &self.config.listen).finish_non_exhaustive()
    }
}

impl Console {
    /// A console over `ledger`, signing links with `key` (the request-state key), posting notices to `webhook`.
    ///
    /// # Errors
    ///
    /// A key the codec refuses (shorter than 32 bytes).
    pub fn new(
        config: ConsoleConfig,
        ledger: Arc<dyn FleetBackend>,
        key: Vec<u8>,
        webhook: Option<String>,
        clock: Arc<dyn Clock>,
        ttl: Duration,
    ) -> Result<Console, String> {
        let links = RequestStateCodec::try_new(key).map_err(|e| e.to_string())?;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        Ok(Console {
            config,
            ledger,
            links,
            webhook,
            http: reqwest::Client::new(),
            clock,
            ttl_ms,
            changed: broadcast::channel(16).0,
            runs: Mutex::new(VecDeque::new()),
            base: std::sync::OnceLock::new(),
        })
    }

    /// The console's settings.
    pub fn config(&self) -> &ConsoleConfig {
        &self.config
    }

    /// Sets the base of links to the address the console listens on, unless `public_url` names one.
    pub fn listening_on(&self, addr: std::net::SocketAddr) {
        let base = self.config.public_url.clone().unwrap_or_else(|| format!("http://{addr}"));
        let _ = self.base.set(base);
    }

    /// The base of links.
    pub fn base_url(&self) -> String {
        match (self.base.get(), &self.config.public_url) {
            (Some(base), _) => base.clone(),
            (None, Some(url)) => url.clone(),
            (None, None) => format!("http://{}", self.config.listen),
        }
    }

    /// Whether `name` is one of `[console] operators`.
    pub fn is_operator(&self, name: &str) -> bool {
        self.config.operators.iter().any(|o| o == name)
    }

    /// Ticks whenever a question is asked or answered, or a listed run changes.
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.changed.subscribe()
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Records the questions of a run that parked on `pending` approvals (those not recorded before), posts a
    /// notice of each new one to the webhook, and returns the link of each, in the order of `pending`.
    pub async fn ask(
        &self,
        run_id: &str,
        owner: &Option<String>,
        title: &Option<String>,
        pending: &[PendingApproval],
    ) -> Vec<String> {
        let mut links = Vec::with_capacity(pending.len());
        let now = self.now_ms();
        for approval in pending {
            let key = question_key(run_id, &approval.call_id);
            let known = self.ledger.session_get(LEDGER, &key).await.ok().flatten();
            let question = match known.and_then(|v| serde_json::from_value::<Question>(v).ok()) {
                Some(question) => question,
                None => {
                    let question = Question {
                        run_id: run_id.to_owned(),
                        call_id: approval.call_id.clone(),
                        owner: owner.clone(),
                        tool: approval.tool.clone(),
                        path: approval.path.clone(),
                        preview: approval.preview.clone(),
                        title: title.clone(),
                        asked_at_ms: now,
                        expires_ms: now.saturating_add(self.ttl_ms),
                    };
                    let value = serde_json::to_value(&question).unwrap_or_default();
                    if self.put(&key, &value).await.is_ok() {
                        self.notify_webhook(&question);
                    }
                    question
                }
            };
            links.push(self.link(&question));
        }
        let _ = self.changed.send(());
        links
    }

    /// Writes one ledger entry, making room by forgetting the oldest decisions when the ledger is full.
    async fn put(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        match self.ledger.session_put(LEDGER, key, value, MAX_LEDGER_KEYS).await {
            Err(StoreError::TooManyKeys { .. }) => {
                let mut decided = self.history(None).await.unwrap_or_default();
                decided.sort_by_key(|d| d.at_ms);
                for old in decided.iter().take(MAX_LEDGER_KEYS / 8) {
                    let _ = self
                        .ledger
                        .session_remove(LEDGER, &decision_key(&old.question.run_id, &old.question.call_id))
                        .await;
                }
                self.ledger.session_put(LEDGER, key, value, MAX_LEDGER_KEYS).await
            }
            other => other,
        }
    }

    /// The single-use link of `question`.
    pub fn link(&self, question: &Question) -> String {
        let link = Link {
            run: question.run_id.clone(),
            call: question.call_id.clone(),
            tool: question.path.clone(),
            digest: question.digest(),
        };
        let ttl = Duration::from_millis(question.expires_ms.saturating_sub(self.now_ms()));
        let options = SealOptions::new().associated_data(LINK_CONTEXT).ttl(ttl);
        let token = self.links.seal_json_with(&link, &options).unwrap_or_default();
        format!("{}/approve/{token}", self.base_url())
    }

    /// The question a link was signed for, if its seal holds, it has not expired, and the question still holds
    /// that very call.
    ///
    /// # Errors
    ///
    /// [`Refused::BadLink`], [`Refused::NoQuestion`], [`Refused::OtherCall`] or [`Refused::Store`].
    pub async fn open_link(&self, token: &str) -> Result<Question, Refused> {
        let link: Link = self.links.open_json_with(token, LINK_CONTEXT).map_err(|_| Refused::BadLink)?;
        let question = match self.question(&link.run, &link.call).await? {
            Some(question) => question,
            // Answered already: the decision keeps the question.
            None => match self.decision(&link.run, &link.call).await? {
                Some(decided) => decided.question,
                None => return Err(Refused::NoQuestion),
            },
        };
        if question.path != link.tool || question.digest() != link.digest {
            return Err(Refused::OtherCall);
        }
        if question.expires_ms <= self.now_ms() {
            return Err(Refused::BadLink);
        }
        Ok(question)
    }

    /// An open question of run `run_id`.
    async fn question(&self, run_id: &str, call_id: &str) -> Result<Option<Question>, Refused> {
        let value = self.ledger.session_get(LEDGER, &question_key(run_id, call_id)).await?;
        Ok(value.and_then(|v| serde_json::from_value(v).ok()))
    }

    /// The decision on a call, if one was taken.
    pub async fn decision(&self, run_id: &str, call_id: &str) -> Result<Option<Decided>, Refused> {
        let value = self.ledger.session_get(LEDGER, &decision_key(run_id, call_id)).await?;
        Ok(value.and_then(|v| serde_json::from_value(v).ok()))
    }

    /// Records `answer` to `question` by `by`, unless someone answered first (on any replica).
    ///
    /// # Errors
    ///
    /// [`Refused::Answered`] with the earlier answer, or [`Refused::Store`].
    pub async fn decide(&self, question: Question, answer: Answer, by: &str) -> Result<Decided, Refused> {
        if let Some(earlier) = self.decision(&question.run_id, &question.call_id).await? {
            return Err(Refused::Answered(format!("{} by {}", earlier.answer.label(), earlier.by)));
        }
        // The fleet's accept-once record makes the first decision the only one, across replicas.
        let once = format!("{}/{}", question.run_id, question.call_id);
        let expires = question.expires_ms.max(self.now_ms().saturating_add(self.ttl_ms));
        match self.ledger.idempotency_accept(LEDGER, &once, by, expires).await? {
            Accepted::New => {}
            Accepted::Existing { run_id: first, .. } => {
                return Err(Refused::Answered(format!("by {first}")));
            }
        }
        let decided = Decided { question, answer, by: by.to_owned(), at_ms: self.now_ms() };
        let value = serde_json::to_value(&decided).unwrap_or_default();
        self.put(&decision_key(&decided.question.run_id, &decided.question.call_id), &value).await?;
        let _ = self
            .ledger
            .session_remove(LEDGER, &question_key(&decided.question.run_id, &decided.question.call_id))
            .await;
        let _ = self.changed.send(());
        Ok(decided)
    }

    /// The answers recorded for the questions of run `run_id` owned by `owner`, for the `wait` that resumes it.
    /// When the run has open questions and none is answered yet, waits up to `hold` for a first answer.
    pub async fn answers(
        &self,
        run_id: &str,
        owner: &Option<String>,
        hold: Duration,
    ) -> Vec<(String, ApprovalDecision)> {
        let mut changed = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + hold;
        loop {
            let (open, decided) = self.of_run(run_id, owner).await;
            if !decided.is_empty() || open == 0 {
                return decided.into_iter().map(|d| (d.question.call_id, d.answer.decision())).collect();
            }
            // A decision on this replica wakes the wait at once; one on another replica is seen at the next look.
            let next = (tokio::time::Instant::now() + LEDGER_POLL).min(deadline);
            tokio::select! {
                _ = changed.recv() => {}
                () = tokio::time::sleep_until(next) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                let (_, decided) = self.of_run(run_id, owner).await;
                return decided.into_iter().map(|d| (d.question.call_id, d.answer.decision())).collect();
            }
        }
    }

    /// How many questions of run `run_id` owned by `owner` are open, and the decisions on its others.
    async fn of_run(&self, run_id: &str, owner: &Option<String>) -> (usize, Vec<Decided>) {
        let keys = self.ledger.session_keys(LEDGER).await.unwrap_or_default();
        let (open_prefix, decided_prefix) = (format!("q/{run_id}/"), format!("d/{run_id}/"));
        let mut open = 0;
        let mut decided = Vec::new();
        for key in keys.iter().filter(|k| k.starts_with(&open_prefix) || k.starts_with(&decided_prefix)) {
            let Ok(Some(value)) = self.ledger.session_get(LEDGER, key).await else { continue };
            if key.starts_with(&open_prefix) {
                open += serde_json::from_value::<Question>(value).is_ok_and(|q| q.owner == *owner) as usize;
            } else if let Ok(d) = serde_json::from_value::<Decided>(value)
                && d.question.owner == *owner
            {
                decided.push(d);
            }
        }
        (open, decided)
    }

    /// The open questions `viewer` may see (all for `None`, an operator's view), oldest first.
    ///
    /// # Errors
    ///
    /// The ledger could not be read.
    pub async fn pending(&self, viewer: Option<&str>) -> Result<Vec<Question>, Refused> {
        let mut out: Vec<Question> = self.entries("q/").await?;
        out.retain(|q| viewer.is_none() || q.owner.as_deref() == viewer);
        out.retain(|q| q.expires_ms > self.now_ms());
        out.sort_by_key(|q| q.asked_at_ms);
        Ok(out)
    }

    /// The decisions `viewer` may see (all for `None`), the latest first.
    ///
    /// # Errors
    ///
    /// The ledger could not be read.
    pub async fn history(&self, viewer: Option<&str>) -> Result<Vec<Decided>, Refused> {
        let mut out: Vec<Decided> = self.entries("d/").await?;
        out.retain(|d| viewer.is_none() || d.question.owner.as_deref() == viewer);
        out.sort_by_key(|d| std::cmp::Reverse(d.at_ms));
        Ok(out)
    }

    async fn entries<T: serde::de::DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>, Refused> {
        let keys = self.ledger.session_keys(LEDGER).await?;
        let mut out = Vec::new();
        for key in keys.iter().filter(|k| k.starts_with(prefix)) {
            if let Some(value) = self.ledger.session_get(LEDGER, key).await?
                && let Ok(entry) = serde_json::from_value(value)
            {
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// Forgets the open questions of a run that ended, so they no longer show as pending.
    pub async fn forget_questions(&self, run_id: &str) {
        let keys = self.ledger.session_keys(LEDGER).await.unwrap_or_default();
        let prefix = format!("q/{run_id}/");
        for key in keys.iter().filter(|k| k.starts_with(&prefix)) {
            let _ = self.ledger.session_remove(LEDGER, key).await;
        }
    }

    /// Posts the notice of a new question to the webhook, in the background: JSON with the link (`url`), `tool`,
    /// `runId`, `title`, and `text`, a one-line summary (what a Slack incoming webhook shows).
    fn notify_webhook(&self, question: &Question) {
        let Some(webhook) = self.webhook.clone() else { return };
        let url = self.link(question);
        let text = format!(
            "{} wants to run{}: approve or deny at {url}",
            question.path,
            question.title.as_deref().map(|t| format!(" (program titled {t:?})")).unwrap_or_default(),
        );
        let notice = serde_json::json!({
            "url": url,
            "tool": question.path,
            "runId": question.run_id,
            "title": question.title,
            "text": text,
        });
        let http = self.http.clone();
        tokio::spawn(async move {
            // A webhook that is down loses the notice, not the question: the console still lists it.
            let _ = http.post(webhook).json(&notice).timeout(Duration::from_secs(10)).send().await;
        });
    }

    /// Records activity `event` of a run owned by `owner` and titled `title`.
    pub fn saw(&self, owner: &Option<String>, title: &Option<String>, event: &ActivityEvent) {
        let now = self.now_ms();
        let (run_id, call) = match event {
            ActivityEvent::CellStarted(cell) => (&cell.run_id, None),
            ActivityEvent::CallFinished(record) => (&record.start.run_id, Some(CallView::of(record))),
            _ => return,
        };
        // A new run tells open pages; its calls show at the next change.
        let notify = call.is_none();
        self.update(run_id, owner, title, now, notify, |run| {
            run.status = "running".into();
            if let Some(call) = call
                && run.calls.len() < MAX_CALLS_PER_RUN
            {
                run.calls.push(call);
            }
        });
    }

    /// Records how an `exec` or `wait` of run `run_id` ended.
    pub fn ended(&self, run_id: &str, owner: &Option<String>, title: &Option<String>, result: &CodeModeResult) {
        let status = match result {
            CodeModeResult::Waiting(w) => {
                let reason = serde_json::to_value(w.reason).ok().and_then(|v| v.as_str().map(str::to_owned));
                format!("waiting ({})", reason.unwrap_or_default())
            }
            CodeModeResult::Completed(_) => "completed".into(),
            CodeModeResult::Failed(_) => "failed".into(),
        };
        self.update(run_id, owner, title, self.now_ms(), true, |run| run.status = status);
    }

    fn update(
        &self,
        run_id: &str,
        owner: &Option<String>,
        title: &Option<String>,
        now: u64,
        notify: bool,
        f: impl FnOnce(&mut RunView),
    ) {
        {
            let mut runs = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let index = runs.iter().position(|r| r.run_id == run_id);
            let mut run = match index.and_then(|i| runs.remove(i)) {
                Some(run) => run,
                None => RunView {
                    run_id: run_id.to_owned(),
                    owner: owner.clone(),
                    title: title.clone(),
                    status: "running".into(),
                    updated_ms: now,
                    calls: Vec::new(),
                },
            };
            if run.title.is_none() {
                run.title = title.clone();
            }
            f(&mut run);
            run.updated_ms = now;
            runs.push_front(run);
            runs.truncate(MAX_RUNS);
        }
        if notify {
            let _ = self.changed.send(());
        }
    }

    /// The runs `viewer` may see (all for `None`), the most recently changed first.
    pub fn runs(&self, viewer: Option<&str>) -> Vec<RunView> {
        let runs = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        runs.iter().filter(|r| viewer.is_none() || r.owner.as_deref() == viewer).cloned().collect()
    }

    /// Counts of the runs `viewer` may see, by status (for the runs page's summary).
    pub fn run_counts(&self, viewer: Option<&str>) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for run in self.runs(viewer) {
            let status = run.status.split(' ').next().unwrap_or_default().to_owned();
            *counts.entry(status).or_default() += 1;
        }
        counts
    }
}

fn question_key(run_id: &str, call_id: &str) -> String {
    format!("q/{run_id}/{call_id}")
}

fn decision_key(run_id: &str, call_id: &str) -> String {
    format!("d/{run_id}/{call_id}")
}
