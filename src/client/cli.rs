//! The command line of the client commands, `batchgate batch …` and
//! `batchgate wait`: their clap arguments and the dispatch to
//! [`commands`] and [`wait`]. Exit statuses: [`Exit`].

use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};
use serde_json::Value;

use super::commands::{self, Evidence, Output};
use super::wait::{self, WaitOptions};
use super::{Client, CommitRequest, Exit, FailRequest, StartRequest, Target};
use crate::domain::batch::{FailCategory, FailStage, Trigger};

/// Where the service is when nothing says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Where the service is, for the client commands.
#[derive(Args)]
struct ServiceArgs {
    /// The batchgate service.
    #[arg(long, env = "BATCHGATE_URL", default_value = DEFAULT_URL, global = true, help_heading = "Service")]
    url: String,
    /// Sent as `Authorization: Bearer <TOKEN>`.
    #[arg(long, env = "BATCHGATE_TOKEN", hide_env_values = true, global = true, help_heading = "Service")]
    token: Option<String>,
}

impl ServiceArgs {
    fn client(&self) -> Result<Client, Exit> {
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
    /// How long the batch holds its partitions without a heartbeat (default
    /// 3600).
    #[arg(long)]
    lease_seconds: Option<i64>,
    /// The batch's scope as a JSON object: timezone, business_start,
    /// business_end.
    #[arg(long = "scope-json", value_name = "JSON", value_parser = json_object)]
    scope: Option<Value>,
    /// Starting again with the same key and arguments answers the same batch.
    #[arg(long)]
    idempotency_key: Option<String>,
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
struct HeartbeatArgs {
    /// The id `batch start` printed.
    batch_id: String,
    /// Print the service's answer (JSON).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(group(ArgGroup::new("target").required(true).args(["dataset", "task"])))]
pub struct WaitArgs {
    #[command(flatten)]
    service: ServiceArgs,
    /// Wait for partitions of this dataset (with --partition).
    #[arg(long, requires = "partitions", conflicts_with = "task")]
    dataset: Option<String>,
    /// A partition that must be ready; repeat for several.
    #[arg(long = "partition", value_name = "PARTITION", requires = "dataset")]
    partitions: Vec<String>,
    /// Wait for the partitions of this task's latest batch (with --dt).
    #[arg(long, requires = "dt")]
    task: Option<String>,
    /// The data date, YYYY-MM-DD.
    #[arg(long, requires = "task")]
    dt: Option<String>,
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
    }
}

/// Runs `batchgate wait`.
pub async fn run_wait(args: WaitArgs) -> Exit {
    let client = match args.service.client() {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    // clap makes sure of either pair.
    let target = match (args.dataset, args.task, args.dt) {
        (Some(dataset), _, _) => Target::Partitions { dataset, partitions: args.partitions },
        (None, Some(task), Some(dt)) => Target::Task { task, dt },
        _ => unreachable!("clap requires --dataset with --partition, or --task with --dt"),
    };
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
        for bad in [
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
