//! Integration tests of the executor: the engine and its encoder in-process, and the worker process.

mod admission;
mod appends;
mod budget;
mod confine;
mod encode;
mod globals;
mod guest_api;
mod handshake;
mod natives;
mod pool_sizing;
mod pure;
mod realms;
mod strings;
