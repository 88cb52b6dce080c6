//! Settings. The command line (clap) layers them: a flag beats its
//! `BATCHGATE_…` environment variable, which beats the default.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::auth::{AuthMode, JwtSettings};

/// Where the registry lives when nothing says otherwise: a file in the
/// working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://batchgate.db";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// How long the change feed, resolved alerts, sent webhooks and raw
/// OpenLineage events are kept: a year and a month, so that last year's run
/// of the same day can still be looked up.
pub const DEFAULT_RETAIN: &str = "400d";
/// Most database connections one instance opens.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Longest wait for the database before a request answers 503.
pub const DEFAULT_DB_TIMEOUT: &str = "2s";
/// How often leases, deadlines and the outbox are scanned.
pub const DEFAULT_SCAN_INTERVAL: &str = "10s";
/// First wait before a failed webhook delivery is tried again.
pub const DEFAULT_WEBHOOK_BACKOFF: &str = "1s";
/// How long a client may take to send a request head.
pub const DEFAULT_HEADER_TIMEOUT: &str = "10s";
/// At shutdown, longest wait for requests in flight.
pub const DEFAULT_SHUTDOWN_GRACE: &str = "5s";

/// A default given as a command-line flag would be (`2s`, `400d`): the flag
/// and [`Settings::default`] read the same text.
pub fn default_duration(text: &str) -> Duration {
    humantime::parse_duration(text).unwrap_or_else(|e| panic!("the default duration {text:?} does not parse: {e}"))
}

#[derive(Clone)]
pub struct Settings {
    pub database_url: String,
    pub max_connections: u32,
    /// How often the background scans run; `None`: never (tests drive them).
    pub scan_interval: Option<Duration>,
    /// Every alert is POSTed here.
    pub webhook_url: Option<String>,
    /// First wait before a failed webhook delivery is tried again.
    pub webhook_backoff: Duration,
    /// Whether requests must carry a token (`auto`: unless on loopback).
    pub auth: AuthMode,
    /// `/ready` answers without a token.
    pub public_ready: bool,
    /// An admin token given by the environment.
    pub bootstrap_token: Option<String>,
    /// Accept JWTs signed by these keys.
    pub jwt: Option<JwtSettings>,
    /// Hosts webhooks may go to besides the host of `webhook_url`
    /// (`--webhook-allow`; see [`crate::domain::outbound`]).
    pub webhook_allow: Vec<String>,
    /// PEM file of extra CA certificates trusted for https webhooks.
    pub webhook_ca_file: Option<PathBuf>,
    /// How long pruned history is kept; `None`: forever.
    pub retain: Option<Duration>,
    /// Longest a request waits for the database (a connection, a lock)
    /// before it answers 503 `storage_unavailable`; also bounds connecting
    /// at start-up.
    pub db_timeout: Duration,
    /// A client must send a whole request head within this, and a
    /// keep-alive connection closes after this long without one.
    pub header_timeout: Duration,
    /// At shutdown, longest wait for requests in flight.
    pub shutdown_grace: Duration,
    /// TLS on the listener: certificate chain and private key (PEM).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Airflow's base URL: published partitions of datasets with an
    /// `airflow_asset` become asset events there.
    pub airflow_url: Option<String>,
    /// How batchgate signs in to Airflow's API.
    pub airflow_auth: AirflowAuth,
    /// Every change-feed entry is POSTed to each of these as a CloudEvent.
    pub events_urls: Vec<String>,
}

/// Credentials for Airflow's REST API.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum AirflowAuth {
    /// No `Authorization` header (e.g. SimpleAuthManager with all admins).
    #[default]
    None,
    /// A fixed bearer token (`--airflow-token`).
    Token(String),
    /// Exchanged at `POST {airflow}/auth/token` for a JWT, renewed before it expires.
    Password { username: String, password: String },
}

impl fmt::Debug for AirflowAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Token(_) => f.write_str("Token(***)"),
            Self::Password { username, .. } => write!(f, "Password {{ username: {username:?}, password: *** }}"),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            database_url: DEFAULT_DATABASE_URL.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            scan_interval: Some(default_duration(DEFAULT_SCAN_INTERVAL)),
            webhook_url: None,
            webhook_backoff: default_duration(DEFAULT_WEBHOOK_BACKOFF),
            auth: AuthMode::default(),
            public_ready: false,
            bootstrap_token: None,
            jwt: None,
            webhook_allow: Vec::new(),
            webhook_ca_file: None,
            retain: Some(default_duration(DEFAULT_RETAIN)),
            db_timeout: default_duration(DEFAULT_DB_TIMEOUT),
            header_timeout: default_duration(DEFAULT_HEADER_TIMEOUT),
            shutdown_grace: default_duration(DEFAULT_SHUTDOWN_GRACE),
            tls_cert: None,
            tls_key: None,
            airflow_url: None,
            airflow_auth: AirflowAuth::None,
            events_urls: Vec::new(),
        }
    }
}

/// A database URL with its password hidden, for logs and `Debug`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("database_url", &redact(&self.database_url))
            .field("max_connections", &self.max_connections)
            .field("scan_interval", &self.scan_interval)
            .field("webhook_url", &self.webhook_url.as_deref().map(redact))
            .field("webhook_backoff", &self.webhook_backoff)
            .field("auth", &self.auth)
            .field("public_ready", &self.public_ready)
            .field("bootstrap_token", &self.bootstrap_token.as_ref().map(|_| "***"))
            .field("jwt", &self.jwt)
            .field("webhook_allow", &self.webhook_allow)
            .field("webhook_ca_file", &self.webhook_ca_file)
            .field("retain", &self.retain)
            .field("db_timeout", &self.db_timeout)
            .field("header_timeout", &self.header_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("tls_cert", &self.tls_cert)
            .field("airflow_url", &self.airflow_url.as_deref().map(redact))
            .field("airflow_auth", &self.airflow_auth)
            .field("events_urls", &self.events_urls.iter().map(|u| redact(u)).collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_the_logs() {
        assert_eq!(redact("postgres://app:s3cret@db:5432/reg"), "postgres://app:***@db:5432/reg");
        assert_eq!(redact("postgres://postgres@127.0.0.1/x"), "postgres://postgres@127.0.0.1/x");
        assert_eq!(redact("sqlite://batchgate.db"), "sqlite://batchgate.db");
        let s = Settings { database_url: "postgres://u:pw@h/d".into(), ..Settings::default() };
        assert!(!format!("{s:?}").contains("pw"));
        let s = Settings { bootstrap_token: Some("bgt_s3cret".into()), ..Settings::default() };
        assert!(!format!("{s:?}").contains("s3cret"));
        let s = Settings { airflow_auth: AirflowAuth::Token("af-s3cret".into()), ..Settings::default() };
        assert!(!format!("{s:?}").contains("s3cret"));
        let s = Settings {
            airflow_auth: AirflowAuth::Password { username: "bg".into(), password: "pw-s3cret".into() },
            ..Settings::default()
        };
        assert!(!format!("{s:?}").contains("s3cret"));
    }
}
