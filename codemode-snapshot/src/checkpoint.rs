//! The checkpoint of a suspended run: everything needed to rebuild it by replay in a fresh worker, in any process.
//!
//! It holds no engine state (source, journal, budgets, counters, scoping), so it is small and portable. The journal
//! is encoded compactly on the wire (digests as one hex string, rounds as arrays, clocks as deltas); in memory it is
//! the bridge's `Journal`. Backends store the deflated form ([`Checkpoint::to_stored`]), so a run parked after ten
//! calls, its activity record included, takes under a kilobyte.

use codemode_bridge::{
    BridgeErrorCode, BridgeMethod, BridgeRequest, CallCounts, Journal, OutputBudget, PendingApproval, RequestDigest,
    Round, Settlement, SettlementValue, WaitReason, WriteEffect,
};
use codemode_telemetry::ActivityLog;
use serde::{Deserialize, Serialize};

use crate::StoreError;

/// Version of the checkpoint encoding; a checkpoint of another version is refused as corrupt.
pub const CHECKPOINT_VERSION: u32 = 1;

/// What starts a deflated stored checkpoint ([`Checkpoint::to_stored`]); JSON text never starts with a NUL byte.
const DEFLATED: &[u8] = b"\0cmz";

/// Most bytes a stored checkpoint may inflate to: above the largest `maxSnapshotBytes` (256 MiB) plus an activity
/// log, so that a crafted stored document cannot make the host allocate without bound.
const MAX_INFLATED: usize = 512 * 1024 * 1024;

/// The error code a guest sees for a request interrupted by a restart.
pub const INTERRUPTED_CODE: BridgeErrorCode = BridgeErrorCode::Interrupted;

/// The message a guest sees for a request interrupted by a restart.
pub const INTERRUPTED_MESSAGE: &str =
    "tool call interrupted by restart; it may or may not have run. Check its effect before retrying.";

/// A fresh run id, `cm_<uuid>`.
pub fn new_run_id() -> String {
    let mut buffer = uuid::Uuid::encode_buffer();
    let uuid = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buffer);
    let mut id = String::with_capacity(3 + uuid.len());
    id.push_str("cm_");
    id.push_str(uuid);
    id
}

/// Whether `run_id` has the form `cm_<lowercase hyphenated uuid>`.
///
/// Run ids come from the model and become file names in the durable backend, so anything else is refused before
/// it gets near a path.
pub fn is_valid_run_id(run_id: &str) -> bool {
    let Some(rest) = run_id.strip_prefix("cm_") else { return false };
    rest.len() == 36
        && rest.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => matches!(c, '0'..='9' | 'a'..='f'),
        })
}

/// Who may resume a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOwner {
    /// The session (or session key) the run belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The agent that created the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The agent run (turn) that created the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_run_id: Option<String>,
}

impl RunOwner {
    /// The string a fleet backend indexes the run under (who may see it): the session, or empty for none.
    pub fn scope_key(&self) -> String {
        self.session_id.clone().unwrap_or_default()
    }

    /// Checks that `caller` may resume a run owned by `self`: every field must match exactly.
    ///
    /// # Errors
    ///
    /// `DifferentAgentRun` when the agent run differs, else `DifferentSession` when the session or agent differs.
    pub fn check(&self, caller: &RunOwner) -> Result<(), StoreError> {
        if self.agent_run_id != caller.agent_run_id {
            return Err(StoreError::DifferentAgentRun);
        }
        if self.session_id != caller.session_id || self.agent_id != caller.agent_id {
            return Err(StoreError::DifferentSession);
        }
        Ok(())
    }
}

/// A bridge request that was in flight when the run parked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRequest {
    /// The request's creation-order id.
    pub id: u32,
    /// The bridge method's wire spelling, e.g. `callValue`.
    pub method: String,
    /// The request digest (`RequestDigest.0`).
    pub args_digest: u64,
    /// For a timer (`sleep`): when it is due on the guest's virtual clock (epoch ms). A resume starts it again for
    /// the delay it has left instead of settling it as interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<u64>,
}

impl PendingRequest {
    /// The bridge method, when the spelling is one this build knows.
    pub fn bridge_method(&self) -> Option<BridgeMethod> {
        serde_json::from_value(serde_json::Value::String(self.method.clone())).ok()
    }
}

/// Counters carried across the exec and waits of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunCounters {
    /// `catalog.search` calls.
    #[serde(default)]
    pub search_count: u32,
    /// `describe()` calls.
    #[serde(default)]
    pub describe_count: u32,
    /// Tool calls.
    #[serde(default)]
    pub call_count: u32,
}

// Defaults are left out of the encoding: a checkpoint is mostly journal, and its size is a headline figure.
fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl RunCounters {
    fn is_zero(&self) -> bool {
        *self == RunCounters::default()
    }
}

/// Everything needed to resume a suspended run by replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Encoding version, [`CHECKPOINT_VERSION`].
    #[serde(rename = "v")]
    pub version: u32,
    /// `cm_<uuid>`.
    pub run_id: String,
    /// Who may resume it.
    #[serde(default)]
    pub owner: RunOwner,
    /// The prepared JavaScript the worker runs (after the TypeScript transform and wrapping).
    pub source: String,
    /// Digest of the tool catalog the run was started with; the facade refuses to replay against another.
    pub tools_digest: String,
    /// Whether the cell runs with `restartSafe`: it may call only replay-safe tools, and neither `store`/`load` nor
    /// MCP namespace operations.
    #[serde(default, skip_serializing_if = "is_false")]
    pub restart_safe: bool,
    /// The replayable history.
    #[serde(with = "wire")]
    pub journal: Journal,
    /// Output items the worker emitted before the run parked; all were delivered with this wait's result or an
    /// earlier one, and the worker that resumes the run skips them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delivered_output: usize,
    /// What is left of the run's output budget after this park's output was admitted.
    pub output_budget: OutputBudget,
    /// Why the run parked.
    pub reason: WaitReason,
    /// Requests dispatched and not yet delivered to the guest when the run parked: still running, or settled and
    /// waiting for the next delivery; a pending `yield` is among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingRequest>,
    /// The cumulative search, describe and call counts of the run's catalog scope when it parked.
    #[serde(default, skip_serializing_if = "RunCounters::is_zero")]
    pub counters: RunCounters,
    /// The `counterScope` those counts belong to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub counter_scope: String,
    /// When the run first parked (epoch ms); set by the store when zero.
    #[serde(default)]
    pub created_at_ms: u64,
    /// When it expires (epoch ms); set by the store on every park.
    #[serde(default)]
    pub expires_at_ms: u64,
    /// Incremented by the store on every park, so a stale in-memory copy is told apart from a newer durable one.
    #[serde(default)]
    pub generation: u32,
    /// The `yield_control` request the run parked on, answered by the wait that resumes it.
    #[serde(rename = "yield", default, skip_serializing_if = "Option::is_none")]
    pub yield_request: Option<YieldRequest>,
    /// Whether content from an MCP server reached the program; its results then carry a warning.
    #[serde(default, skip_serializing_if = "is_false")]
    pub untrusted: bool,
    /// Tools a person approved for the rest of the run (`ApproveForRun`): their calls are not asked about again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_for_run: Vec<String>,
    /// Calls whose approval was asked and not answered when the run parked: they never reached their tool, so a
    /// resume asks again (or applies the answer its `wait` carries) instead of settling them as interrupted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked: Vec<AskedCall>,
    /// The host's record of the run's write-class calls, by request id: what its results' effect facts sum up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<EffectEntry>,
    /// The run's settled nested tool calls (reads and writes) by effect status.
    #[serde(default, skip_serializing_if = "CallCounts::is_empty")]
    pub call_counts: CallCounts,
    /// The idempotency key of the `exec` that started the run (`_meta["codemode/idempotencyKey"]`): the run's final
    /// result is recorded under it, by whichever process finishes the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The run's activity: its finished nested calls (redacted, bounded), the calls open when it parked and its
    /// cell. Checkpoints written before activity was recorded have none. It has caps of its own
    /// (`ActivityLimits`) and is not counted against `maxSnapshotBytes`.
    #[serde(default, skip_serializing_if = "ActivityLog::is_empty")]
    pub activity: ActivityLog,
    /// The tool (and MCP server) of each nested tool call, by request id: a resume by replay names the calls it
    /// delivers from the journal with them (its `execute_tool` spans), since replay never runs them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_names: Vec<CallName>,
    /// The contract digest (`CatalogEntry::contract_digest`) of every catalog tool the run called, by callable
    /// name: under a rebuilt catalog (tools added, removed or changed upstream) the run resumes only while each of
    /// these tools still exists with the same digest.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tool_contracts: std::collections::BTreeMap<String, String>,
    /// The callable names the program was given when the run started: a resume by replay installs these, whatever
    /// the resuming host's catalog holds now, so a program never loses a name it could call before it parked (a call
    /// the host can no longer serve is refused as that call, catchably). `None` in checkpoints written before it was
    /// kept: those resume with the resuming host's names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projection>,
    /// Where checkpoints written before these fields were typed kept them, `{"yield": .., "untrusted": ..}`; read
    /// only, and moved into the fields by [`Checkpoint::decode`].
    #[serde(rename = "extra", default, skip_serializing)]
    legacy_extra: Option<LegacyExtra>,
}

/// The callable names of a run's program: its tool globals and its `MCP` namespace, as the catalog it started
/// under projected them. Names only: the tools behind them are the resuming host's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Projection {
    /// The callable names of the catalog tools, each an async global.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The MCP servers, each `MCP.<global>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<ProjectedServer>,
}

/// One MCP server of a [`Projection`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectedServer {
    /// Its name under `MCP`.
    pub global: String,
    /// The server's own name.
    pub server: String,
    /// Its tools: the member name under `MCP.<global>` and the tool's name on the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<(String, String)>,
}

/// The tool a nested call named, for the spans of a replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallName {
    /// The request id.
    pub id: u32,
    /// The request's bridge method (`callValue`, `namespace`).
    pub method: String,
    /// The tool's name (an MCP tool's name on its server, or the namespace operation).
    pub tool: String,
    /// The MCP server, for an MCP tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Whether the tool is write-class (its span then carries the effect status).
    #[serde(default, skip_serializing_if = "is_false")]
    pub write: bool,
}

/// A call waiting for a person's approval: the request itself (so it can be dispatched once approved) and what
/// the person is shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AskedCall {
    /// The request as the guest made it.
    pub request: BridgeRequest,
    /// The call id, tool, path and redacted preview.
    pub approval: PendingApproval,
    /// Whether the approver deferred it (the run parked with reason `approval`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub deferred: bool,
}

/// One write-class call in the host's record, with its request id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectEntry {
    /// The bridge request id.
    pub id: u32,
    /// What the host knows of its effect.
    #[serde(flatten)]
    pub effect: WriteEffect,
}

/// A `yield_control(reason)` request waiting for its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct YieldRequest {
    /// The bridge request id.
    pub id: u32,
    /// The reason the guest gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The `extra` object of older checkpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
struct LegacyExtra {
    #[serde(default, rename = "yield")]
    yield_request: Option<YieldRequest>,
    #[serde(default)]
    untrusted: bool,
}

impl Checkpoint {
    /// A checkpoint with empty counters, no pending requests, no yield and not untrusted; the store fills in the
    /// times.
    pub fn new(
        run_id: String,
        owner: RunOwner,
        source: String,
        tools_digest: String,
        journal: Journal,
        output_budget: OutputBudget,
        reason: WaitReason,
    ) -> Self {
        Checkpoint {
            version: CHECKPOINT_VERSION,
            run_id,
            owner,
            source,
            tools_digest,
            restart_safe: false,
            journal,
            delivered_output: 0,
            output_budget,
            reason,
            pending: Vec::new(),
            counters: RunCounters::default(),
            counter_scope: String::new(),
            created_at_ms: 0,
            expires_at_ms: 0,
            generation: 0,
            yield_request: None,
            untrusted: false,
            approved_for_run: Vec::new(),
            asked: Vec::new(),
            effects: Vec::new(),
            call_counts: CallCounts::default(),
            idempotency_key: None,
            activity: ActivityLog::default(),
            call_names: Vec::new(),
            tool_contracts: std::collections::BTreeMap::new(),
            projection: None,
            legacy_extra: None,
        }
    }

    /// The encoded form, compact JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a checkpoint has string keys only and always serializes")
    }

    /// The stored form every byte-storing backend writes (before sealing): [`Checkpoint::encode`]'s JSON, deflated
    /// behind a 4-byte marker when that is shorter. Its journal, effects and activity repeat the same keys and ids
    /// call after call, so a checkpoint of ten calls shrinks about five times.
    pub fn to_stored(&self) -> Vec<u8> {
        let encoded = self.encode();
        let deflated = miniz_oxide::deflate::compress_to_vec(&encoded, 6);
        if DEFLATED.len() + deflated.len() >= encoded.len() {
            return encoded;
        }
        let mut stored = Vec::with_capacity(DEFLATED.len() + deflated.len());
        stored.extend_from_slice(DEFLATED);
        stored.extend_from_slice(&deflated);
        stored
    }

    /// Decodes what [`Checkpoint::encode`] or [`Checkpoint::to_stored`] produced.
    ///
    /// # Errors
    ///
    /// A message naming what is wrong: a deflated form that does not inflate (or inflates past 512 MiB), bad JSON, a
    /// missing field or another encoding version.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let inflated;
        let json = match bytes.strip_prefix(DEFLATED) {
            Some(deflated) => {
                inflated = miniz_oxide::inflate::decompress_to_vec_with_limit(deflated, MAX_INFLATED)
                    .map_err(|e| format!("the deflated checkpoint does not inflate: {e}"))?;
                &inflated[..]
            }
            None => bytes,
        };
        let mut checkpoint: Checkpoint = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        if checkpoint.version != CHECKPOINT_VERSION {
            return Err(format!("checkpoint version {} (expected {CHECKPOINT_VERSION})", checkpoint.version));
        }
        if let Some(legacy) = checkpoint.legacy_extra.take() {
            checkpoint.yield_request = checkpoint.yield_request.or(legacy.yield_request);
            checkpoint.untrusted |= legacy.untrusted;
        }
        Ok(checkpoint)
    }

    /// Bytes of the encoded form, what `maxSnapshotBytes` bounds; counted without building the text.
    pub fn encoded_len(&self) -> usize {
        codemode_bridge::json_len(self)
    }

    /// The encoded length, if it fits `max_snapshot_bytes`. It is counted without building the text, and the
    /// count stops as soon as it passes the cap, so an oversized checkpoint costs no memory and little time. The
    /// activity log, bounded by its own caps, is not counted.
    ///
    /// # Errors
    ///
    /// `SnapshotTooLarge` (code `snapshot_limit_exceeded`) when it does not; its `size` is then the count at the
    /// point it stopped (just over the cap).
    pub fn check_size(&self, max_snapshot_bytes: u64) -> Result<usize, StoreError> {
        struct Capped {
            count: u64,
            max: u64,
        }
        impl std::io::Write for Capped {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.count += bytes.len() as u64;
                if self.count > self.max {
                    return Err(std::io::Error::other("over the cap"));
                }
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        // `,"activity":` and the log's JSON.
        let activity = if self.activity.is_empty() { 0 } else { 12 + codemode_bridge::json_len(&self.activity) as u64 };
        let mut capped = Capped { count: 0, max: max_snapshot_bytes.saturating_add(activity) };
        let fits = serde_json::to_writer(&mut capped, self).is_ok();
        let size = usize::try_from(capped.count.saturating_sub(activity)).unwrap_or(usize::MAX);
        if !fits {
            return Err(StoreError::SnapshotTooLarge { size, max: max_snapshot_bytes });
        }
        Ok(size)
    }

    /// Whether the run has expired at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_at_ms
    }
}

/// Settlements for the requests of `checkpoint` that were in flight in a process that died: each rejects with
/// code `interrupted` and [`INTERRUPTED_MESSAGE`], in creation order.
///
/// `yield` requests are left out: resuming the run is what settles them; so are timers with a due time, which the
/// resume starts again for the delay they have left (a timer runs no tool). The facade delivers the rest as the
/// first round of the resumed run instead of dispatching the requests again, so a tool is never silently
/// re-executed.
pub fn interrupted_settlements(checkpoint: &Checkpoint) -> Vec<Settlement> {
    let asked = |id: u32| checkpoint.asked.iter().any(|a| a.request.id == id);
    let mut pending: Vec<&PendingRequest> = checkpoint
        .pending
        .iter()
        .filter(|p| p.method != BridgeMethod::Yield.as_str() && p.due_ms.is_none() && !asked(p.id))
        .collect();
    pending.sort_by_key(|p| p.id);
    pending
        .into_iter()
        .map(|p| Settlement { id: p.id, value: SettlementValue::err(INTERRUPTED_CODE, INTERRUPTED_MESSAGE) })
        .collect()
}

/// The compact wire form of a journal.
///
/// `{"seed":S,"start":T,"req":"<16 hex digits per request digest>","rounds":[[dt,[[id,value]|[id,code,msg],..]],..]}`
/// where `dt` is the round's clock minus `start`.
mod wire {
    use super::*;
    use serde::{Deserializer, Serializer, de::Error as _};
    use serde_json::Value;

    #[derive(Serialize, Deserialize)]
    struct WireJournal {
        seed: u64,
        start: i64,
        req: String,
        rounds: Vec<(i64, Vec<WireSettlement>)>,
    }

    // Untagged: an error is the only three-element form, so it is tried first.
    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum WireSettlement {
        Err(u32, BridgeErrorCode, String),
        Ok(u32, Value),
    }

    pub(super) fn serialize<S: Serializer>(journal: &Journal, s: S) -> Result<S::Ok, S::Error> {
        let mut req = String::with_capacity(journal.requests.len() * 16);
        for digest in &journal.requests {
            req.push_str(&format!("{:016x}", digest.0));
        }
        let rounds = journal
            .rounds
            .iter()
            .map(|round| {
                let settlements = round
                    .settlements
                    .iter()
                    .map(|s| match &s.value {
                        SettlementValue::Ok { value } => WireSettlement::Ok(s.id, value.clone()),
                        SettlementValue::Err { code, message } => {
                            WireSettlement::Err(s.id, code.clone(), message.clone())
                        }
                    })
                    .collect();
                (round.clock_ms.wrapping_sub(journal.start_clock_ms), settlements)
            })
            .collect();
        WireJournal { seed: journal.seed, start: journal.start_clock_ms, req, rounds }.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Journal, D::Error> {
        let wire = WireJournal::deserialize(d)?;
        if wire.req.len() % 16 != 0 || !wire.req.is_ascii() {
            return Err(D::Error::custom("journal request digests are not 16-digit hex"));
        }
        let requests = (0..wire.req.len() / 16)
            .map(|i| {
                u64::from_str_radix(&wire.req[i * 16..(i + 1) * 16], 16)
                    .map(RequestDigest)
                    .map_err(|_| D::Error::custom("journal request digests are not 16-digit hex"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rounds = wire
            .rounds
            .into_iter()
            .map(|(dt, settlements)| Round {
                clock_ms: wire.start.wrapping_add(dt),
                settlements: settlements
                    .into_iter()
                    .map(|s| match s {
                        WireSettlement::Ok(id, value) => Settlement { id, value: SettlementValue::Ok { value } },
                        WireSettlement::Err(id, code, message) => {
                            Settlement { id, value: SettlementValue::Err { code, message } }
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(Journal { seed: wire.seed, start_clock_ms: wire.start, requests, rounds })
    }
}
