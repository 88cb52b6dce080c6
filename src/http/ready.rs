//! `/ready`: what scheduler sensors poll.
//!
//! Not ready is a 404, never a 200: Airflow's stock `HttpSensor` keeps poking
//! on 404 and treats any 200 as done, and DolphinScheduler matches the bytes
//! `"ready":true`, which appear only in ready bodies. A well-formed query
//! never gets another 4xx or a 5xx (a deferrable trigger retries those
//! without sleeping): if the database is down the answer is 404 `unavailable`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use tokio::time::Instant;

use super::query::Params;
use super::{AppState, MAX_WAIT_SECONDS};
use crate::api::schemas::{DatasetNameText, PartitionNameText, TaskNameText};
use crate::api::{NotReadyReason, NotReadyResponse, PartitionStanding, PublishedPartition};
use crate::changes::{Interest, TaskLatest};
use crate::domain::names::{DatasetName, PartitionSpec, TaskName};
use crate::error::{Error, Result};
use crate::store::{fitness_of, PartitionRecord};

pub fn router() -> Router<AppState> {
    Router::new().route("/ready", get(ready))
}

enum Target {
    Partitions { dataset: String, partitions: Vec<String> },
    Task { task: String, dt: NaiveDate },
}

/// When a long-poll may answer before its deadline.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    Ready,
    /// Also answer (404 `rejected`) as soon as a blocking partition's latest
    /// batch is rejected: a sensor can fail fast instead of waiting out its
    /// timeout.
    ReadyOrRejected,
}

struct ReadyQuery {
    target: Target,
    wait: Option<Duration>,
    until: Until,
}

fn parse(raw: Option<&str>) -> Result<ReadyQuery> {
    let mut p = Params::parse(raw);
    let dataset = p.one("dataset")?;
    let partitions = p.all("partition");
    let task = p.one("task")?;
    let dt = p.date("dt")?;
    let wait = p.one("wait")?;
    let until = match p.one("until")?.as_deref() {
        None | Some("ready") => Until::Ready,
        Some("ready_or_rejected") => Until::ReadyOrRejected,
        Some(other) => {
            return Err(Error::invalid("until", format!("until must be ready or ready_or_rejected, got {other:?}")))
        }
    };
    p.finish()?;
    let target = match (dataset, task) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid("task", "ask either by dataset and partition, or by task and dt, not both"))
        }
        (Some(dataset), None) => {
            DatasetName::parse(&dataset).map_err(|e| Error::invalid("dataset", e.to_string()))?;
            if partitions.is_empty() {
                return Err(Error::invalid_code(
                    "missing_field",
                    "partition",
                    "name at least one partition (the parameter may repeat)",
                ));
            }
            for (i, part) in partitions.iter().enumerate() {
                PartitionSpec::parse(part)
                    .map_err(|e| Error::invalid_code("invalid_partition", format!("partition[{i}]"), e.to_string()))?;
            }
            Target::Partitions { dataset, partitions }
        }
        (None, Some(task)) => {
            TaskName::parse(&task).map_err(|e| Error::invalid("task", e.to_string()))?;
            let dt = dt.ok_or_else(|| Error::invalid_code("missing_field", "dt", "dt is required with task"))?;
            if !partitions.is_empty() {
                return Err(Error::invalid("partition", "partition goes with dataset, not with task"));
            }
            Target::Task { task, dt }
        }
        (None, None) => {
            return Err(Error::invalid_code("missing_field", "dataset", "give dataset and partition, or task and dt"))
        }
    };
    let wait = wait
        .map(|w| match w.parse::<f64>() {
            Ok(s) if (0.0..=MAX_WAIT_SECONDS).contains(&s) => Ok(Duration::from_secs_f64(s)),
            _ => Err(Error::invalid(
                "wait",
                format!("wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}, got {w:?}"),
            )),
        })
        .transpose()?;
    Ok(ReadyQuery { target, wait, until })
}

/// The standing of each partition, from the cache where it can.
async fn statuses(app: &AppState, dataset: &str, partitions: &[String]) -> Result<Vec<Option<Arc<PartitionRecord>>>> {
    let mut out = Vec::with_capacity(partitions.len());
    let mut missing = Vec::new();
    for (i, p) in partitions.iter().enumerate() {
        match app.hub.cached_partition(dataset, p) {
            Some(hit) => {
                app.metrics.cache_hit();
                out.push(hit)
            }
            None => {
                app.metrics.cache_miss();
                out.push(None);
                missing.push(i);
            }
        }
    }
    if missing.is_empty() {
        return Ok(out);
    }
    let names: Vec<String> = missing.iter().map(|&i| partitions[i].clone()).collect();
    let fetched = app.hub.read_partitions(dataset, &names, || app.store.partition_status(dataset, &names)).await?;
    for (&i, rec) in missing.iter().zip(fetched) {
        out[i] = rec;
    }
    Ok(out)
}

async fn task_latest(app: &AppState, task: &str, dt: NaiveDate) -> Result<Option<Arc<TaskLatest>>> {
    let key = dt.to_string();
    if let Some(hit) = app.hub.cached_task(task, &key) {
        app.metrics.cache_hit();
        return Ok(hit);
    }
    app.metrics.cache_miss();
    let seen = app.hub.generation();
    let latest = app.store.latest_task_batch(task, dt).await?.map(Arc::new);
    app.hub.fill_task(seen, task, &key, latest.clone());
    Ok(latest)
}

/// A readiness answer: a ready body already serialised (the hot path of
/// sensors polling), or the not-ready body.
enum Answer {
    Ready(Vec<u8>),
    NotReady(Box<NotReadyResponse>),
}

impl Answer {
    fn is(&self, reason: NotReadyReason) -> bool {
        matches!(self, Answer::NotReady(b) if b.reason == reason)
    }
}

/// The task query a ready answer was for.
struct TaskContext<'a> {
    task: &'a str,
    dt: NaiveDate,
    latest_batch_id: &'a str,
}

#[derive(Serialize)]
struct ReadyBody<'a> {
    ready: bool,
    dataset: &'a str,
    partitions: Vec<ReadyEntry<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dt: Option<NaiveDate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latest_batch_id: Option<&'a str>,
}

#[derive(Serialize)]
struct ReadyEntry<'a> {
    partition: &'a str,
    version: i64,
    batch_id: Option<&'a str>,
    row_count: Option<i64>,
    published_at: Option<DateTime<Utc>>,
    restatement: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    supersedes: Option<Supersedes<'a>>,
}

#[derive(Serialize)]
struct Supersedes<'a> {
    version: i64,
    batch_id: Option<&'a str>,
    row_count: Option<i64>,
}

fn published(r: &PartitionRecord) -> PublishedPartition {
    PublishedPartition {
        partition: r.partition.clone(),
        version: r.version,
        batch_id: r.published_batch_id.clone(),
        row_count: r.row_count,
        published_at: r.published_at,
        restatement: None,
        supersedes: None,
    }
}

/// A published partition as a ready answer shows it. A later version is a
/// restatement and names what it replaced, so a consumer that accumulates
/// can subtract the old contribution instead of adding twice.
fn ready_entry(r: &PartitionRecord) -> ReadyEntry<'_> {
    ReadyEntry {
        partition: &r.partition,
        version: r.version,
        batch_id: r.published_batch_id.as_deref(),
        row_count: r.row_count,
        published_at: r.published_at,
        restatement: r.version > 1,
        supersedes: (r.version > 1).then(|| Supersedes {
            version: r.version - 1,
            batch_id: r.prev_published_batch_id.as_deref(),
            row_count: r.prev_published_row_count,
        }),
    }
}

fn not_ready(body: NotReadyResponse) -> Answer {
    Answer::NotReady(Box::new(body))
}

/// A not-ready answer that says only why, and a message.
fn not_ready_because(reason: NotReadyReason, message: &str) -> Answer {
    not_ready(NotReadyResponse { message: Some(message.to_owned()), ..NotReadyResponse::new(reason) })
}

fn judge(
    dataset: &str,
    partitions: &[String],
    found: Vec<Option<Arc<PartitionRecord>>>,
    ctx: Option<&TaskContext>,
) -> Answer {
    let fitness = |f: &Option<Arc<PartitionRecord>>| fitness_of(f.as_deref());
    let blocker = partitions.iter().zip(&found).find(|(_, f)| !fitness(f).is_ready());
    if let Some((name, rec)) = blocker {
        let each: Vec<PartitionStanding> = partitions
            .iter()
            .zip(&found)
            .map(|(p, f)| PartitionStanding {
                partition: p.clone(),
                state: fitness(f),
                batch_id: f.as_ref().map(|r| r.batch_id.clone()),
                version: f.as_ref().map(|r| r.version),
            })
            .collect();
        let body = NotReadyResponse {
            dataset: Some(dataset.to_owned()),
            partition: Some(name.clone()),
            batch_id: Some(rec.as_ref().and_then(|r| r.batch_id.clone())),
            last_published: Some(rec.as_deref().filter(|r| r.version > 0).map(published)),
            partitions: Some(each),
            upstream: rec.as_ref().and_then(|r| r.stale_upstream.as_ref()).map(|up| up.0.clone()),
            invalidated_reason: rec.as_ref().and_then(|r| r.invalidated_reason.clone()),
            ..NotReadyResponse::new(NotReadyReason::from(fitness(rec)))
        };
        return not_ready(body);
    }
    let body = ReadyBody {
        ready: true,
        dataset,
        partitions: found.iter().flatten().map(|r| ready_entry(r)).collect(),
        task: ctx.map(|c| c.task),
        dt: ctx.map(|c| c.dt),
        latest_batch_id: ctx.map(|c| c.latest_batch_id),
    };
    Answer::Ready(serde_json::to_vec(&body).expect("a ready body serialises"))
}

async fn evaluate(app: &AppState, target: &Target) -> Result<Answer> {
    match target {
        Target::Partitions { dataset, partitions } => {
            Ok(judge(dataset, partitions, statuses(app, dataset, partitions).await?, None))
        }
        Target::Task { task, dt } => {
            let Some(latest) = task_latest(app, task, *dt).await? else {
                return Ok(not_ready(NotReadyResponse {
                    task: Some(task.clone()),
                    dt: Some(*dt),
                    ..NotReadyResponse::new(NotReadyReason::NoBatch)
                }));
            };
            let found = statuses(app, &latest.dataset, &latest.partitions).await?;
            let ctx = TaskContext { task, dt: *dt, latest_batch_id: &latest.batch_id };
            let mut answer = judge(&latest.dataset, &latest.partitions, found, Some(&ctx));
            if let Answer::NotReady(b) = &mut answer {
                b.task = Some(task.clone());
                b.dt = Some(*dt);
                b.latest_batch_id = Some(latest.batch_id.clone());
            }
            Ok(answer)
        }
    }
}

/// The answer to a `/ready` query whose partitions are all cached and all
/// ready, serialised, without touching the database; `None` for any other
/// query (an error, a miss, a task query, a not-ready partition), which the
/// router's full path answers. A query that waits gets the same answer: it
/// is ready now.
pub(super) fn ready_from_cache(app: &AppState, memo: &AnswerMemo, raw: Option<&str>) -> Option<Bytes> {
    let raw = raw?;
    let body = match memo.still_current(app, raw) {
        Some(hit) => hit,
        None => {
            let q = parse(Some(raw)).ok()?;
            let Target::Partitions { dataset, partitions } = &q.target else {
                return None;
            };
            let mut found = Vec::with_capacity(partitions.len());
            for p in partitions {
                match app.hub.cached_partition(dataset, p) {
                    Some(Some(r)) if r.fitness().is_ready() => found.push(r),
                    _ => return None,
                }
            }
            let Answer::Ready(bytes) = judge(dataset, partitions, found.iter().cloned().map(Some).collect(), None)
            else {
                return None;
            };
            memo.keep(raw, dataset, partitions.iter().cloned().zip(found).collect(), bytes.into())
        }
    };
    for _ in 0..body.partitions {
        app.metrics.cache_hit();
    }
    app.metrics.ready_answer("ready");
    Some(body.bytes)
}

/// Ready answers already built, by raw query string: the sensors' hot path
/// asks the same few queries over and over, and re-parsing the query and
/// re-serialising the same answer was most of its own work. An answer is
/// served again only while every partition it was built from still has the
/// very cache entry it was built from (a change replaces the entry, and the
/// memo holds the old one, so its address cannot be reused). Bounded like
/// the cache: full, it starts again.
#[derive(Default)]
pub struct AnswerMemo {
    answers: std::sync::RwLock<std::collections::HashMap<Box<str>, Arc<Memo>>>,
}

struct Memo {
    dataset: String,
    parts: Vec<(String, Arc<PartitionRecord>)>,
    bytes: Bytes,
}

/// A memoised ready body, with how many partitions it answered for.
struct MemoHit {
    bytes: Bytes,
    partitions: usize,
}

impl AnswerMemo {
    const CAPACITY: usize = 10_000;

    fn still_current(&self, app: &AppState, raw: &str) -> Option<MemoHit> {
        let m = self.answers.read().expect("memo lock").get(raw).cloned()?;
        let current = m.parts.iter().all(|(p, built_from)| {
            matches!(app.hub.cached_partition(&m.dataset, p), Some(Some(now)) if Arc::ptr_eq(&now, built_from))
        });
        current.then(|| MemoHit { bytes: m.bytes.clone(), partitions: m.parts.len() })
    }

    fn keep(&self, raw: &str, dataset: &str, parts: Vec<(String, Arc<PartitionRecord>)>, bytes: Bytes) -> MemoHit {
        let hit = MemoHit { bytes: bytes.clone(), partitions: parts.len() };
        let mut answers = self.answers.write().expect("memo lock");
        if answers.len() >= Self::CAPACITY {
            answers.clear();
        }
        answers.insert(raw.into(), Arc::new(Memo { dataset: dataset.to_owned(), parts, bytes }));
        hit
    }
}

/// Evaluates, turning a storage fault into a not-ready answer.
async fn evaluate_or_unavailable(app: &AppState, target: &Target) -> Answer {
    match evaluate(app, target).await {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = ?e, "readiness lookup failed");
            not_ready_because(NotReadyReason::Unavailable, "the registry cannot be read right now; try again")
        }
    }
}

/// What a long-poll on `target` must be woken by.
fn interest(target: &Target) -> Interest {
    match target {
        Target::Partitions { dataset, partitions } => {
            Interest::Partitions { dataset: dataset.clone(), partitions: partitions.clone() }
        }
        // The latest batch of a task may move to any dataset: look again.
        Target::Task { .. } => Interest::Everything,
    }
}

#[utoipa::path(
    get,
    path = "/ready",
    tag = "readiness",
    operation_id = "getReady",
    summary = "Is a partition ready?",
    description = "What scheduler sensors poll. Ask by `dataset` and `partition` (the parameter may repeat: all must be ready), or by `task` and `dt` (ready when every partition of that task's latest batch for that dt is ready). A partition is ready when its latest batch published; while a newer batch is running, or after one was rejected, failed at stage `write`/`verify`, or was abandoned, it is not ready until a later batch publishes.\n\nNot ready is a 404, deliberately never a 200: Airflow's stock `HttpSensor` keeps poking on 404 in poke, reschedule and deferrable modes and treats any 200 as done. An unknown dataset is 404 `no_batch`, and a well-formed query never gets another 4xx or a 5xx (a database fault is 404 `unavailable`), because the deferrable trigger retries those without sleeping. The raw bytes `\"ready\":true` appear only in ready bodies (DolphinScheduler's HTTP task matches on a body substring).\n\n`wait=<seconds>` (at most 300) long-polls: the answer comes as soon as the partitions become ready, else 404 at the deadline. Waiting costs no database polling. When the instance shuts down, a long-poll answers at once: 404 `shutting_down`.\n\nNeeds `read`, unless the service runs with `--public-ready`.",
    params(
        ("dataset" = Option<DatasetNameText>, Query, description = "Ask by dataset: the dataset (with `partition`)."),
        ("partition" = Option<PartitionNameText>, Query, description = "Ask by dataset: a partition spec; repeat the parameter for several (all must be ready). Required with `dataset`, refused with `task`."),
        ("task" = Option<TaskNameText>, Query, description = "Ask by task: the task (with `dt`)."),
        ("dt" = Option<chrono::NaiveDate>, Query, description = "Ask by task: the data date (`YYYY-MM-DD`). Required with `task`."),
        ("wait" = Option<f64>, Query, description = "Long-poll up to this many seconds (0 to 300) for the partitions to become ready.", minimum = 0, maximum = 300),
        ("until" = Option<crate::api::schemas::Until>, Query, description = "With `wait`: `ready` (default) answers before the deadline only when ready; `ready_or_rejected` also answers (404, reason `rejected`) as soon as a blocking partition's latest batch is rejected, so a sensor can fail fast. Default \"ready\"."),
    ),
    responses(
        (status = 200, description = "Ready.", body = crate::api::ReadyResponse),
        (status = 401, response = crate::api::Unauthenticated),
        (status = 403, response = crate::api::Forbidden),
        (status = 404, description = "Not ready (yet), with the partition that is not ready and its last published version if any.", body = crate::api::NotReadyResponse),
        (status = 422, description = "Missing or invalid parameters: neither or both of `dataset` and `task`, `dataset` without `partition`, `task` without `dt`, a malformed partition spec, `wait` out of range, an unknown or repeated parameter.", body = crate::api::ErrorBody),
    ),
)]
async fn ready(State(app): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let q = match parse(raw.as_deref()) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let answer = match q.wait {
        None => evaluate_or_unavailable(&app, &q.target).await,
        Some(wait) => long_poll(&app, &q.target, q.until, Instant::now() + wait).await,
    };
    respond(&app, answer)
}

/// The HTTP answer, counted.
fn respond(app: &AppState, answer: Answer) -> Response {
    app.metrics.ready_answer(match &answer {
        Answer::Ready(_) => "ready",
        Answer::NotReady(body) => body.reason.as_str(),
    });
    match answer {
        Answer::Ready(bytes) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Answer::NotReady(body) => (StatusCode::NOT_FOUND, Json(body)).into_response(),
    }
}

/// A well-formed `/ready` query with `wait`: what the connection serves
/// ahead of the router (see [`super::ReadyFastPath::long_poll`]), so that a
/// waiter holds only its own state for up to `wait`, not every layer's.
pub(super) struct LongPoll {
    target: Target,
    until: Until,
    deadline: Instant,
}

impl LongPoll {
    /// `None` for anything but a valid query with `wait`: the router
    /// answers those (including the 422s).
    pub(super) fn parse(raw: Option<&str>) -> Option<Self> {
        let q = parse(raw).ok()?;
        let wait = q.wait?;
        Some(Self { target: q.target, until: q.until, deadline: Instant::now() + wait })
    }

    /// The answer, exactly as the handler gives it.
    pub(super) async fn answer(self, app: &AppState) -> Response {
        let answer = long_poll(app, &self.target, self.until, self.deadline).await;
        respond(app, answer)
    }
}

/// Answers as soon as the target is ready, else at the deadline. Between
/// evaluations it sleeps on the change hub: no polling of the database.
async fn long_poll(app: &AppState, target: &Target, until: Until, deadline: Instant) -> Answer {
    // Watch before the first look, so a change between the look and the
    // wait still wakes us. Only changes of the target's partitions do.
    let watch = app.hub.watch(interest(target));
    let _waiting = app.metrics.long_poll();
    loop {
        // Boxed: the lookup's state is not kept while waiting.
        let answer = Box::pin(evaluate_or_unavailable(app, target)).await;
        if matches!(answer, Answer::Ready(_))
            || (until == Until::ReadyOrRejected && answer.is(NotReadyReason::Rejected))
        {
            return answer;
        }
        if app.stopping.is_stopping() {
            return shutting_down();
        }
        tokio::select! {
            woken = tokio::time::timeout_at(deadline, watch.changed()) => {
                if woken.is_err() {
                    // A start wakes nobody (`Wake::Nobody`): look once
                    // more, so that the answer is not from before it.
                    return Box::pin(evaluate_or_unavailable(app, target)).await;
                }
            }
            () = app.stopping.wait() => return shutting_down(),
        }
    }
}

/// This instance is going away: the sensor should simply poll again (and
/// reach another replica, or this one restarted).
fn shutting_down() -> Answer {
    not_ready_because(NotReadyReason::ShuttingDown, "this instance is shutting down; poll again")
}
