//! The tool policy, approvals and the host's effect facts, end to end through real workers: deny, ask with and
//! without an approver, each decision (Defer's round trip included), the paused deadline on a manual clock,
//! approvals journaled across `wait` and across a restart with a directory store, and each effect status.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use codemode::store::{Clock, ManualClock};
use codemode::{
    ApprovalDecision, ApprovalRequest, Approver, CodeMode, CodeModeResult, Decision, EffectClass, EffectStatus,
    ExecOptions, Limits, Policy, RunScope, ToolDefinition,
};
use serde_json::{Value, json};

use crate::support::{TestHost, failure, tool, value};

/// `echo`, `fail`, `slow` and `explode` (its host panics) are writes (no annotation says otherwise); `add` is
/// configured read-only.
fn tools() -> Vec<ToolDefinition> {
    vec![
        tool("echo", json!({ "type": "object" })),
        tool("explode", json!({ "type": "object" })),
        tool("add", json!({ "type": "object" })).effect(EffectClass::Read),
        tool("fail", json!({ "type": "object" })),
        tool("slow", json!({ "type": "object", "properties": { "ms": { "type": "integer" } } })),
    ]
}

fn policy(value: Value) -> Policy {
    Policy::from_json("policy", &value).expect("a valid policy")
}

/// An approver that answers from a script (then approves) and keeps every request it saw.
#[derive(Default)]
struct Scripted {
    answers: Mutex<VecDeque<ApprovalDecision>>,
    seen: Mutex<Vec<ApprovalRequest>>,
    /// Moved forward by `think_ms` while deciding: a person taking their time, on the engine's clock.
    clock: Option<(Arc<ManualClock>, u64)>,
}

impl Scripted {
    fn new(answers: &[ApprovalDecision]) -> Arc<Self> {
        Arc::new(Scripted { answers: Mutex::new(answers.iter().copied().collect()), ..Scripted::default() })
    }

    fn asked(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

#[async_trait]
impl Approver for Scripted {
    async fn decide(&self, request: ApprovalRequest) -> ApprovalDecision {
        self.seen.lock().unwrap().push(request);
        if let Some((clock, ms)) = &self.clock {
            clock.advance(*ms);
        }
        self.answers.lock().unwrap().pop_front().unwrap_or(ApprovalDecision::Approve)
    }
}

struct Setup {
    policy: Option<Policy>,
    approver: Option<Arc<dyn Approver>>,
    clock: Option<Arc<ManualClock>>,
    state: Option<std::path::PathBuf>,
    timeout_ms: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup { policy: None, approver: None, clock: None, state: None, timeout_ms: 2_000 }
    }
}

fn build(setup: Setup) -> (CodeMode, Arc<TestHost>) {
    let host = Arc::new(TestHost::default());
    let mut builder = CodeMode::builder()
        .limits(Limits { timeout_ms: setup.timeout_ms, ..Limits::default() })
        .tools(tools())
        .host(host.clone())
        .warm_workers(1)
        .state_dir(setup.state);
    if let Some(policy) = setup.policy {
        builder = builder.policy(policy);
    }
    if let Some(approver) = setup.approver {
        builder = builder.approver(approver);
    }
    if let Some(clock) = setup.clock {
        builder = builder.clock(clock);
    }
    (
        builder
            .build()
            .expect("the engine builds (cargo build -p codemode-worker --features patched-boa --bin codemode-worker)"),
        host,
    )
}

async fn exec(engine: &CodeMode, code: &str, options: &ExecOptions) -> CodeModeResult {
    engine.exec_with(json!({ "title": "write files", "code": code }), RunScope::default(), options).await
}

async fn wait(engine: &CodeMode, run_id: &str, options: &ExecOptions) -> CodeModeResult {
    engine.wait_with(json!({ "runId": run_id }), RunScope::default(), options).await
}

fn waiting(result: &CodeModeResult) -> &codemode::Waiting {
    match result {
        CodeModeResult::Waiting(w) => w,
        other => panic!("expected waiting, got {}", serde_json::to_string_pretty(other).unwrap()),
    }
}

fn facts(result: &CodeModeResult) -> &codemode::EffectFacts {
    match result {
        CodeModeResult::Completed(c) => &c.effects,
        CodeModeResult::Failed(f) => &f.effects,
        CodeModeResult::Waiting(_) => panic!("a waiting result has no effect facts"),
    }
}

fn calls(host: &TestHost) -> usize {
    host.calls.load(Ordering::SeqCst)
}

const CATCH_ECHO: &str = "try { await echo({ path: 'a.txt' }); return 'ran' } \
                          catch (e) { return { code: e.code, effect: e.effectStatus, message: e.message } }";

#[tokio::test]
async fn deny_rejects_in_the_guest_and_the_program_goes_on() {
    let (engine, host) = build(Setup {
        policy: Some(policy(json!({ "rules": [{ "match": "ech?", "policy": "deny" }] }))),
        ..Setup::default()
    });
    let code = "let denied; try { await echo({ x: 1 }) } catch (e) { denied = [e.code, e.effectStatus, e.message] } \
                const sum = await add({ a: 1, b: 2 }); return { denied, sum }";
    let result = exec(&engine, code, &ExecOptions::default()).await;
    let v = value(&result);
    assert_eq!(v["denied"][0], "denied");
    assert_eq!(v["denied"][1], "not_started");
    let message = v["denied"][2].as_str().unwrap();
    assert!(message.contains("rule \"ech?\"") && message.contains("Retrying will not help"), "{message}");
    assert_eq!(v["sum"], json!(3));
    assert_eq!(calls(&host), 1, "only add reached the host");
    let facts = facts(&result);
    assert!(facts.mutation_free, "a denied write and a read leave the cell mutation-free: {facts:?}");
    assert_eq!((facts.completed_writes, facts.uncertain_writes), (0, 0));
}

#[tokio::test]
async fn no_policy_allows_everything_and_counts_the_writes() {
    let (engine, host) = build(Setup::default());
    let result = exec(&engine, "await echo({ a: 1 }); await add({}); return 1", &ExecOptions::default()).await;
    assert_eq!(value(&result), json!(1));
    assert_eq!(calls(&host), 2);
    let facts = facts(&result);
    assert!(!facts.mutation_free);
    assert_eq!(facts.completed_writes, 1, "echo is a write, add a read: {facts:?}");
    assert!(facts.writes.is_empty(), "a completed result carries the counts only");
}

#[tokio::test]
async fn ask_without_an_approver_gets_the_fallback() {
    let (engine, host) = build(Setup { policy: Some(policy(json!({ "writes": "ask" }))), ..Setup::default() });
    let v = value(&exec(&engine, CATCH_ECHO, &ExecOptions::default()).await);
    assert_eq!(v["code"], "denied");
    assert!(v["message"].as_str().unwrap().contains("nobody can be asked"), "{v}");
    assert_eq!(calls(&host), 0);

    let (engine, host) =
        build(Setup { policy: Some(policy(json!({ "writes": "ask", "fallback": "allow" }))), ..Setup::default() });
    assert_eq!(value(&exec(&engine, CATCH_ECHO, &ExecOptions::default()).await), json!("ran"));
    assert_eq!(calls(&host), 1);
}

#[tokio::test]
async fn each_decision_and_what_the_approver_is_shown() {
    use ApprovalDecision::{Approve, ApproveForRun, Deny};
    let approver = Scripted::new(&[Approve, Deny, ApproveForRun]);
    let (engine, host) = build(Setup {
        policy: Some(policy(json!({ "writes": "ask" }))),
        approver: Some(approver.clone()),
        ..Setup::default()
    });
    let code = "const out = []; \
                for (let i = 0; i < 5; i++) { \
                  try { await echo({ auth: 'ghp_' + 'a'.repeat(36), i, pad: 'x'.repeat(3000) }); out.push('ok') } \
                  catch (e) { out.push(e.code + ':' + e.effectStatus + ':' + e.message) } } \
                out.push(await add({})); return out";
    let result = exec(&engine, code, &ExecOptions::default()).await;
    let v = value(&result);
    assert_eq!(v[0], "ok");
    let denied = v[1].as_str().unwrap();
    assert!(denied.starts_with("denied:not_started:a person denied"), "{denied}");
    assert_eq!((v[2].clone(), v[3].clone(), v[4].clone()), (json!("ok"), json!("ok"), json!("ok")));
    assert_eq!(approver.asked(), 3, "approve, deny, then approved for the run: the last two calls are not asked");
    assert_eq!(calls(&host), 5, "four echo calls and the read");
    assert_eq!(facts(&result).completed_writes, 4);

    let seen = approver.seen.lock().unwrap();
    let first = &seen[0];
    assert_eq!((first.tool.as_str(), first.path.as_str()), ("echo", "echo"));
    assert_eq!(first.title.as_deref(), Some("write files"));
    assert!(first.context.run_id.starts_with("cm_"), "{}", first.context.run_id);
    assert_eq!(first.context.request_id, "bridge:callValue:1");
    assert!(first.preview.contains("\"i\":0"), "{}", first.preview);
    assert!(!first.preview.contains("ghp_aaaa"), "the preview is redacted: {}", first.preview);
    assert!(first.preview.len() <= 1024 + '…'.len_utf8() && first.preview.ends_with('…'), "capped");
}

#[tokio::test]
async fn a_call_s_approver_beats_the_engine_s() {
    let (engine, host) = build(Setup {
        policy: Some(policy(json!({ "default": "ask" }))),
        approver: Some(Scripted::new(&[ApprovalDecision::Deny])),
        ..Setup::default()
    });
    let mine = Scripted::new(&[ApprovalDecision::Approve]);
    let options = ExecOptions::default().approver(mine.clone());
    assert_eq!(value(&exec(&engine, CATCH_ECHO, &options).await), json!("ran"));
    assert_eq!((mine.asked(), calls(&host)), (1, 1));
    // Discovery is never gated.
    let found = exec(&engine, "return (await catalog.search('echo')).length > 0", &ExecOptions::default()).await;
    assert_eq!(value(&found), json!(true));
}

#[tokio::test]
async fn a_deferred_approval_parks_the_run_until_a_wait_answers_it() {
    let (engine, host) = build(Setup {
        policy: Some(policy(json!({ "rules": [{ "match": "echo", "policy": "ask" }] }))),
        ..Setup::default()
    });
    let deferring = ExecOptions::default().approver(Scripted::new(&[ApprovalDecision::Defer, ApprovalDecision::Defer]));
    let code = "const a = await add({}); const e = await echo({ file: 'one' }); return { a, e }";
    let parked = exec(&engine, code, &deferring).await;
    let w = waiting(&parked);
    assert_eq!(w.reason, codemode::WaitReason::Approval);
    assert_eq!(w.pending_approvals.len(), 1);
    let pending = &w.pending_approvals[0];
    assert_eq!((pending.call_id.as_str(), pending.tool.as_str()), ("bridge:callValue:2", "echo"));
    assert!(pending.preview.contains("one"), "{}", pending.preview);
    let json = serde_json::to_value(&parked).unwrap();
    assert_eq!(json["pendingApprovals"][0]["callId"], "bridge:callValue:2");
    assert_eq!(calls(&host), 1, "the echo call did not run");

    // A wait whose approver defers again leaves it pending.
    let again = wait(&engine, &w.run_id, &deferring).await;
    let w = waiting(&again);
    assert_eq!(w.pending_approvals.len(), 1);
    assert_eq!(calls(&host), 1);

    let answered = ExecOptions::default().answers(vec![(pending.call_id.clone(), ApprovalDecision::Approve)]);
    let done = wait(&engine, &w.run_id, &answered).await;
    assert_eq!(value(&done)["e"], json!({ "file": "one" }));
    assert_eq!(calls(&host), 2);
}

#[tokio::test]
async fn fallback_park_parks_the_run_until_a_wait_carries_the_answer() {
    let (engine, host) =
        build(Setup { policy: Some(policy(json!({ "writes": "ask", "fallback": "park" }))), ..Setup::default() });
    let parked = exec(&engine, CATCH_ECHO, &ExecOptions::default()).await;
    let w = waiting(&parked);
    assert_eq!(w.reason, codemode::WaitReason::Approval);
    assert_eq!(w.pending_approvals.len(), 1);
    assert_eq!(calls(&host), 0, "nobody answered: the call did not run");

    // A wait without the answer parks again; one with it resumes the run.
    let again = wait(&engine, &w.run_id, &ExecOptions::default()).await;
    assert_eq!(waiting(&again).pending_approvals.len(), 1);
    let call_id = w.pending_approvals[0].call_id.clone();
    let answered = ExecOptions::default().answers(vec![(call_id, ApprovalDecision::Approve)]);
    assert_eq!(value(&wait(&engine, &w.run_id, &answered).await), json!("ran"));
    assert_eq!(calls(&host), 1);
}

#[tokio::test]
async fn an_approval_longer_than_the_timeout_pauses_the_deadline() {
    // The person takes 10 s on the engine's clock; the cell has 3 s, and the program computes a while after each
    // approval. Without the pause the cell would have no time left once the first approval came back.
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let approver = Arc::new(Scripted { clock: Some((clock.clone(), 10_000)), ..Scripted::default() });
    let (engine, host) = build(Setup {
        policy: Some(policy(json!({ "writes": "ask" }))),
        approver: Some(approver.clone()),
        clock: Some(clock.clone()),
        timeout_ms: 3_000,
        ..Setup::default()
    });
    let code = "const work = () => { let x = 0; for (let i = 0; i < 100000; i++) x += i % 7; return x }; \
                const a = await echo({ n: 1 }); work(); const b = await echo({ n: 2 }); work(); return [a.n, b.n]";
    let result = exec(&engine, code, &ExecOptions::default()).await;
    assert_eq!(value(&result), json!([1, 2]), "two 10 s approvals in a 3 s cell");
    assert_eq!((approver.asked(), calls(&host)), (2, 2));
    assert_eq!(clock.now_ms(), 1_700_000_020_000);
}

#[tokio::test]
async fn each_effect_status_and_the_facts_of_failed_results() {
    let (engine, host) = build(Setup::default());
    // failed: the tool answered with an error; completed: echo; the program then throws.
    let code = "await echo({ file: 'done', note: 'ghp_abcdefghijklmnopqrstuvwxyz0123456789' }); \
                try { await fail({}) } catch (e) {} throw new Error('boom')";
    let result = exec(&engine, code, &ExecOptions::default()).await;
    assert_eq!(failure(&result).0, "guest_error");
    let f = facts(&result);
    assert!(!f.mutation_free);
    assert_eq!((f.completed_writes, f.failed_writes, f.uncertain_writes), (1, 1, 0));
    assert_eq!(f.writes.len(), 1, "completed and uncertain writes are listed, failed ones counted: {f:?}");
    assert_eq!((f.writes[0].tool.as_str(), f.writes[0].status), ("echo", EffectStatus::Completed));
    assert_eq!(f.writes[0].call_id, "bridge:callValue:1");
    assert!(f.writes[0].preview.contains("done"));
    // The arguments were captured as the call went out and redacted only now, as the write is shown.
    assert!(f.writes[0].preview.contains("[REDACTED]") && !f.writes[0].preview.contains("ghp_"), "{f:?}");
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["mutationFree"], false);
    assert_eq!(json["writes"][0]["callId"], "bridge:callValue:1");

    // not_started: only reads and refusals before dispatch leave a failed cell mutation-free.
    let result =
        exec(&engine, "await add({}); await add({ a: 1 }); throw new Error('x')", &ExecOptions::default()).await;
    assert!(facts(&result).mutation_free, "{:?}", facts(&result));
    assert_eq!(serde_json::to_value(&result).unwrap()["mutationFree"], true);

    // uncertain: a write in flight when the run is aborted.
    let parked =
        exec(&engine, "const p = slow({ ms: 60000 }); await yield_control(); return await p", &ExecOptions::default())
            .await;
    let id = waiting(&parked).run_id.clone();
    let aborted = engine.abort(&id).await;
    assert_eq!(failure(&aborted).0, "aborted");
    let f = facts(&aborted);
    assert_eq!((f.uncertain_writes, f.writes.len()), (1, 1), "{f:?}");
    assert_eq!((f.writes[0].tool.as_str(), f.writes[0].status), ("slow", EffectStatus::Uncertain));
    assert!(calls(&host) >= 5);
}

#[tokio::test]
async fn every_nested_call_has_the_effect_status_the_host_recorded() {
    let (engine, _) = build(Setup {
        policy: Some(policy(json!({ "rules": [{ "match": "slow", "policy": "deny" }] }))),
        ..Setup::default()
    });
    // completed: add (a read) and echo; failed: fail; not_started: slow (denied); uncertain: explode, whose host
    // panicked after the call reached it.
    let code = "await add({}); await echo({ n: 1 }); \
                const codes = []; \
                for (const f of [() => fail({}), () => slow({ ms: 1 }), () => explode({})]) { \
                  try { await f() } catch (e) { codes.push(e.code) } } \
                return codes";
    let result = exec(&engine, code, &ExecOptions::default()).await;
    assert_eq!(value(&result), json!(["tool_error", "denied", "tool_error"]));
    let f = facts(&result);
    let c = f.calls;
    assert_eq!((c.completed, c.failed, c.not_started, c.uncertain), (2, 1, 1, 1), "{f:?}");
    assert_eq!((f.completed_writes, f.failed_writes, f.uncertain_writes), (1, 1, 1));
    assert!(!f.mutation_free);
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["calls"], json!({ "notStarted": 1, "completed": 2, "failed": 1, "uncertain": 1 }));

    // A run that fails lists the panicked write as uncertain, beside the completed one.
    let failed = exec(
        &engine,
        "await echo({}); try { await explode({ n: 2 }) } catch {} throw new Error('x')",
        &ExecOptions::default(),
    )
    .await;
    let f = facts(&failed);
    let listed: Vec<(&str, EffectStatus)> = f.writes.iter().map(|w| (w.tool.as_str(), w.status)).collect();
    assert_eq!(listed, vec![("echo", EffectStatus::Completed), ("explode", EffectStatus::Uncertain)]);
}

#[tokio::test]
async fn concurrent_calls_of_one_tool_are_asked_once_when_approved_for_the_run() {
    let approver = Scripted::new(&[ApprovalDecision::ApproveForRun]);
    let (engine, host) = build(Setup {
        policy: Some(policy(json!({ "writes": "ask" }))),
        approver: Some(approver.clone()),
        ..Setup::default()
    });
    let code = "const r = await Promise.all([echo({ n: 1 }), echo({ n: 2 }), echo({ n: 3 })]); return r.map(x => x.n)";
    let result = exec(&engine, code, &ExecOptions::default()).await;
    assert_eq!(value(&result), json!([1, 2, 3]));
    assert_eq!(approver.asked(), 1, "the other two calls waited for the first answer, which covers the run");
    assert_eq!(calls(&host), 3);
}

fn restartable(dir: &Path, policy: Policy) -> (CodeMode, Arc<TestHost>) {
    build(Setup { policy: Some(policy), state: Some(dir.to_path_buf()), ..Setup::default() })
}

#[tokio::test]
async fn approvals_are_journaled_across_wait_and_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ask = policy(json!({ "writes": "ask" }));
    let approver = Scripted::new(&[ApprovalDecision::ApproveForRun]);
    let code = "const a = await echo({ n: 1 }); await yield_control(); const b = await echo({ n: 2 }); \
                await yield_control(); const c = await echo({ n: 3 }); return [a.n, b.n, c.n]";
    let (first, first_host) = restartable(dir.path(), ask.clone());
    let parked = exec(&first, code, &ExecOptions::default().approver(approver.clone())).await;
    let id = waiting(&parked).run_id.clone();
    // Across a wait with no approver at all: approved for the run, so not asked (and not denied by the fallback).
    let parked = wait(&first, &id, &ExecOptions::default()).await;
    assert_eq!(waiting(&parked).run_id, id);
    assert_eq!((approver.asked(), calls(&first_host)), (1, 2));
    drop(first);

    // Across a restart: the replay never re-runs the approved calls, and never asks again.
    let (second, second_host) = restartable(dir.path(), ask);
    let done = wait(&second, &id, &ExecOptions::default()).await;
    assert_eq!(value(&done), json!([1, 2, 3]));
    assert_eq!(calls(&second_host), 1, "only the third call ran in the new process");
    assert_eq!(approver.asked(), 1);
    assert_eq!(facts(&done).completed_writes, 3, "the record of writes survives the restart");
}

#[tokio::test]
async fn a_deferred_approval_survives_a_restart_and_a_denial_is_final() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ask = policy(json!({ "writes": "ask" }));
    let deferring = ExecOptions::default().approver(Scripted::new(&[ApprovalDecision::Defer]));
    let (first, _) = restartable(dir.path(), ask.clone());
    let parked = exec(&first, CATCH_ECHO, &deferring).await;
    let w = waiting(&parked);
    let (id, call_id) = (w.run_id.clone(), w.pending_approvals[0].call_id.clone());
    drop(first);

    let (second, host) = restartable(dir.path(), ask);
    let denied = ExecOptions::default().answers(vec![(call_id, ApprovalDecision::Deny)]);
    let done = wait(&second, &id, &denied).await;
    let v = value(&done);
    assert_eq!((v["code"].clone(), v["effect"].clone()), (json!("denied"), json!("not_started")));
    assert_eq!(calls(&host), 0, "the denied write never ran");
    assert!(facts(&done).mutation_free);
}

#[tokio::test]
async fn an_uncertain_write_at_a_crash_is_reported_not_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allow = policy(json!({ "rules": [{ "match": "nothing", "policy": "deny" }] }));
    let (first, _) = restartable(dir.path(), allow.clone());
    let parked =
        exec(&first, "const p = slow({ ms: 60000 }); await yield_control(); return await p", &ExecOptions::default())
            .await;
    let id = waiting(&parked).run_id.clone();
    drop(first);
    let (second, host) = restartable(dir.path(), allow);
    let failed = wait(&second, &id, &ExecOptions::default()).await;
    let (kind, message) = failure(&failed);
    assert_eq!(kind, "guest_error", "{message}");
    let f = facts(&failed);
    assert!(!f.mutation_free);
    assert_eq!((f.uncertain_writes, f.writes[0].status), (1, EffectStatus::Uncertain));
    assert_eq!(calls(&host), 0, "the interrupted write is not replayed");
}

#[tokio::test]
async fn the_description_and_declarations_mark_gated_tools() {
    let (engine, _) = build(Setup {
        policy: Some(policy(json!({ "writes": "ask", "rules": [{ "match": "fail", "policy": "deny" }] }))),
        ..Setup::default()
    });
    let index = engine.catalog().quick_index().text;
    let line = |name: &str| index.lines().find(|l| l.starts_with(&format!("- {name} "))).unwrap_or("").to_owned();
    assert!(line("echo").ends_with("(needs approval: a person approves each call before it runs)"), "{index}");
    assert!(line("fail").contains("(denied by policy"), "{index}");
    assert!(!line("add").contains('('), "a read the policy allows carries no note: {index}");
    let dts = engine.catalog().api_read("tools/echo.d.ts").unwrap();
    assert!(dts.contains("(needs approval"), "{dts}");
    assert_eq!(engine.catalog().by_callable("fail").unwrap().decision, Decision::Deny);
}
