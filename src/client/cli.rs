//! The command line of the client commands, `batchgate batch …` and
//! `batchgate wait`: their clap arguments and the dispatch to
//! [`commands`] and [`wait`]. Exit statuses: [`Exit`].

use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};
use serde_json::Value;

use super::commands::{self, Evidence, Output};
use super::wait::{self, WaitOptions};
use super::{
    Client, CommitRequest, Exit, FailRequest, InputRef, StartRequest, Target, WrittenPartition, WrittenRequest,
};
use crate::domain::batch::{FailCategory, FailStage, Trigger};

/// Where the service is when nothing says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Where the service is, for the client commands.
#[derive(Args)]
pub(super) struct ServiceArgs {
    /// The batchgate service, http:// or https://.
    #[arg(
        long,
        env = "BATCHGATE_URL",
        hide_env_values = true,
        default_value = DEFAULT_URL,
        global = true,
        help_heading = "Service"
    )]
    url: String,
    /// Sent as `Authorization: Bearer <TOKEN>`.
    #[arg(long, env = "BATCHGATE_TOKEN", hide_env_values = true, global = true, help_heading = "Service")]
    token: Option<String>,
}

impl ServiceArgs {
    pub(super) fn client(&self) -> Result<Client, Exit> {
        Client::new(&self.url, self.token.clone()).map_err(|e| {
            eprintln!("batchgate: {e}");
            Exit::for_error(&e)
        })
    }
}

/// `batchgate batch …`.
#[derive(Args)]
pub struct BatchArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(subcommand)]
    command: BatchCommand,
}

#[derive(Subcommand)]
enum BatchCommand {
    /// Start a batch and print its id.
    Start(StartArgs),
    /// Commit a batch with the statistics of what it wrote: exit 0
    /// published, 3 rejected (the failed checks go to stderr).
    Commit(CommitArgs),
    /// Report that the task failed.
    Fail(FailArgs),
    /// Extend the batch's lease.
    Heartbeat(HeartbeatArgs),
    /// Report the rows written so far, before the commit.
    Written(WrittenArgs),
}

#[derive(Args)]
struct StartArgs {
    /// The task that writes, e.g. dws_order_detail_daily.
    #[arg(long)]
    task: String,
    /// The dataset it writes, e.g. dws.order_detail.
    #[arg(long)]
    dataset: String,
    /// The data date, YYYY-MM-DD.
    #[arg(long)]
    dt: String,
    /// A partition the batch writes, `k=v[/k=v…]`; repeat for several.
    #[arg(long = "partition", value_name = "PARTITION", required = true)]
    partitions: Vec<String>,
    /// Why the batch runs: scheduled (the default), retry, backfill, repair,
    /// manual.
    #[arg(long)]
    trigger: Option<Trigger>,
    /// The scheduler's id for this run.
    #[arg(long)]
    run_ref: Option<String>,
    #[arg(long, help = format!(
        "How long the batch holds its partitions without a heartbeat, in seconds (default {}, as for the Airflow operator)",
        crate::domain::batch::DEFAULT_LEASE_SECONDS
    ))]
    lease_seconds: Option<i64>,
    /// The batch's scope as a JSON object: timezone, business_start,
    /// business_end.
    #[arg(long = "scope-json", value_name = "JSON", value_parser = json_object)]
    scope: Option<Value>,
    /// Starting again with the same key and arguments answers the same batch.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// A partition the batch reads, `DATASET:PARTITION` (e.g.
    /// `dwd.orders:dt=2026-08-24`); repeat for several. Recorded with the
    /// version current now: lineage, staleness and repairs follow it.
    #[arg(long = "input", value_name = "DATASET:PARTITION")]
    inputs: Vec<InputRef>,
    /// Start even if an input is not ready (recorded on the batch).
    #[arg(long)]
    allow_unready_inputs: bool,
    /// A residue batch whose rows the task deleted before this start; repeat
    /// for several (an `append` dataset refuses a start over residue with
    /// 409 cleanup_required until every residue batch is named).
    #[arg(long = "cleaned-batch-id", value_name = "BATCH_ID")]
    cleaned_batch_ids: Vec<String>,
    /// The repair plan (`batchgate repair plan`) this batch carries out.
    #[arg(long, value_name = "ID")]
    repair_id: Option<i64>,
    /// Print the service's whole answer (JSON) instead of the batch id.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CommitArgs {
    /// The id `batch start` printed.
    batch_id: String,
    /// The completion marker, e.g. the `_SUCCESS` path.
    #[arg(long)]
    marker: String,
    /// A JSON file (`-` for stdin) with an array of partition statistics, or
    /// an object with `partitions` and an optional `source`.
    #[arg(long, value_name = "FILE|-")]
    partition_stats: String,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct FailArgs {
    /// The id `batch start` printed.
    batch_id: String,
    /// Where the task stopped: read, compute, write, verify.
    #[arg(long)]
    stage: FailStage,
    /// resource, data, logic, partial_write, unknown (the default).
    #[arg(long)]
    category: Option<FailCategory>,
    /// What went wrong, for people.
    #[arg(long)]
    message: Option<String>,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct WrittenArgs {
    /// The id `batch start` printed.
    batch_id: String,
    /// `PARTITION=ROWS`, the rows written to a partition, e.g.
    /// `dt=2026-08-24=1000`; repeat for several.
    #[arg(long = "rows", value_name = "PARTITION=ROWS", required = true, value_parser = written_partition)]
    partitions: Vec<WrittenPartition>,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

/// `dt=2026-08-24=1000`: the count after the last `=`.
fn written_partition(s: &str) -> Result<WrittenPartition, String> {
    let (partition, rows) = s.rsplit_once('=').ok_or_else(|| format!("expected PARTITION=ROWS, got {s:?}"))?;
    let rows_written = rows.parse().map_err(|_| format!("{rows:?} is not a row count (in {s:?})"))?;
    // A partition spec is `k=v[/k=v…]`: `dt=1` alone names no row count.
    if !partition.contains('=') {
        return Err(format!("expected PARTITION=ROWS, e.g. dt=2026-08-24=1000, got {s:?}"));
    }
    Ok(WrittenPartition { partition: partition.to_owned(), rows_written })
}

#[derive(Args)]
struct HeartbeatArgs {
    /// The id `batch start` printed.
    batch_id: String,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(group(ArgGroup::new("target").required(true).args(["dataset", "task"])))]
#[command(group(ArgGroup::new("which").args(["partitions", "dt"])))]
pub struct WaitArgs {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(flatten)]
    target: TargetArgs,
    /// Give up (exit 5) after this long, e.g. 90s, 30m, 3h.
    #[arg(long, value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Give up (exit 6) as soon as the latest batch is rejected.
    #[arg(long)]
    fail_on_rejected: bool,
    /// Give up (exit 4) when the service stays unreachable this long.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    grace: Duration,
}

/// What to wait for or ask about: partitions of a dataset, or a task's
/// latest batch for a data date. The command using it declares the groups
/// `target` (dataset or task) and `which` (partitions or dt).
#[derive(Args)]
pub(super) struct TargetArgs {
    /// Partitions of this dataset (with --partition, or --dt for the
    /// partition `dt=DT`).
    #[arg(long, requires = "which", conflicts_with = "task")]
    dataset: Option<String>,
    /// A partition that must be ready; repeat for several.
    #[arg(long = "partition", value_name = "PARTITION", requires = "dataset")]
    partitions: Vec<String>,
    /// The partitions of this task's latest batch (with --dt).
    #[arg(long, requires = "dt")]
    task: Option<String>,
    /// The data date, YYYY-MM-DD: with --task, that batch's; with
    /// --dataset, the partition `dt=DT`.
    #[arg(long)]
    dt: Option<String>,
}

impl TargetArgs {
    pub(super) fn target(self) -> Target {
        // clap makes sure of --dataset with --partition or --dt, or --task with --dt.
        match (self.dataset, self.task, self.dt) {
            (Some(dataset), _, Some(dt)) => Target::Partitions { dataset, partitions: vec![format!("dt={dt}")] },
            (Some(dataset), _, None) => Target::Partitions { dataset, partitions: self.partitions },
            (None, Some(task), Some(dt)) => Target::Task { task, dt },
            _ => unreachable!("clap requires --dataset with --partition or --dt, or --task with --dt"),
        }
    }
}

fn json_object(s: &str) -> Result<Value, String> {
    match serde_json::from_str(s) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("expected a JSON object".into()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

fn output(json: bool) -> Output {
    if json {
        Output::Json
    } else {
        Output::Text
    }
}

/// Runs `batchgate batch …`.
pub async fn run_batch(args: BatchArgs) -> Exit {
    let client = match args.service.client() {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    match args.command {
        BatchCommand::Start(a) => {
            let req = StartRequest {
                task: a.task,
                dataset: a.dataset,
                dt: a.dt,
                partitions: a.partitions,
                scope: a.scope,
                trigger: a.trigger,
                run_ref: a.run_ref,
                lease_seconds: a.lease_seconds,
                cleaned_batch_ids: Some(a.cleaned_batch_ids).filter(|ids| !ids.is_empty()),
                inputs: Some(a.inputs).filter(|inputs| !inputs.is_empty()),
                allow_unready_inputs: a.allow_unready_inputs.then_some(true),
                repair_id: a.repair_id,
            };
            let key = a.idempotency_key.as_deref();
            commands::start(&client, &req, key, output(a.json)).await
        }
        BatchCommand::Commit(a) => {
            let evidence = match Evidence::read(&a.partition_stats).await {
                Ok(e) => e,
                Err(message) => {
                    eprintln!("batchgate: {message}");
                    return Exit::Invalid;
                }
            };
            let req = CommitRequest { marker: a.marker, partitions: evidence.partitions, source: evidence.source };
            commands::commit(&client, &a.batch_id, &req, output(a.json)).await
        }
        BatchCommand::Fail(a) => {
            let req = FailRequest { stage: a.stage, category: a.category, message: a.message };
            commands::fail(&client, &a.batch_id, &req, output(a.json)).await
        }
        BatchCommand::Heartbeat(a) => commands::heartbeat(&client, &a.batch_id, output(a.json)).await,
        BatchCommand::Written(a) => {
            let req = WrittenRequest { partitions: a.partitions };
            commands::written(&client, &a.batch_id, &req, output(a.json)).await
        }
    }
}

/// Runs `batchgate wait`.
pub async fn run_wait(args: WaitArgs) -> Exit {
    let client = match args.service.client() {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let target = args.target.target();
    let opts = WaitOptions { timeout: args.timeout, fail_on_rejected: args.fail_on_rejected, grace: args.grace };
    wait::wait(&client, &target, &opts).await
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[derive(Parser)]
    enum Cli {
        Batch(BatchArgs),
        Wait(WaitArgs),
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn wait_takes_partitions_of_a_dataset_or_a_task_and_dt() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["batchgate", "wait", "--timeout", "1m"], args].concat());
        assert!(parse(&["--dataset", "d.x", "--partition", "dt=1"]).is_ok());
        assert!(parse(&["--task", "t", "--dt", "2026-08-24"]).is_ok());
        assert!(parse(&["--dataset", "d.x", "--dt", "2026-08-24"]).is_ok());
        for bad in [
            &["--dataset", "d.x", "--partition", "dt=1", "--dt", "2026-08-24"][..],
            &["--dt", "2026-08-24"],
            &[][..],
            &["--dataset", "d.x"],
            &["--partition", "dt=1"],
            &["--task", "t"],
            &["--dataset", "d.x", "--partition", "dt=1", "--task", "t", "--dt", "2026-08-24"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_dataset_and_dt_wait_for_the_partition_dt() {
        let Cli::Wait(w) =
            Cli::try_parse_from(["batchgate", "wait", "--dataset", "d.x", "--dt", "2026-08-24", "--timeout", "1m"])
                .unwrap()
        else {
            panic!("not wait")
        };
        assert_eq!(
            w.target.target(),
            Target::Partitions { dataset: "d.x".into(), partitions: vec!["dt=2026-08-24".into()] }
        );
    }

    #[test]
    fn inputs_and_written_rows_are_read_from_one_word() {
        let i: InputRef = "dwd.orders:dt=2026-08-24/hh=01".parse().unwrap();
        assert_eq!((i.dataset.as_str(), i.partition.as_str()), ("dwd.orders", "dt=2026-08-24/hh=01"));
        let i: InputRef = "hive:dwd.orders:dt=1".parse().unwrap();
        assert_eq!((i.dataset.as_str(), i.partition.as_str()), ("hive:dwd.orders", "dt=1"));
        for bad in ["dwd.orders", ":dt=1", "dwd.orders:", "dt=1"] {
            assert!(bad.parse::<InputRef>().is_err(), "{bad}");
        }
        assert_eq!(written_partition("dt=1/hh=2=30").unwrap().rows_written, 30);
        assert!(written_partition("dt=1").is_err());
        assert!(written_partition("=3").is_err());
    }

    #[test]
    fn durations_read_as_people_write_them() {
        let Cli::Wait(w) =
            Cli::try_parse_from(["batchgate", "wait", "--task", "t", "--dt", "2026-08-24", "--timeout", "3h"]).unwrap()
        else {
            panic!("not wait")
        };
        assert_eq!(w.timeout, Duration::from_secs(3 * 3600));
        assert_eq!(w.grace, Duration::from_secs(300));
    }
}
