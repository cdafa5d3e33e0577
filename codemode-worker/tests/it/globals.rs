//! The prelude installs exactly the guest globals codemode-catalog lists: every global an engine holds after
//! install is a standard built-in, a listed guest global or one of the run's tools, and every listed guest global
//! is installed.

use std::collections::BTreeSet;

use codemode_bridge::Journal;
use codemode_catalog::globals::{GUEST_GLOBALS, STANDARD_GLOBALS};
use codemode_vm::protocol::{CellLimits, GuestGlobals, GuestOutcome, Start, WorkerMessage};
use codemode_worker::engine::{Engine, collect_output};
use serde_json::Value;

/// The global object's own string keys after the run's globals (one tool, `probe_tool`) are installed, as a
/// program sees them before it defines anything. Property names only: no getter runs, so the extras stay lazy.
fn installed_globals() -> BTreeSet<String> {
    let (sink, _) = collect_output();
    let mut engine = Engine::new(u64::MAX, sink).expect("the engine starts");
    let globals = GuestGlobals { tools: vec!["probe_tool".into()], ..GuestGlobals::default() };
    let start = Start {
        source: "return Object.getOwnPropertyNames(globalThis)".into(),
        globals: Some(std::sync::Arc::new(globals)),
        globals_key: None,
        limits: CellLimits::default(),
        journal: Journal::default(),
        skip_output: 0,
    };
    match engine.start(start, None) {
        WorkerMessage::Quiescent { outcome: Some(GuestOutcome::Returned { value: Value::Array(names) }), .. } => {
            names.iter().map(|n| n.as_str().expect("property names are strings").to_owned()).collect()
        }
        other => panic!("expected the global names, got {other:?}"),
    }
}

#[test]
fn the_prelude_installs_exactly_the_listed_guest_globals() {
    let installed = crate::strings::on_engine_thread(installed_globals);
    let unlisted: Vec<&str> = installed
        .iter()
        .map(String::as_str)
        .filter(|n| *n != "probe_tool" && !GUEST_GLOBALS.contains(n) && !STANDARD_GLOBALS.contains(n))
        .collect();
    assert!(unlisted.is_empty(), "installed but not in codemode_catalog::globals: {unlisted:?}");
    let missing: Vec<&str> = GUEST_GLOBALS.iter().copied().filter(|n| !installed.contains(*n)).collect();
    assert!(missing.is_empty(), "listed in GUEST_GLOBALS but not installed: {missing:?}");
    assert!(installed.contains("probe_tool"), "the run's tool is a global");
}
