//! The bundled worker executable: serves cells for a host's worker pool over stdin/stdout.
//!
//! It is started by `codemode_vm::pool` (`codemode-vm`, the host side), never by hand; its allocator counts bytes so the guest's memory limit holds.

#[global_allocator]
static ALLOCATOR: codemode_worker::worker::CountingAlloc = codemode_worker::worker::CountingAlloc;

fn main() {
    codemode_worker::worker::run_worker()
}
