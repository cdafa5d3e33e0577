//! Integration tests of the executor: source checks, the engine in-process, and the worker process.

mod natives;
mod source;
mod strings;
