//! The gateway's approvals: how a call whose policy is `ask` reaches the person behind the MCP client.
//!
//! Three channels, chosen per request from what the client declared: `elicitation/create` sent during the call
//! (sessions that negotiated a revision with `initialize`), an input-required result the client answers by
//! retrying the call (the sessionless 2026-07-28 revision, where a server sends no requests), or none, in which
//! case the library applies the policy's `fallback`. Invariant: an answer is read only from the client's own reply,
//! never from anything the program or the model wrote, and every reply that is not an explicit approval denies.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use codemode_bridge::{ApprovalDecision, ApprovalRequest, Approver, PendingApproval};
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequests, InputResponses, RequestStateCodec,
};
use rmcp::service::{Peer, RequestContext};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The field of the approval form, and its three answers.
const FIELD: &str = "decision";
const ONCE: &str = "approve";
const FOR_RUN: &str = "approve_for_run";
const DENY: &str = "deny";

/// How the person behind one MCP request can be asked.
#[derive(Clone, Debug)]
pub enum Channel {
    /// `elicitation/create` to the client, answered during the call.
    Elicit(Peer<RoleServer>),
    /// An input-required result; the client's retry carries the answers.
    InputRequired,
    /// Nobody can be asked: the policy's fallback decides.
    Nobody,
}

impl Channel {
    /// The channel of one request: what its client declared (form elicitation) and whether its protocol revision
    /// lets a server send requests.
    pub fn of(context: &RequestContext<RoleServer>) -> Channel {
        let form = context.client_capabilities().and_then(|caps| caps.elicitation).is_some_and(|e| {
            // An empty elicitation capability means form mode (the revision that added URL mode kept that).
            e.form.is_some() || e.url.is_none()
        });
        if !form {
            return Channel::Nobody;
        }
        let sessionless = context.protocol_version().is_some_and(|v| !v.has_initialize());
        if sessionless { Channel::InputRequired } else { Channel::Elicit(context.peer.clone()) }
    }

    /// The approver for this channel, or `None` when the fallback decides.
    pub fn approver(&self) -> Option<Arc<dyn Approver>> {
        match self {
            Channel::Elicit(peer) => Some(Arc::new(Eliciting { peer: peer.clone() })),
            Channel::InputRequired => Some(Arc::new(Deferring)),
            Channel::Nobody => None,
        }
    }
}

/// Asks through `elicitation/create` while the call waits.
struct Eliciting {
    peer: Peer<RoleServer>,
}

#[async_trait]
impl Approver for Eliciting {
    async fn decide(&self, request: ApprovalRequest) -> ApprovalDecision {
        let params = form(&message(&request.title, &request.path, &request.preview));
        let abort = request.context.abort.clone();
        tokio::select! {
            answer = self.peer.create_elicitation(params) => match answer {
                Ok(result) => decision(&result),
                // A client that fails the request has not approved anything.
                Err(_) => ApprovalDecision::Deny,
            },
            () = abort.aborted() => ApprovalDecision::Deny,
        }
    }
}

/// Defers every approval to an input-required result.
struct Deferring;

#[async_trait]
impl Approver for Deferring {
    async fn decide(&self, _request: ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Defer
    }
}

/// The text a person reads before deciding.
fn message(title: &Option<String>, path: &str, preview: &str) -> String {
    let program = title.as_deref().map_or_else(String::new, |t| format!(" \"{t}\""));
    format!("The code mode program{program} wants to call {path}, which can change data, with {preview}. Allow it?")
}

/// The approval form: one required choice among approve once, approve for this run, deny.
fn form(message: &str) -> ElicitRequestParams {
    let schema = json!({
        "type": "object",
        "properties": {
            FIELD: {
                "type": "string",
                "title": "Decision",
                "oneOf": [
                    { "const": ONCE, "title": "Approve once" },
                    { "const": FOR_RUN, "title": "Approve this tool for the rest of the run" },
                    { "const": DENY, "title": "Deny" },
                ],
            },
        },
        "required": [FIELD],
    });
    let Value::Object(schema) = schema else { unreachable!("a JSON object literal") };
    // The schema is a constant that rmcp's elicitation schema accepts; a refusal would be a bug caught by the
    // tests, and an empty form then still lets the person decline.
    let requested_schema =
        ElicitationSchema::from_json_schema(schema).unwrap_or_else(|_| ElicitationSchema::new(BTreeMap::new()));
    ElicitRequestParams::FormElicitationParams { meta: None, message: message.to_owned(), requested_schema }
}

/// The decision an elicitation result stands for: accept with an approving choice approves; everything else
/// (decline, cancel, an accepted form without a known choice) denies.
pub fn decision(result: &ElicitResult) -> ApprovalDecision {
    if result.action != ElicitationAction::Accept {
        return ApprovalDecision::Deny;
    }
    match result.content.as_ref().and_then(|c| c.get(FIELD)).and_then(Value::as_str) {
        Some(ONCE) => ApprovalDecision::Approve,
        Some(FOR_RUN) => ApprovalDecision::ApproveForRun,
        _ => ApprovalDecision::Deny,
    }
}

/// What the sealed `requestState` of an input-required result names: the run, the owner that may resume it, and
/// the calls whose answers the retry must carry.
#[derive(Debug, Serialize, Deserialize)]
pub struct Pending {
    /// The parked run.
    pub run_id: String,
    /// The run's owner key (session or principal); a retry from another owner is refused.
    pub owner: Option<String>,
    /// The exec's title, for the questions of a later round.
    pub title: Option<String>,
    /// The call ids asked about, in the order asked.
    pub calls: Vec<String>,
}

/// The input requests for a run's pending approvals, keyed by call id.
pub fn input_requests(title: &Option<String>, pending: &[PendingApproval]) -> InputRequests {
    pending
        .iter()
        .map(|p| {
            let params = form(&message(title, &p.path, &p.preview));
            (p.call_id.clone(), InputRequest::Elicitation(ElicitRequest::new(params)))
        })
        .collect()
}

/// The decisions a retry carries for `calls`: each answer read as an elicitation result; a call the retry does not
/// answer, or answers with something unreadable, is denied.
pub fn answers(calls: &[String], responses: Option<&InputResponses>) -> Vec<(String, ApprovalDecision)> {
    calls
        .iter()
        .map(|call| {
            let result = responses.and_then(|r| r.get(call)).and_then(|v| serde_json::from_value(v.clone()).ok());
            (call.clone(), result.as_ref().map_or(ApprovalDecision::Deny, decision))
        })
        .collect()
}

/// Seals and opens `requestState`, bound to the owner it was issued to.
pub struct StateSeal {
    codec: RequestStateCodec,
}

impl std::fmt::Debug for StateSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateSeal")
    }
}

impl StateSeal {
    /// A seal under `key` (at least 32 bytes).
    ///
    /// # Errors
    ///
    /// A key shorter than the codec accepts.
    pub fn new(key: Vec<u8>) -> Result<StateSeal, String> {
        RequestStateCodec::try_new(key).map(|codec| StateSeal { codec }).map_err(|e| e.to_string())
    }

    /// A seal under a random 32-byte key: answers must come back to this process.
    ///
    /// # Errors
    ///
    /// None in practice: the codec accepts 32-byte keys.
    pub fn random() -> Result<StateSeal, String> {
        StateSeal::new((0..2).flat_map(|_| uuid::Uuid::new_v4().into_bytes()).collect())
    }

    /// The sealed form of `pending`.
    pub fn seal(&self, pending: &Pending) -> String {
        // A struct of strings always encodes.
        self.codec.seal_json(pending).unwrap_or_default()
    }

    /// The pending approvals a client echoed back, if the seal holds and it was issued to `owner`.
    pub fn open(&self, sealed: &str, owner: &Option<String>) -> Option<Pending> {
        let pending: Pending = self.codec.open_json(sealed).ok()?;
        (pending.owner == *owner).then_some(pending)
    }
}
