//! The `batchgate` command: `serve` (the default) and `migrate` run the
//! service; `batch …`, `wait` and the commands for people (`ready`,
//! `batches`, `partitions`, `invalidate`, `repair`, `alerts`, `dataset`) are
//! clients of a running one ([`batchgate::client`]).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use batchgate::auth::{AuthMode, JwtSettings};
use batchgate::client::cli::{self as client, BatchArgs, WaitArgs};
use batchgate::client::people::{
    self, AlertsArgs, BatchesArgs, DatasetArgs, InvalidateArgs, PartitionsArgs, ReadyArgs, RepairArgs,
};
use batchgate::clock::SystemClock;
use batchgate::config::{
    redact, AirflowAuth, Settings, DEFAULT_DATABASE_URL, DEFAULT_DB_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_LISTEN,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_RETAIN, DEFAULT_SCAN_INTERVAL, DEFAULT_SHUTDOWN_GRACE, DEFAULT_WEBHOOK_BACKOFF,
};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "batchgate", version, about = "The registry and readiness gate for batch data")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default when no command is given).
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(MigrateArgs),
    /// Start, commit, fail or heartbeat a batch on a running service: exit 0
    /// done, 2 invalid input, 3 refused or rejected, 4 service unreachable.
    Batch(BatchArgs),
    /// Block until partitions are ready: exit 0 ready, 5 timed out, 6
    /// rejected (with --fail-on-rejected), 4 service unreachable.
    Wait(WaitArgs),
    /// Ask once whether partitions are ready: exit 0 ready, 1 not ready (the
    /// reason on stdout), 4 service unreachable.
    Ready(ReadyArgs),
    /// List batches, or show one batch's record.
    Batches(BatchesArgs),
    /// The partitions of a dataset, with their fitness as /ready sees it.
    Partitions(PartitionsArgs),
    /// Take a partition out of service until a new batch publishes it.
    Invalidate(InvalidateArgs),
    /// Plan a repair, or show a plan and its progress.
    Repair(RepairArgs),
    /// Open (or resolved) alerts.
    Alerts(AlertsArgs),
    /// Set a dataset's policy.
    Dataset(DatasetArgs),
    /// Make, list or revoke API tokens, directly in the database.
    Token(TokenArgs),
    /// Print the OpenAPI document of this build's API, generated from its
    /// types (`batchgate openapi > openapi/openapi.json` updates the
    /// committed copy).
    Openapi,
}

#[derive(Args)]
struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token and print it once on stdout (only its hash is kept).
    Create {
        #[command(flatten)]
        db: DbArgs,
        /// A name for the token (who holds it), e.g. team-sales.
        #[arg(long)]
        name: String,
        /// read, produce:<glob>, operate:<glob> or admin; repeatable.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Lifetime, e.g. 90d; without it the token does not expire.
        #[arg(long)]
        expires: Option<String>,
    },
    /// List tokens: name, scopes, created, expires, last used (never the secret).
    List {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke a token: it stops working at once, on every replica.
    Revoke {
        #[command(flatten)]
        db: DbArgs,
        name: String,
    },
}

#[derive(Args, Clone)]
struct DbArgs {
    /// Database URL: sqlite://FILE or postgres://USER@HOST/DB.
    #[arg(long = "db", env = "BATCHGATE_DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
    database_url: String,
    /// Longest wait for the database (connecting, a pooled connection, a
    /// lock) before a request answers 503 storage_unavailable.
    #[arg(long, env = "BATCHGATE_DB_TIMEOUT", default_value = DEFAULT_DB_TIMEOUT, value_parser = humantime::parse_duration)]
    db_timeout: Duration,
}

/// How the server commands write their log.
#[derive(Args, Clone)]
struct LogArgs {
    /// Log line format: `text` (human-readable; coloured only on a terminal)
    /// or `json` (one object a line). Levels come from `RUST_LOG`.
    #[arg(long, env = "BATCHGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Clone)]
struct MigrateArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Args, Clone)]
struct ServeArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    log: LogArgs,
    /// Address to listen on.
    #[arg(long, env = "BATCHGATE_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Most database connections this instance opens.
    #[arg(long, env = "BATCHGATE_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: u32,
    /// How often leases, deadlines and the webhook outbox are scanned.
    #[arg(long, env = "BATCHGATE_SCAN_INTERVAL", default_value = DEFAULT_SCAN_INTERVAL, value_parser = humantime::parse_duration)]
    scan_interval: Duration,
    /// Every alert is POSTed here as JSON.
    #[arg(long, env = "BATCHGATE_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// First wait before a failed webhook delivery is retried (doubling, at most 5 minutes).
    #[arg(long, env = "BATCHGATE_WEBHOOK_BACKOFF", default_value = DEFAULT_WEBHOOK_BACKOFF, value_parser = humantime::parse_duration)]
    webhook_backoff: Duration,
    /// Require a token: `required`, `off`, or `auto` (off on a loopback
    /// listen address, required on any other).
    #[arg(long, env = "BATCHGATE_AUTH", value_enum, default_value_t = AuthMode::default())]
    auth: AuthMode,
    /// Let `/ready` answer without a token (for sensors that cannot send headers).
    #[arg(long, env = "BATCHGATE_PUBLIC_READY")]
    public_ready: bool,
    /// An admin token given by the environment (for containers that cannot
    /// run `token create` first).
    #[arg(long, env = "BATCHGATE_BOOTSTRAP_TOKEN", hide_env_values = true)]
    bootstrap_token: Option<String>,
    /// Accept JWTs signed by the keys of this JWKS (a file or a URL).
    #[arg(long, env = "BATCHGATE_JWT_JWKS")]
    jwt_jwks: Option<String>,
    /// The `iss` a JWT must carry.
    #[arg(long, env = "BATCHGATE_JWT_ISSUER", requires = "jwt_jwks")]
    jwt_issuer: Option<String>,
    /// The `aud` a JWT must carry.
    #[arg(long, env = "BATCHGATE_JWT_AUDIENCE", requires = "jwt_jwks")]
    jwt_audience: Option<String>,
    /// Hosts webhooks may be sent to, comma-separated: `hooks.corp.example`,
    /// `*.corp.example`, `10.0.0.7:8080`. The host of --webhook-url is always
    /// allowed; a dataset's webhook_url elsewhere is refused.
    #[arg(long, env = "BATCHGATE_WEBHOOK_ALLOW", value_delimiter = ',')]
    webhook_allow: Vec<String>,
    /// PEM file with CA certificates trusted for https webhooks, besides the system's.
    #[arg(long, env = "BATCHGATE_WEBHOOK_CA_FILE")]
    webhook_ca_file: Option<std::path::PathBuf>,
    /// How long the change feed, resolved alerts, sent webhooks and raw
    /// OpenLineage events are kept (batches are kept forever); 0: forever.
    #[arg(long, env = "BATCHGATE_RETAIN", default_value = DEFAULT_RETAIN, value_parser = humantime::parse_duration)]
    retain: Duration,
    /// A client must send a whole request head within this; a keep-alive
    /// connection idle this long is closed.
    #[arg(long, env = "BATCHGATE_HEADER_TIMEOUT", default_value = DEFAULT_HEADER_TIMEOUT, value_parser = humantime::parse_duration)]
    header_timeout: Duration,
    /// On SIGTERM, longest wait for requests in flight before exiting.
    #[arg(long, env = "BATCHGATE_SHUTDOWN_GRACE", default_value = DEFAULT_SHUTDOWN_GRACE, value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,
    /// Serve HTTPS with this certificate chain (PEM; needs --tls-key).
    #[arg(long, env = "BATCHGATE_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "BATCHGATE_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Airflow's base URL (e.g. `http://airflow:8080`): each published
    /// partition of a dataset with an `airflow_asset` becomes an asset event there.
    #[arg(long, env = "BATCHGATE_AIRFLOW_URL")]
    airflow_url: Option<String>,
    /// A bearer token for Airflow's API.
    #[arg(long, env = "BATCHGATE_AIRFLOW_TOKEN", hide_env_values = true, conflicts_with = "airflow_username")]
    airflow_token: Option<String>,
    /// Airflow user whose password is exchanged at `POST {airflow}/auth/token` for a JWT.
    #[arg(long, env = "BATCHGATE_AIRFLOW_USERNAME", requires = "airflow_password")]
    airflow_username: Option<String>,
    /// The password of --airflow-username.
    #[arg(long, env = "BATCHGATE_AIRFLOW_PASSWORD", hide_env_values = true, requires = "airflow_username")]
    airflow_password: Option<String>,
    /// Every change-feed entry is POSTed here as a CloudEvent (repeatable;
    /// the environment variable is comma-separated).
    #[arg(long = "events-url", env = "BATCHGATE_EVENTS_URL", value_delimiter = ',')]
    events_urls: Vec<String>,
}

/// jemalloc: memory a buffer reserved but never wrote stays untouched, so an
/// idle connection costs the bytes it holds, not its buffers' capacity.
#[cfg(all(unix, feature = "jemalloc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Some(Command::Batch(args)) => client::run_batch(args).await.into(),
        Some(Command::Wait(args)) => client::run_wait(args).await.into(),
        Some(Command::Ready(args)) => people::run_ready(args).await.into(),
        Some(Command::Batches(args)) => people::run_batches(args).await.into(),
        Some(Command::Partitions(args)) => people::run_partitions(args).await.into(),
        Some(Command::Invalidate(args)) => people::run_invalidate(args).await.into(),
        Some(Command::Repair(args)) => people::run_repair(args).await.into(),
        Some(Command::Alerts(args)) => people::run_alerts(args).await.into(),
        Some(Command::Dataset(args)) => people::run_dataset(args).await.into(),
        Some(Command::Migrate(args)) => report(migrate(args).await),
        Some(Command::Token(args)) => report(token(args.command).await),
        Some(Command::Serve(args)) => report(serve(args).await),
        Some(Command::Openapi) => {
            print!("{}", batchgate::api::openapi::json());
            ExitCode::SUCCESS
        }
        None => report(serve(ServeArgs::parse_from_env()).await),
    }
}

/// Exits as `fn main() -> anyhow::Result<()>` would: 1, with the error and
/// its causes.
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}

/// Logs, for the server commands only: a client command's output is for the
/// script that runs it.
fn init_tracing(log: &LogArgs) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter);
    match log.log_format {
        // Colour codes only for a person at a terminal, never into a file or a pipe.
        LogFormat::Text => fmt.with_ansi(std::io::stdout().is_terminal()).init(),
        // Fields at the top level of each object, beside `message`.
        LogFormat::Json => fmt.json().flatten_event(true).init(),
    }
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    init_tracing(&args.log);
    let db = args.db;
    batchgate::store::SqlStore::migrate(&db.database_url, db.db_timeout).await?;
    tracing::info!(db = %redact(&db.database_url), "migrations applied");
    Ok(())
}

/// `batchgate token …`: straight on the database, for whoever holds its URL
/// (the first admin token, or when the service is down).
async fn token(command: TokenCommand) -> anyhow::Result<()> {
    use batchgate::store::SqlStore;
    let open = |db: DbArgs| async move {
        let opts = batchgate::store::DbOptions { timeout: db.db_timeout, ..Default::default() };
        SqlStore::connect(&db.database_url, &opts, Arc::new(SystemClock)).await
    };
    match command {
        TokenCommand::Create { db, name, scopes, expires } => {
            let store = open(db).await?;
            let lifetime = expires
                .map(|e| batchgate::auth::tokens::parse_lifetime(&e).map_err(|m| anyhow::anyhow!("--expires: {m}")))
                .transpose()?;
            let now = batchgate::clock::Clock::now(&SystemClock);
            let (secret, record) = batchgate::auth::issue_token(store.as_ref(), now, &name, &scopes, lifetime)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            store.record_audit(&[cli_audit("token.create", &record.name)]).await?;
            eprintln!(
                "token {:?} created (scopes: {}; expires: {}); it is shown only this once:",
                record.name,
                record.scopes.0.join(" "),
                record.expires_at.map_or("never".to_owned(), |t| t.to_rfc3339())
            );
            println!("{secret}");
        }
        TokenCommand::List { db } => {
            let store = open(db).await?;
            let tokens = store.list_tokens().await?;
            let when = |t: Option<chrono::DateTime<chrono::Utc>>, none: &str| {
                t.map_or(none.to_owned(), |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            };
            println!("{:<24} {:<20} {:<20} {:<20} SCOPES", "NAME", "CREATED", "EXPIRES", "LAST USED");
            for t in tokens {
                println!(
                    "{:<24} {:<20} {:<20} {:<20} {}",
                    t.name,
                    when(Some(t.created_at), ""),
                    when(t.expires_at, "never"),
                    when(t.last_used_at, "never"),
                    t.scopes.0.join(" ")
                );
            }
        }
        TokenCommand::Revoke { db, name } => {
            let store = open(db).await?;
            anyhow::ensure!(store.revoke_token(&name).await?, "no token named {name:?}");
            store.record_audit(&[cli_audit("token.revoke", &name)]).await?;
            eprintln!("token {name:?} revoked");
        }
    }
    Ok(())
}

/// The audit row of a token change made from the command line.
fn cli_audit(action: &str, name: &str) -> batchgate::store::AuditEntry {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    batchgate::store::AuditEntry {
        actor: format!("cli:{user}"),
        request_id: "-".into(),
        action: action.into(),
        method: "CLI".into(),
        path: format!("token/{name}"),
        route: None,
        dataset: None,
        status: 200,
    }
}

impl ServeArgs {
    /// `batchgate` with no command: serve, reading the environment as `serve` would.
    fn parse_from_env() -> Self {
        #[derive(Parser)]
        struct Bare {
            #[command(flatten)]
            serve: ServeArgs,
        }
        // Reads the BATCHGATE_… variables; a bad value exits with clap's message.
        Bare::parse_from(["batchgate"]).serve
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_tracing(&args.log);
    let settings = Settings {
        database_url: args.db.database_url,
        max_connections: args.max_connections,
        scan_interval: Some(args.scan_interval).filter(|d| !d.is_zero()),
        webhook_url: args.webhook_url.filter(|u| !u.is_empty()),
        webhook_backoff: args.webhook_backoff,
        auth: args.auth,
        public_ready: args.public_ready,
        bootstrap_token: args.bootstrap_token.filter(|t| !t.is_empty()),
        jwt: args.jwt_jwks.filter(|j| !j.is_empty()).map(|jwks| JwtSettings {
            jwks,
            issuer: args.jwt_issuer,
            audience: args.jwt_audience,
        }),
        webhook_allow: args.webhook_allow,
        webhook_ca_file: args.webhook_ca_file,
        retain: Some(args.retain).filter(|d| !d.is_zero()),
        db_timeout: args.db.db_timeout,
        header_timeout: args.header_timeout,
        shutdown_grace: args.shutdown_grace,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        airflow_url: args.airflow_url.filter(|u| !u.is_empty()),
        airflow_auth: match (args.airflow_token.filter(|t| !t.is_empty()), args.airflow_username, args.airflow_password)
        {
            (Some(token), _, _) => AirflowAuth::Token(token),
            (None, Some(username), Some(password)) => AirflowAuth::Password { username, password },
            _ => AirflowAuth::None,
        },
        events_urls: args.events_urls.into_iter().map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect(),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(settings = ?settings, "starting");
    batchgate::serve(settings, listener, Arc::new(SystemClock), shutdown_signal()).await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}
