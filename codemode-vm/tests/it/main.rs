//! Integration tests of the executor: the engine and its encoder in-process, and the worker process.

mod appends;
mod encode;
mod natives;
mod pure;
mod strings;
