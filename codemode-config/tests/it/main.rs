//! The one integration test binary of codemode-config: activation precedence, validation errors and limit clamps.
//!
//! Table-driven: each case is a config, the run's facts and the expected outcome.

mod limits;
mod resolve;
