//! Integration tests of the facade: real worker processes, a real in-test tool host, exec and wait end to end.

mod exec;
mod support;
mod wait;
