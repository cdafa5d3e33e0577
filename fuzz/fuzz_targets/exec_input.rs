//! Fuzz target `exec_input`: arbitrary bytes as exec's input JSON and as program text, through the checks that run
//! in the host before any worker is touched (`parse_exec_input`, then `source::prepare`).
//!
//! It runs in-process and starts no worker: the engine is exercised by the corpus tests. The invariant it holds is
//! that hostile input never panics, overflows a stack or hangs the host; it only fails with an error value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    // The bytes as the whole exec input object.
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        if let Ok(input) = codemode_surface::parse_exec_input(&value) {
            let _ = codemode_source::prepare(&input.code);
        }
    }
    // The bytes as the program text of a well-formed exec input.
    if let Ok(code) = std::str::from_utf8(data) {
        if let Ok(input) = codemode_surface::parse_exec_input(&json!({ "title": "fuzz", "code": code })) {
            let _ = codemode_source::prepare(&input.code);
        }
        let _ = codemode_source::prepare(code);
    }
});
