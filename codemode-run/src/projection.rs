//! The guest globals of a run: what a worker installs for a catalog, and the projection (the callable names) a
//! checkpoint carries so that a resume by replay installs the names the program started with.
//!
//! Names only travel: a resumed run's globals are its projection's, over the resuming host's declaration files and
//! handles, and each call reaches the resuming host's catalog, which refuses (catchably) a tool it no longer has.

use codemode_catalog::Catalog;
use codemode_snapshot::{ProjectedServer, Projection};
use codemode_vm::protocol::{GuestApiFile, GuestGlobals, GuestNamespace};

/// The globals every context of `catalog`'s workers is built with.
pub fn guest_globals(catalog: &Catalog) -> GuestGlobals {
    projected_globals(catalog, &projection_of(catalog))
}

/// The callable names `catalog` gives a program: its tool globals and its `MCP` namespace.
pub fn projection_of(catalog: &Catalog) -> Projection {
    let tools = catalog.entries().iter().map(|e| e.callable_name.clone()).collect();
    let mcp = catalog
        .mcp_servers()
        .iter()
        .map(|server| ProjectedServer {
            global: server.global_name.clone(),
            server: server.name.clone(),
            tools: server.tools.iter().map(|t| (t.js_name.clone(), t.name.clone())).collect(),
        })
        .collect();
    Projection { tools, mcp }
}

/// The globals of a program given `projection`'s names, with `catalog`'s declaration files and handles.
pub fn projected_globals(catalog: &Catalog, projection: &Projection) -> GuestGlobals {
    let mcp = projection
        .mcp
        .iter()
        .map(|server| GuestNamespace {
            global: server.global.clone(),
            server: server.server.clone(),
            tools: server.tools.clone(),
        })
        .collect();
    let api_files = catalog
        .api_files_with_content()
        .into_iter()
        .map(|f| GuestApiFile { path: f.path, description: f.description, content: f.content })
        .collect();
    let handles = catalog
        .all()
        .into_iter()
        .map(|h| serde_json::to_value(h).expect("handle metadata serializes to JSON"))
        .collect();
    GuestGlobals { tools: projection.tools.clone(), mcp, api_files, handles }
}
