//! The API, driven over HTTP against the real service, on SQLite and on
//! PostgreSQL. One binary, one module per capability.

mod helpers;

mod alerts;
mod auth;
mod auth_modes;
mod bad_input;
mod checks;
mod cli;
mod compact;
mod concurrency;
mod conformance;
mod console;
mod crash;
mod defaults;
mod edge;
mod faults;
mod fitness;
mod group_commit;
mod growth;
mod history;
mod hostile;
mod hot_path;
mod jwt;
mod lifecycle;
mod lineage;
mod listing;
mod logs;
mod long_poll;
mod metrics;
mod numbers;
mod openapi;
mod openlineage;
mod outage;
mod outbound;
mod plans;
mod process;
mod push;
mod repairs;
mod retries;
mod seed;
mod statements;
mod tls;
mod versions;
mod wire;
