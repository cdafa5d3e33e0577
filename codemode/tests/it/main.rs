//! Integration tests of the facade: real `CodeMode` instances running cells in real worker processes.

mod activity;
mod approvals;
mod attach;
mod bridge_roundtrip;
mod client_tools;
mod corpus;
mod embed;
mod exec;
mod guest_api;
mod harness;
mod hold;
mod host_integration;
mod lifecycle;
mod memory;
mod support;
mod tools_change;
mod wait;
