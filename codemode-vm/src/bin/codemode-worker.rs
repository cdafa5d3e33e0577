//! The bundled worker executable: serves cells for a host's worker pool over stdin/stdout.
//!
//! It is started by `codemode_vm::pool`, never by hand; its allocator counts bytes so the guest's memory limit holds.

#[global_allocator]
static ALLOCATOR: codemode_vm::worker::CountingAlloc = codemode_vm::worker::CountingAlloc;

fn main() {
    codemode_vm::worker::run_worker()
}
