//! The one integration test binary of codemode-surface: the exec/wait input contract, the schemas, the payload
//! check, and the surface built on the real 130-tool catalog (snapshots and the prompt-size target).

mod catalog130;
mod input;
mod payload;
