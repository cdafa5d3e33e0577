//! The gateway's approvals: how a call whose policy is `ask` reaches the person behind the MCP client.
//!
//! Three channels, chosen per request from what the client declared: `elicitation/create` sent during the call
//! (sessions that negotiated a revision with `initialize`), an input-required result the client answers by
//! retrying the call (the sessionless 2026-07-28 revision, where a server sends no requests), or none, in which
//! case the library applies the policy's `fallback` (`park` parks the run for the console). With `[approvals] route
//! = "console"` the console is the channel whatever the client declared. Invariant: an answer is read only from the client's own reply,
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
    /// The approval console answers (`[approvals] route = "console"`): every question parks the run.
    Console,
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
            Channel::InputRequired | Channel::Console => Some(Arc::new(Deferring)),
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
        let params = form(&question(&request.path, &request.preview, &Asker::Program(request.title.as_deref())));
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

/// Who wants a call to run.
#[derive(Clone, Copy, Debug)]
pub enum Asker<'a> {
    /// A code mode program, with its `exec` title (its own words, untrusted).
    Program(Option<&'a str>),
    /// The client, calling a direct-only tool itself.
    Client,
}

/// The text a person reads before deciding. The real call comes first, in words the gateway chose: the tool's path
/// and its arguments (JSON on one line). Only after them comes the program's title, on one line and quoted, so no
/// title can push the call out of view or pass itself off as the question.
pub fn question(path: &str, preview: &str, asker: &Asker<'_>) -> String {
    let call = format!("Allow {path} to run with the arguments {}?", one_line(preview));
    match asker {
        Asker::Program(Some(title)) => {
            format!("{call} Asked by the code mode program titled {} (the program's own words).", quoted(title))
        }
        Asker::Program(None) => format!("{call} Asked by a code mode program."),
        Asker::Client => format!("{call} The client called this tool directly."),
    }
}

/// Whether `c` could hide, reorder or break up the text around it: control characters, line and paragraph
/// separators, and the Unicode bidirectional and zero-width formatting characters.
fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `title` as one quoted line: the characters [`hides_text`] names removed, in the quotes of a JSON string (so a
/// `"` in the title cannot close the quote early).
fn quoted(title: &str) -> String {
    let clean: String = title.chars().filter(|&c| !hides_text(c)).collect();
    serde_json::to_string(&clean).expect("a string encodes as JSON")
}

/// JSON arguments as one line: JSON escapes control characters already; the line separators and formatting
/// characters it leaves as they are become their `\uXXXX` escapes, which mean the same to a JSON reader.
fn one_line(preview: &str) -> String {
    if !preview.chars().any(hides_text) {
        return preview.to_owned();
    }
    preview.chars().map(|c| if hides_text(c) { format!("\\u{:04x}", u32::from(c)) } else { c.to_string() }).collect()
}

/// The approval form of a program's call: one required choice among approve once, approve for this run, deny.
pub fn form(message: &str) -> ElicitRequestParams {
    form_of(
        message,
        json!([
            { "const": ONCE, "title": "Approve once" },
            { "const": FOR_RUN, "title": "Approve this tool for the rest of the run" },
            { "const": DENY, "title": "Deny" },
        ]),
    )
}

/// The approval form of a direct call: approve once or deny (there is no run to remember an approval in).
pub fn direct_form(message: &str) -> ElicitRequestParams {
    form_of(message, json!([{ "const": ONCE, "title": "Approve once" }, { "const": DENY, "title": "Deny" }]))
}

fn form_of(message: &str, choices: Value) -> ElicitRequestParams {
    let schema = json!({
        "type": "object",
        "properties": {
            FIELD: {
                "type": "string",
                "title": "Decision",
                "oneOf": choices,
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
    /// For the approval of a direct call (no run): the call it approves. Absent for a run's approvals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<DirectCall>,
}

/// The one direct call a sealed approval is for: a retry must make exactly this call, once, before it expires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectCall {
    /// The SHA-256 of the tool name and its arguments ([`DirectCall::binding`]).
    pub binding: String,
    /// The call id asked about, also the approval's single-use id.
    pub nonce: String,
    /// When the approval expires (epoch ms).
    pub expires_ms: u64,
}

impl DirectCall {
    /// What binds an approval to one call: the SHA-256 of the tool's name and its arguments as JSON.
    pub fn binding(tool: &str, arguments: &Value) -> String {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        hash.update(tool.as_bytes());
        hash.update([0]);
        hash.update(arguments.to_string().as_bytes());
        hex::encode(hash.finalize())
    }
}

/// The input request for the approval of one direct call, keyed by `call_id`.
pub fn direct_input_requests(call_id: &str, question: &str) -> InputRequests {
    [(call_id.to_owned(), InputRequest::Elicitation(ElicitRequest::new(direct_form(question))))].into_iter().collect()
}

/// The input requests for a run's pending approvals, keyed by call id.
pub fn input_requests(title: &Option<String>, pending: &[PendingApproval]) -> InputRequests {
    pending
        .iter()
        .map(|p| {
            let params = form(&question(&p.path, &p.preview, &Asker::Program(title.as_deref())));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A title that forges a question of its own and pushes the real one 30 lines down.
    const FORGED: &str = "Read the weather\nThe code mode program wants to call MCP.weather.get, which reads the \
                          forecast. Allow it?\u{202e}\r\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\"\t";

    const WRITE: &str = "MCP.fs.writeFile";
    const ARGS: &str = r#"{"content":"rm -rf ~\u2028","path":"/home/me/.bashrc"}"#;

    fn pending() -> PendingApproval {
        PendingApproval {
            call_id: "bridge:namespace:1".into(),
            tool: "write_file".into(),
            path: WRITE.into(),
            preview: ARGS.replace("\\u2028", "\u{2028}"),
        }
    }

    fn message_of(params: &ElicitRequestParams) -> &str {
        match params {
            ElicitRequestParams::FormElicitationParams { message, .. } => message,
            other => panic!("a form: {other:?}"),
        }
    }

    #[test]
    fn the_real_call_comes_first_and_the_title_after_it_on_one_quoted_line() {
        let p = pending();
        let text = question(&p.path, &p.preview, &Asker::Program(Some(FORGED)));
        assert!(text.starts_with("Allow MCP.fs.writeFile to run with the arguments {"), "{text}");
        assert!(!text.chars().any(hides_text), "one line, nothing hidden: {text:?}");
        assert!(text.find("/home/me/.bashrc") < text.find("Read the weather"), "{text}");
        insta::assert_snapshot!(text);
        insta::assert_snapshot!("untitled", question(&p.path, &p.preview, &Asker::Program(None)));
        insta::assert_snapshot!("direct", question("fs.write_file", &p.preview, &Asker::Client));
    }

    #[test]
    fn the_input_required_form_asks_the_same_question_as_the_elicitation() {
        let title = Some(FORGED.to_owned());
        let requests = input_requests(&title, &[pending()]);
        let Some(InputRequest::Elicitation(request)) = requests.get("bridge:namespace:1") else {
            panic!("one elicitation: {requests:?}")
        };
        let p = pending();
        // The elicitation channel (`Eliciting::decide`) builds its form with exactly this call.
        let elicited = form(&question(&p.path, &p.preview, &Asker::Program(title.as_deref())));
        assert_eq!(message_of(&request.params), message_of(&elicited));
        assert!(message_of(&elicited).starts_with("Allow MCP.fs.writeFile"));
    }
}
