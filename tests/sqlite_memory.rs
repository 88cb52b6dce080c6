//! How SQLite allocates once the service has opened a store
//! (`store/sqlite_memory.rs`). Its own test binary: the setting only takes
//! when it comes before the process's first SQLite connection, which in a
//! shared binary another test might open first.

use std::sync::Arc;

use batchgate::clock::SystemClock;
use batchgate::store::{DbOptions, SqlStore};
use libsqlite3_sys as ffi;

#[tokio::test]
async fn sqlite_allocates_without_statistics_and_from_jemalloc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}/registry.db", dir.path().display());
    let store = SqlStore::connect(&url, &DbOptions::default(), Arc::new(SystemClock)).await.expect("store");
    // The library has started and worked: migrations ran, and a read.
    assert!(store.list_datasets().await.expect("a read").is_empty());

    // SAFETY: plain calls into the library; the block is freed once.
    let (size, used) = unsafe {
        let p = ffi::sqlite3_malloc(100);
        assert!(!p.is_null());
        let size = ffi::sqlite3_msize(p);
        ffi::sqlite3_free(p);
        (size, ffi::sqlite3_memory_used())
    };
    assert_eq!(used, 0, "SQLite keeps no memory statistics (its default counts every allocation under one mutex)");
    if cfg!(all(unix, feature = "jemalloc")) {
        // jemalloc's size class for 100 bytes is 112; the C
        // library's malloc, SQLite's default, answers the 100 asked.
        assert_eq!(size, 112, "SQLite allocates from jemalloc");
    }
}
