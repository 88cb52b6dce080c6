//! The client commands for people at a terminal: `batchgate ready`,
//! `batches list|show`, `partitions`, `invalidate`, `repair plan|show`,
//! `alerts` and `dataset set`. Each asks once and prints a table (or, with
//! `--json`, the service's answer as it came); errors go to stderr with the
//! exit statuses of [`Exit`].

use clap::{ArgGroup, Args, Subcommand};
use serde_json::Value;

use super::cli::{ServiceArgs, TargetArgs};
use super::commands::{failed, print, Output};
use super::table::{cell, Table};
use crate::domain::policy::{self, Tier, WriteMode};

use super::{Client, Deadline, Exit, InvalidateRequest, PolicyRequest, Readiness, RepairRequest, Target};
use crate::domain::readiness::{self, PartitionState, Standing};

fn output(json: bool) -> Output {
    if json {
        Output::Json
    } else {
        Output::Text
    }
}

/// Builds the client, or reports why it cannot.
fn client(service: &ServiceArgs) -> Result<Client, Exit> {
    service.client()
}

/// `batchgate ready`.
#[derive(Args)]
#[command(group(ArgGroup::new("target").required(true).args(["dataset", "task"])))]
#[command(group(ArgGroup::new("which").args(["partitions", "dt"])))]
pub struct ReadyArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(flatten)]
    target: TargetArgs,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

/// Asks `/ready` once: exit 0 ready, 1 not ready.
pub async fn run_ready(args: ReadyArgs) -> Exit {
    let client = match client(&args.service) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let target: Target = args.target.target();
    let answer = match client.ready_answer(&target).await {
        Ok(a) => a,
        Err(e) => return failed(&format!("cannot ask whether {target} is ready"), &e),
    };
    let (readiness, body) = answer;
    match readiness {
        Readiness::Ready(_) => {
            print(output(args.json), &body, || {
                let mut t = Table::new(&["PARTITION", "VERSION", "ROWS", "BATCH"]);
                for p in body["partitions"].as_array().into_iter().flatten() {
                    t.row(vec![
                        cell(&p["partition"]),
                        cell(&p["version"]),
                        cell(&p["row_count"]),
                        cell(&p["batch_id"]),
                    ]);
                }
                format!("{target} is ready\n{}", t.render().trim_end())
            });
            Exit::Success
        }
        Readiness::NotReady(nr) => {
            print(output(args.json), &body, || {
                let mut s = format!("{target} is not ready: {}", nr.reason);
                if let Some(p) = &nr.partition {
                    s.push_str(&format!(" on {p}"));
                }
                if let Some(b) = &nr.batch_id {
                    s.push_str(&format!(" (batch {b})"));
                }
                if let Some(up) = body.get("upstream").filter(|u| u.is_object()) {
                    s.push_str(&format!(
                        "\n  upstream {} {}: built on version {}, now {}",
                        cell(&up["dataset"]),
                        cell(&up["partition"]),
                        cell(&up["built_on_version"]),
                        cell(&up["current_version"])
                    ));
                }
                s
            });
            Exit::NotReady
        }
    }
}

/// `batchgate batches …`.
#[derive(Args)]
pub struct BatchesArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(subcommand)]
    command: BatchesCommand,
}

#[derive(Subcommand)]
enum BatchesCommand {
    /// Batches matching every filter given, newest first.
    List(ListBatchesArgs),
    /// One batch's whole record: partitions, inputs, checks, failure.
    Show(ShowBatchArgs),
}

#[derive(Args)]
struct ListBatchesArgs {
    #[arg(long)]
    task: Option<String>,
    #[arg(long)]
    dataset: Option<String>,
    /// The data date, YYYY-MM-DD.
    #[arg(long)]
    dt: Option<String>,
    /// running, published, rejected, failed, abandoned or superseded.
    #[arg(long)]
    state: Option<String>,
    /// At most this many (the service's default when not given).
    #[arg(long)]
    limit: Option<u32>,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ShowBatchArgs {
    batch_id: String,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

/// Query pairs of the options given.
fn query(pairs: &[(&'static str, Option<String>)]) -> Vec<(&'static str, String)> {
    pairs.iter().filter_map(|(k, v)| v.clone().map(|v| (*k, v))).collect()
}

pub async fn run_batches(args: BatchesArgs) -> Exit {
    let client = match client(&args.service) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    match args.command {
        BatchesCommand::List(a) => {
            let q = query(&[
                ("task", a.task),
                ("dataset", a.dataset),
                ("dt", a.dt),
                ("state", a.state),
                ("limit", a.limit.map(|n| n.to_string())),
            ]);
            match client.get::<Value>(&["v1", "batches"], &q).await {
                Ok(answer) => {
                    print(output(a.json), &answer.body, || {
                        let mut t = Table::new(&["BATCH", "TASK", "DATASET", "DT", "STATE", "PARTITIONS", "STARTED"]);
                        for b in answer.body["items"].as_array().into_iter().flatten() {
                            let parts: Vec<Value> = b["partitions"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|p| p["partition"].clone())
                                .collect();
                            t.row(vec![
                                cell(&b["batch_id"]),
                                cell(&b["task"]),
                                cell(&b["dataset"]),
                                cell(&b["dt"]),
                                cell(&b["state"]),
                                cell(&Value::Array(parts)),
                                cell(&b["started_at"]),
                            ]);
                        }
                        more(t, &answer.body)
                    });
                    Exit::Success
                }
                Err(e) => failed("cannot list batches", &e),
            }
        }
        BatchesCommand::Show(a) => match client.get::<Value>(&["v1", "batches", &a.batch_id], &[]).await {
            Ok(answer) => {
                print(output(a.json), &answer.body, || show_batch(&answer.body));
                Exit::Success
            }
            Err(e) => failed(&format!("cannot show batch {}", a.batch_id), &e),
        },
    }
}

/// A table, and a line saying there is more when the page has a cursor.
fn more(t: Table, page: &Value) -> String {
    let mut s = if t.is_empty() { "(none)\n".to_owned() } else { t.render() };
    if let Some(c) = page["next_cursor"].as_str() {
        s.push_str(&format!("(more: the next page starts at cursor {c})\n"));
    }
    s.trim_end().to_owned()
}

fn show_batch(b: &Value) -> String {
    let mut s = String::new();
    for (label, key) in [
        ("batch", "batch_id"),
        ("task", "task"),
        ("dataset", "dataset"),
        ("dt", "dt"),
        ("state", "state"),
        ("trigger", "trigger"),
        ("run_ref", "run_ref"),
        ("started_at", "started_at"),
        ("decided_at", "decided_at"),
        ("lease_expires_at", "lease_expires_at"),
        ("marker", "marker"),
        ("repair_id", "repair_id"),
        ("superseded_by", "superseded_by"),
    ] {
        s.push_str(&format!("{label:<17}{}\n", cell(&b[key])));
    }
    if let Some(f) = b["failure"].as_object() {
        s.push_str(&format!(
            "{:<17}at {} ({}): {}\n",
            "failure",
            cell(&f["stage"].clone()),
            cell(&f.get("category").cloned().unwrap_or(Value::Null)),
            cell(&f.get("message").cloned().unwrap_or(Value::Null))
        ));
    }
    let mut t = Table::new(&["PARTITION", "VERSION", "ROWS WRITTEN", "ROW COUNT"]);
    for p in b["partitions"].as_array().into_iter().flatten() {
        t.row(vec![cell(&p["partition"]), cell(&p["version"]), cell(&p["rows_written"]), cell(&p["row_count"])]);
    }
    s.push_str(&format!("\n{}", t.render()));
    let inputs = b["inputs"].as_array().cloned().unwrap_or_default();
    if !inputs.is_empty() {
        let mut t = Table::new(&["INPUT DATASET", "PARTITION", "VERSION READ", "BATCH"]);
        for i in &inputs {
            t.row(vec![cell(&i["dataset"]), cell(&i["partition"]), cell(&i["version"]), cell(&i["batch_id"])]);
        }
        s.push_str(&format!("\n{}", t.render()));
    }
    let checks = b["checks"].as_array().cloned().unwrap_or_default();
    if !checks.is_empty() {
        let mut t = Table::new(&["CHECK", "PARTITION", "STATUS", "OBSERVED", "EXPECTED"]);
        for c in &checks {
            t.row(vec![
                cell(&c["name"]),
                cell(&c["partition"]),
                cell(&c["status"]),
                cell(&c["observed"]),
                cell(&c["expected"]),
            ]);
        }
        s.push_str(&format!("\n{}", t.render()));
    }
    s.trim_end().to_owned()
}

/// `batchgate partitions`.
#[derive(Args)]
pub struct PartitionsArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[arg(long)]
    dataset: String,
    /// From this data date on, YYYY-MM-DD.
    #[arg(long)]
    from: Option<String>,
    /// Up to this data date, YYYY-MM-DD.
    #[arg(long)]
    to: Option<String>,
    #[arg(long)]
    limit: Option<u32>,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

pub async fn run_partitions(args: PartitionsArgs) -> Exit {
    let client = match client(&args.service) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let q = query(&[
        ("dataset", Some(args.dataset.clone())),
        ("from", args.from),
        ("to", args.to),
        ("limit", args.limit.map(|n| n.to_string())),
    ]);
    match client.get::<Value>(&["v1", "partitions"], &q).await {
        Ok(answer) => {
            print(output(args.json), &answer.body, || {
                let mut t = Table::new(&["PARTITION", "DT", "STATE", "VERSION", "ROWS", "BATCH", "PUBLISHED"]);
                for p in answer.body["items"].as_array().into_iter().flatten() {
                    t.row(vec![
                        cell(&p["partition"]),
                        cell(&p["dt"]),
                        fitness(p).to_owned(),
                        cell(&p["version"]),
                        cell(&p["row_count"]),
                        cell(&p["published_batch_id"]),
                        cell(&p["published_at"]),
                    ]);
                }
                more(t, &answer.body)
            });
            Exit::Success
        }
        Err(e) => failed(&format!("cannot list the partitions of {}", args.dataset), &e),
    }
}

/// A partition's fitness as `/ready` judges it (the one rule,
/// [`readiness::fitness`]): `ready`, or why not.
fn fitness(p: &Value) -> &'static str {
    let Some(state) = p["state"].as_str().and_then(|s| s.parse::<PartitionState>().ok()) else {
        return "unknown";
    };
    let invalidated = !p["invalidated_reason"].is_null();
    let stale_upstream = !p["stale_upstream"].is_null();
    readiness::fitness(Some(Standing { state, invalidated, stale_upstream })).as_str()
}

/// `batchgate invalidate`.
#[derive(Args)]
pub struct InvalidateArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[arg(long)]
    dataset: String,
    #[arg(long)]
    partition: String,
    /// Why it is taken out of service, for people.
    #[arg(long)]
    reason: String,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

pub async fn run_invalidate(args: InvalidateArgs) -> Exit {
    let client = match client(&args.service) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let req = InvalidateRequest { reason: args.reason };
    match client.invalidate(&args.dataset, &args.partition, &req).await {
        Ok(answer) => {
            print(output(args.json), &answer.body, || {
                format!("{} {} invalidated: not ready until a new batch publishes it", args.dataset, args.partition)
            });
            Exit::Success
        }
        Err(e) => failed(&format!("cannot invalidate {} {}", args.dataset, args.partition), &e),
    }
}

/// `batchgate repair …`.
#[derive(Args)]
pub struct RepairArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(subcommand)]
    command: RepairCommand,
}

#[derive(Subcommand)]
enum RepairCommand {
    /// Plan a repair: scope, identity, retry boundary and downstream of
    /// each partition; prints the plan's id first.
    Plan(PlanArgs),
    /// A plan with its progress.
    Show(ShowRepairArgs),
}

#[derive(Args)]
struct PlanArgs {
    #[arg(long)]
    dataset: String,
    /// A partition to repair; repeat for several.
    #[arg(long = "partition", value_name = "PARTITION", required = true)]
    partitions: Vec<String>,
    /// rebuild, resume or compensate.
    #[arg(long)]
    action: String,
    /// Why the repair is needed.
    #[arg(long)]
    reason: String,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ShowRepairArgs {
    id: String,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

pub async fn run_repair(args: RepairArgs) -> Exit {
    let client = match client(&args.service) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    match args.command {
        RepairCommand::Plan(a) => {
            let req =
                RepairRequest { dataset: a.dataset, partitions: a.partitions, action: a.action, reason: a.reason };
            match client.create_repair(&req).await {
                Ok(answer) => {
                    print(output(a.json), &answer.body, || show_repair(&answer.body));
                    Exit::Success
                }
                Err(e) => failed(&format!("cannot plan a repair of {}", req.dataset), &e),
            }
        }
        RepairCommand::Show(a) => match client.get::<Value>(&["v1", "repairs", &a.id], &[]).await {
            Ok(answer) => {
                print(output(a.json), &answer.body, || show_repair(&answer.body));
                Exit::Success
            }
            Err(e) => failed(&format!("cannot show repair {}", a.id), &e),
        },
    }
}

fn show_repair(plan: &Value) -> String {
    let mut s = format!(
        "repair {} ({}): {} {} because {}\n",
        cell(&plan["id"]),
        cell(&plan["state"]),
        cell(&plan["action"]),
        cell(&plan["dataset"]),
        cell(&plan["reason"])
    );
    let progress = &plan["progress"];
    let mut t = Table::new(&[
        "PARTITION",
        "STATE",
        "BOUNDARY",
        "RECOMMENDED",
        "LATEST BATCH AT PLAN",
        "ROWS BEFORE",
        "ROWS AFTER",
        "DONE",
    ]);
    for p in plan["partitions"].as_array().into_iter().flatten() {
        let done = progress["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["partition"] == p["partition"])
            .cloned()
            .unwrap_or(Value::Null);
        // Its fitness now when the answer has progress, else at the plan.
        let state = if done.is_null() { &p["state"] } else { &done["state"] };
        t.row(vec![
            cell(&p["partition"]),
            cell(state),
            cell(&p["retry_boundary"]["state"]),
            cell(&p["retry_boundary"]["recommended_action"]),
            cell(&p["retry_boundary"]["latest_batch_id"]),
            cell(&p["identity"]["published"]["row_count"]),
            cell(&done["row_count"]["after"]),
            cell(&done["done"]),
        ]);
    }
    s.push_str(&format!("\n{}", t.render()));
    let downstream: Vec<Value> = match progress["downstream"].as_array() {
        Some(d) => d.clone(),
        None => plan["downstream"].as_array().cloned().unwrap_or_default(),
    };
    if !downstream.is_empty() {
        let mut t = Table::new(&["DOWNSTREAM", "PARTITION", "STATE", "OWNER", "NEEDS RECOMPUTE"]);
        for d in &downstream {
            let planned = plan["downstream"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["dataset"] == d["dataset"] && x["partition"] == d["partition"])
                .cloned()
                .unwrap_or(Value::Null);
            t.row(vec![
                cell(&d["dataset"]),
                cell(&d["partition"]),
                cell(&d["state"]),
                cell(&planned["owner"]),
                cell(&planned["needs_recompute"]),
            ]);
        }
        s.push_str(&format!("\n{}", t.render()));
    }
    s.trim_end().to_owned()
}

/// `batchgate alerts`.
#[derive(Args)]
pub struct AlertsArgs {
    #[command(flatten)]
    service: ServiceArgs,
    /// open (the service's default) or resolved.
    #[arg(long)]
    state: Option<String>,
    #[arg(long)]
    dataset: Option<String>,
    /// critical, warning or info.
    #[arg(long)]
    severity: Option<String>,
    #[arg(long)]
    kind: Option<String>,
    #[arg(long)]
    limit: Option<u32>,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

pub async fn run_alerts(args: AlertsArgs) -> Exit {
    let client = match client(&args.service) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let q = query(&[
        ("state", args.state),
        ("dataset", args.dataset),
        ("severity", args.severity),
        ("kind", args.kind),
        ("limit", args.limit.map(|n| n.to_string())),
    ]);
    match client.get::<Value>(&["v1", "alerts"], &q).await {
        Ok(answer) => {
            print(output(args.json), &answer.body, || {
                let mut t = Table::new(&["ID", "STATE", "SEVERITY", "KIND", "DATASET", "DT", "ACTION", "MESSAGE"]);
                for a in answer.body["items"].as_array().into_iter().flatten() {
                    t.row(vec![
                        cell(&a["id"]),
                        cell(&a["state"]),
                        cell(&a["severity"]),
                        cell(&a["kind"]),
                        cell(&a["dataset"]),
                        cell(&a["dt"]),
                        cell(&a["recommended_action"]),
                        cell(&a["message"]),
                    ]);
                }
                more(t, &answer.body)
            });
            Exit::Success
        }
        Err(e) => failed("cannot list alerts", &e),
    }
}

/// `batchgate dataset set`: replaces a dataset's policy (`PUT
/// /v1/datasets/{dataset}`); an option left out takes its default.
#[derive(Args)]
pub struct DatasetArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(subcommand)]
    command: DatasetCommand,
}

#[derive(Subcommand)]
enum DatasetCommand {
    /// Replace the dataset's policy: an option left out takes its default.
    Set(SetPolicyArgs),
}

#[derive(Args)]
struct SetPolicyArgs {
    dataset: String,
    #[arg(long, help = format!("core, standard or scratch (default {})", policy::DEFAULT_TIER))]
    tier: Option<Tier>,
    #[arg(long, help = format!(
        "overwrite_partition, append, delete_insert_by_batch or merge (default {})",
        policy::DEFAULT_WRITE_MODE
    ))]
    write_mode: Option<WriteMode>,
    /// A column of the unique key; repeat for several.
    #[arg(long = "unique-key", value_name = "COLUMN")]
    unique_key: Vec<String>,
    #[arg(long, help = format!("An IANA time zone (default {})", policy::DEFAULT_TIMEZONE))]
    timezone: Option<String>,
    #[arg(long, help = format!(
        "Largest allowed |row_count − baseline| / baseline (default {})",
        policy::DEFAULT_MAX_VOLUME_CHANGE
    ))]
    max_volume_change: Option<f64>,
    #[arg(long, help = format!(
        "Earlier published dts forming the volume baseline (default {})",
        policy::DEFAULT_BASELINE_PERIODS
    ))]
    baseline_periods: Option<u32>,
    /// Accept a batch that wrote no rows.
    #[arg(long)]
    allow_empty: bool,
    #[arg(long)]
    owner: Option<String>,
    #[arg(long, help = format!(
        "Most partitions one overwrite_partition batch may replace (default {})",
        policy::DEFAULT_MAX_PARTITIONS_PER_BATCH
    ))]
    max_partitions_per_batch: Option<u32>,
    /// By when each data date should be published, HH:MM in the dataset's
    /// time zone.
    #[arg(long, value_name = "HH:MM")]
    deadline: Option<String>,
    /// Days after the data date the deadline falls (with --deadline).
    #[arg(long, requires = "deadline")]
    deadline_days_after_dt: Option<u32>,
    /// This dataset's alerts are also POSTed here.
    #[arg(long)]
    webhook_url: Option<String>,
    /// The Airflow asset (name or URI) each published partition is reported to.
    #[arg(long)]
    airflow_asset: Option<String>,
    #[arg(long, help = format!(
        "The asset event's partition key, a template over the partition spec's keys (default `{}`, e.g. `{{region}}|{{dt}}`)",
        crate::domain::push::DEFAULT_PARTITION_KEY
    ))]
    partition_key: Option<String>,
    /// This dataset's readiness changes are also POSTed here as CloudEvents.
    #[arg(long)]
    events_url: Option<String>,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

pub async fn run_dataset(args: DatasetArgs) -> Exit {
    let client = match client(&args.service) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let DatasetCommand::Set(a) = args.command;
    let req = PolicyRequest {
        tier: a.tier,
        write_mode: a.write_mode,
        unique_key: Some(a.unique_key).filter(|k| !k.is_empty()),
        timezone: a.timezone,
        max_volume_change: a.max_volume_change,
        baseline_periods: a.baseline_periods,
        allow_empty: a.allow_empty.then_some(true),
        owner: a.owner,
        max_partitions_per_batch: a.max_partitions_per_batch,
        deadline: a.deadline.map(|time| Deadline { time, days_after_dt: a.deadline_days_after_dt.unwrap_or(0) }),
        webhook_url: a.webhook_url,
        airflow_asset: a.airflow_asset,
        partition_key: a.partition_key,
        events_url: a.events_url,
    };
    match client.put_dataset(&a.dataset, &req).await {
        Ok(answer) => {
            print(output(a.json), &answer.body, || {
                let p = &answer.body["policy"];
                let p = if p.is_object() { p } else { &answer.body };
                format!(
                    "{}: tier {}, write mode {}, unique key {}, timezone {}",
                    a.dataset,
                    cell(&p["tier"]),
                    cell(&p["write_mode"]),
                    cell(&p["unique_key"]),
                    cell(&p["timezone"])
                )
            });
            Exit::Success
        }
        Err(e) => failed(&format!("cannot set the policy of {}", a.dataset), &e),
    }
}
