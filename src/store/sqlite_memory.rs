//! How the embedded SQLite library allocates, set once per process before
//! its first connection opens.
//!
//! By default SQLite counts every allocation under one process-wide mutex
//! (its memory statistics, which nothing here reads) and allocates with the
//! C library's `malloc`, whose free-list merging showed in the profiles of
//! a history page: a hundred records are some 3,000 values, each copied out
//! of SQLite by sqlx and freed again. Here the statistics are off and, when
//! the service is built with jemalloc (the default feature), SQLite
//! allocates from jemalloc as the rest of the service does. Neither changes
//! what SQLite stores or answers.

use std::os::raw::c_int;
use std::sync::Once;

use libsqlite3_sys as ffi;

/// Configures the library. Runs once; a library already started (another
/// part of the process opened a connection first) keeps its settings, which
/// is only slower. Whatever opens a SQLite connection without
/// [`super::sqlite::connect`] (a test) calls this first.
pub(crate) fn configure() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sqlite3_config` must run before the library starts and
        // while no other thread uses it; every connection the service opens
        // comes after this `Once`. Called later it answers SQLITE_MISUSE
        // and changes nothing.
        let statistics = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as c_int) };
        let allocator = jemalloc::install();
        tracing::debug!(statistics, allocator, "SQLite's memory configured (0 is done)");
    });
}

#[cfg(all(unix, feature = "jemalloc"))]
mod jemalloc {
    use std::os::raw::c_void;

    use super::*;
    use tikv_jemalloc_sys as je;

    unsafe extern "C" fn malloc(n: c_int) -> *mut c_void {
        // SQLite never asks for a negative size; answer one with "no memory".
        match usize::try_from(n) {
            Ok(n) => unsafe { je::malloc(n.max(1)) },
            Err(_) => std::ptr::null_mut(),
        }
    }

    unsafe extern "C" fn free(p: *mut c_void) {
        unsafe { je::free(p) }
    }

    unsafe extern "C" fn realloc(p: *mut c_void, n: c_int) -> *mut c_void {
        match usize::try_from(n) {
            Ok(n) => unsafe { je::realloc(p, n.max(1)) },
            Err(_) => std::ptr::null_mut(),
        }
    }

    unsafe extern "C" fn size(p: *mut c_void) -> c_int {
        // SQLite allocations are far below 2 GiB (its own limit is 2^31 - 256).
        c_int::try_from(unsafe { je::malloc_usable_size(p) }).unwrap_or(c_int::MAX)
    }

    unsafe extern "C" fn roundup(n: c_int) -> c_int {
        match usize::try_from(n) {
            Ok(n) => c_int::try_from(unsafe { je::nallocx(n.max(1), 0) }).unwrap_or(n as c_int),
            Err(_) => n,
        }
    }

    unsafe extern "C" fn init(_: *mut c_void) -> c_int {
        ffi::SQLITE_OK
    }

    unsafe extern "C" fn shutdown(_: *mut c_void) {}

    /// Hands SQLite jemalloc's functions; SQLite copies the table.
    pub(super) fn install() -> c_int {
        let methods = ffi::sqlite3_mem_methods {
            xMalloc: Some(malloc),
            xFree: Some(free),
            xRealloc: Some(realloc),
            xSize: Some(size),
            xRoundup: Some(roundup),
            xInit: Some(init),
            xShutdown: Some(shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: as for the statistics (see `configure`); SQLite copies
        // `methods` before returning.
        unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods as *const ffi::sqlite3_mem_methods) }
    }
}

#[cfg(not(all(unix, feature = "jemalloc")))]
mod jemalloc {
    use super::*;

    /// Built without jemalloc: SQLite keeps the C library's `malloc`.
    pub(super) fn install() -> c_int {
        ffi::SQLITE_OK
    }
}
