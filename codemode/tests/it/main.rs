//! Integration tests of the facade: real `CodeMode` instances running cells in real worker processes.

mod bridge_roundtrip;
mod corpus;
mod embed;
mod exec;
mod harness;
mod host_integration;
mod support;
mod wait;
