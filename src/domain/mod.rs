//! The rules that decide whether data is fit to consume. No I/O, no HTTP, no SQL:
//! every function here takes what it needs as arguments and returns a decision.

pub mod alerts;
pub mod batch;
pub mod checks;
pub mod deadline;
pub mod names;
pub mod openlineage;
pub mod outbound;
pub mod policy;
pub mod push;
pub mod readiness;
pub mod repair;
pub mod retry;
pub mod staleness;
