//! Checkpoints: the compact wire form round-trips, stays small, and refuses what it cannot decode.

use codemode_bridge::{Journal, RequestDigest, Round, Settlement, SettlementValue};
use codemode_snapshot::{Checkpoint, YieldRequest, is_valid_run_id, new_run_id};
use proptest::prelude::*;

use crate::{checkpoint, owner};

#[test]
fn run_ids_are_cm_uuid() {
    let id = new_run_id();
    assert!(id.starts_with("cm_"));
    assert!(is_valid_run_id(&id));
    assert!(!is_valid_run_id(&id.to_uppercase()));
    assert!(!is_valid_run_id("cm_../../../../tmp/x"));
    assert!(!is_valid_run_id(&format!("{id}/")));
}

#[test]
fn ten_calls_returning_ok_fit_in_under_a_kilobyte() {
    let mut cp = checkpoint(owner("agent:main:main", "run-1"), 10);
    cp.created_at_ms = 1_800_000_000_000;
    cp.expires_at_ms = 1_800_000_900_000;
    cp.generation = 1;
    let len = cp.encoded_len();
    assert!(len < 1024, "checkpoint of 10 calls is {len} bytes");
    insta::assert_snapshot!(String::from_utf8(cp.encode()).unwrap().replace(&cp.run_id, "cm_<uuid>"));
}

/// A checkpoint as `codemode run --state` wrote it for a run parked after ten calls returning `{ok: true}`: the
/// journal, the effect record of each write, the call names and the activity record of every call.
const TEN_CALLS_WITH_ACTIVITY: &str = include_str!("../fixtures/ten-calls-with-activity.json");

#[test]
fn the_stored_form_of_ten_calls_with_their_activity_fits_in_under_a_kilobyte() {
    let cp = Checkpoint::decode(TEN_CALLS_WITH_ACTIVITY.as_bytes()).expect("the fixture decodes");
    assert_eq!(cp.activity.calls.len(), 10);
    let plain = cp.encode();
    assert!(plain.len() > 4096, "the JSON alone is {} bytes", plain.len());
    let stored = cp.to_stored();
    assert!(stored.len() < 1024, "stored in {} bytes", stored.len());
    assert!(stored.starts_with(b"\0cmz"), "deflated behind its marker");
    assert_eq!(Checkpoint::decode(&stored).unwrap(), cp);
    // Plain JSON, as written before, still decodes.
    assert_eq!(Checkpoint::decode(&plain).unwrap(), cp);
}

#[test]
fn a_broken_deflated_checkpoint_is_refused_with_a_message() {
    let stored = Checkpoint::decode(TEN_CALLS_WITH_ACTIVITY.as_bytes()).unwrap().to_stored();
    let cut = &stored[..stored.len() / 2];
    let error = Checkpoint::decode(cut).unwrap_err();
    assert!(error.starts_with("the deflated checkpoint does not inflate"), "{error}");
}

#[test]
fn another_version_is_refused() {
    let cp = checkpoint(owner("s", "r"), 1);
    let text = String::from_utf8(cp.encode()).unwrap().replacen("\"v\":1", "\"v\":2", 1);
    assert_eq!(Checkpoint::decode(text.as_bytes()).err().unwrap(), "checkpoint version 2 (expected 1)");
}

#[test]
fn yield_and_untrusted_are_typed_fields() {
    let mut cp = checkpoint(owner("s", "r"), 1);
    cp.yield_request = Some(YieldRequest { id: 2, reason: Some("approval".into()) });
    cp.untrusted = true;
    let text = String::from_utf8(cp.encode()).unwrap();
    assert!(text.contains(r#""yield":{"id":2,"reason":"approval"},"untrusted":true"#), "{text}");
    assert!(!text.contains("extra"), "{text}");
    assert_eq!(Checkpoint::decode(text.as_bytes()).unwrap(), cp);
}

#[test]
fn checkpoints_of_the_previous_version_keep_yield_and_untrusted_from_extra() {
    let fresh = checkpoint(owner("s", "r"), 1);
    let text = String::from_utf8(fresh.encode()).unwrap();
    let old = format!(r#"{},"extra":{{"yield":{{"id":3,"reason":null}},"untrusted":true}}}}"#, &text[..text.len() - 1]);
    let back = Checkpoint::decode(old.as_bytes()).unwrap();
    assert_eq!(back.yield_request, Some(YieldRequest { id: 3, reason: None }));
    assert!(back.untrusted);
    let mut expected = fresh;
    expected.yield_request = back.yield_request.clone();
    expected.untrusted = true;
    assert_eq!(back, expected, "nothing else changes");
    let only_untrusted = format!(r#"{},"extra":{{"untrusted":true}}}}"#, &text[..text.len() - 1]);
    let back = Checkpoint::decode(only_untrusted.as_bytes()).unwrap();
    assert_eq!((back.yield_request, back.untrusted), (None, true));
}

#[test]
fn activity_is_kept_with_the_checkpoint_and_not_counted_against_its_cap() {
    use codemode_telemetry::{ActivityLimits, CallEffect, CallRecord, CallStart, CallStatus};
    let plain = checkpoint(owner("s", "r"), 1);
    assert!(!String::from_utf8(plain.encode()).unwrap().contains("activity"), "no activity, no field");
    let mut cp = plain.clone();
    cp.activity.cell = 1;
    let start = CallStart {
        call_id: "bridge:callValue:1".into(),
        run_id: cp.run_id.clone(),
        cell: 1,
        tool: "ping".into(),
        path: "ping".into(),
        server: None,
        started_at_ms: 1_800_000_000_000,
        args: "{\"i\":0}".into(),
        replayed: false,
    };
    let record = CallRecord {
        start: start.clone(),
        duration_ms: 3,
        status: CallStatus::Ok,
        error_code: None,
        error: None,
        effect: CallEffect::Completed,
        result: Some("{\"ok\":true}".into()),
    };
    assert!(cp.activity.record(&record, &ActivityLimits::default()));
    cp.activity.open.push(CallStart { call_id: "bridge:callValue:2".into(), ..start });
    let back = Checkpoint::decode(&cp.encode()).unwrap();
    assert_eq!(back, cp);
    // The same cap admits the checkpoint with or without its activity.
    let cap = plain.encoded_len() as u64;
    assert_eq!(cp.check_size(cap).unwrap(), plain.encoded_len());
    assert!(cp.check_size(cap - 1).is_err());
    // A checkpoint written before activity was recorded decodes with an empty one.
    let old = String::from_utf8(plain.encode()).unwrap();
    assert!(Checkpoint::decode(old.as_bytes()).unwrap().activity.is_empty());
}

fn settlement() -> impl Strategy<Value = Settlement> {
    let value = prop_oneof![
        Just(serde_json::json!(null)),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
        ".{0,8}".prop_map(|s| serde_json::json!({"ok": true, "s": s, "list": [s]})),
        Just(serde_json::json!(["a", "b", "c"])),
    ];
    (
        1u32..1000,
        prop_oneof![
            value.prop_map(|value| SettlementValue::Ok { value }),
            (".{0,10}", ".{0,20}").prop_map(|(code, message)| SettlementValue::err(code, message)),
        ],
    )
        .prop_map(|(id, value)| Settlement { id, value })
}

proptest! {
    #[test]
    fn journals_round_trip_through_the_wire_form(
        seed in any::<u64>(),
        start in any::<i32>(),
        requests in proptest::collection::vec(any::<u64>(), 0..20),
        rounds in proptest::collection::vec((0i64..1_000_000, proptest::collection::vec(settlement(), 0..4)), 0..10),
    ) {
        let journal = Journal {
            seed,
            start_clock_ms: i64::from(start),
            requests: requests.into_iter().map(RequestDigest).collect(),
            rounds: rounds
                .into_iter()
                .map(|(dt, settlements)| Round { clock_ms: i64::from(start) + dt, settlements })
                .collect(),
        };
        let mut cp = checkpoint(owner("s", "r"), 0);
        cp.journal = journal;
        let back = Checkpoint::decode(&cp.encode()).unwrap();
        prop_assert_eq!(back, cp);
    }
}
