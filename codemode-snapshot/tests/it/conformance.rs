//! The suite every fleet backend passes (codemode-store-conformance), on the memory and the directory backends.

use std::sync::Arc;

use codemode_snapshot::{FileBackend, LocalFleet};

#[tokio::test]
async fn the_memory_backend_behaves_as_every_fleet_backend() {
    codemode_store_conformance::run(Arc::new(LocalFleet::memory())).await;
}

#[tokio::test]
async fn the_directory_backend_behaves_as_every_fleet_backend() {
    let dir = tempfile::tempdir().unwrap();
    let files = FileBackend::open(dir.path()).expect("the folder opens");
    codemode_store_conformance::run(Arc::new(LocalFleet::directory(files))).await;
}
