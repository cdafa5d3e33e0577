//! The gateway library from outside: `examples/embed-gateway` (its own workspace, path dependencies on the facade and
//! this crate) serves its own tool beside the real npm MCP servers, driven by rmcp's client over stdio.

mod embed;
