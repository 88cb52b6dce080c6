//! The mapping, event by event.

use super::*;

fn parse(body: &str) -> RunEvent {
    RunEvent::parse(body.as_bytes()).expect("JSON")
}

fn event(v: Value) -> RunEvent {
    parse(&v.to_string())
}

fn start_event(outputs: Value) -> RunEvent {
    event(json!({
        "eventType": "START",
        "run": {"runId": "r1", "facets": {"nominalTime": {
            "nominalStartTime": "2026-08-23T16:00:00+00:00", "nominalEndTime": "2026-08-24T16:00:00+00:00"}}},
        "job": {"namespace": "default", "name": "dws_order_detail_daily.load"},
        "outputs": outputs,
    }))
}

fn output(name: &str, output_facets: Value) -> Value {
    json!({"namespace": "bigquery", "name": name, "outputFacets": output_facets})
}

fn policy(timezone: &str, unique_key: &[&str]) -> DatasetPolicy {
    DatasetPolicy {
        timezone: timezone.into(),
        unique_key: unique_key.iter().map(|k| k.to_string()).collect(),
        ..DatasetPolicy::default()
    }
}

fn spec(s: &str) -> PartitionSpec {
    PartitionSpec::parse(s).unwrap()
}

#[test]
fn job_names_become_task_names() {
    assert_eq!(task_name("dag.task").unwrap().as_str(), "dag.task");
    assert_eq!(task_name("my app.execute insert/into:tbl").unwrap().as_str(), "my_app.execute_insert_into_tbl");
    assert!(task_name(&"x".repeat(201)).is_err());
}

#[test]
fn the_data_date_is_the_nominal_start_in_the_datasets_timezone() {
    let ev = start_event(json!([output("d.x", json!({}))]));
    let utc = ev.start_plan(&ev.outputs[0], &policy("UTC", &[])).unwrap();
    assert_eq!(utc.dt.to_string(), "2026-08-23");
    assert_eq!(utc.partitions, vec![spec("dt=2026-08-23")]);

    let cst = ev.start_plan(&ev.outputs[0], &policy("Asia/Shanghai", &[])).unwrap();
    assert_eq!(cst.dt.to_string(), "2026-08-24");
    assert_eq!(cst.scope["business_start"], "2026-08-24T00:00:00+08:00");
    assert_eq!(cst.scope["business_end"], "2026-08-25T00:00:00+08:00");
    assert_eq!(cst.task.as_str(), "dws_order_detail_daily.load");
    assert_eq!(cst.idempotency_key, "openlineage:r1:d.x");
    assert_eq!(cst.run_ref, "r1");
    assert_eq!(cst.scope["openlineage"]["dataset"]["namespace"], "bigquery");
    assert_ne!(utc.fingerprint, cst.fingerprint);
}

#[test]
fn a_nominal_time_without_offset_is_wall_clock_time_in_the_dataset() {
    let ev = event(json!({"eventType": "START", "run": {"runId": "r", "facets": {"nominalTime": {
        "nominalStartTime": "2026-08-24T00:00:00"}}}, "job": {"name": "j"}, "outputs": [output("d", json!({}))]}));
    let plan = ev.start_plan(&ev.outputs[0], &policy("Asia/Shanghai", &[])).unwrap();
    assert_eq!(plan.dt.to_string(), "2026-08-24");
    assert_eq!(plan.scope["business_start"], "2026-08-24T00:00:00+08:00");
}

#[test]
fn without_a_nominal_time_or_job_nothing_starts() {
    let ev = event(json!({"eventType": "START", "run": {"runId": "r"}, "job": {"name": "j"},
        "outputs": [output("d", json!({}))]}));
    let err = ev.start_plan(&ev.outputs[0], &policy("UTC", &[])).unwrap_err();
    assert!(err.contains("nominalStartTime is missing"), "{err}");

    let ev = event(json!({"eventType": "START", "run": {"runId": "r", "facets": {"nominalTime": {
        "nominalStartTime": "yesterday"}}}, "outputs": [output("d", json!({}))]}));
    assert!(ev.warnings[0].contains("\"yesterday\" is not an ISO 8601"), "{:?}", ev.warnings);
    assert!(ev.start_plan(&ev.outputs[0], &policy("UTC", &[])).is_err());
}

#[test]
fn subset_partitions_keep_the_order_of_their_dimensions() {
    let ev = parse(
        r#"{"eventType": "START", "run": {"runId": "r", "facets": {"nominalTime": {"nominalStartTime": "2026-08-24T00:00:00Z"}}},
            "job": {"name": "j"}, "outputs": [{"namespace": "hive", "name": "d.events", "outputFacets": {"subset": {
              "outputCondition": {"type": "partition", "partitions": [
                {"identifier": "2026-08-24-cn", "dimensions": {"year": 2026, "month": "08", "day": "24", "region": "cn"}},
                {"identifier": "dt=2026-08-24/region=us"}]}}}}]}"#,
    );
    assert!(ev.warnings.is_empty(), "{:?}", ev.warnings);
    let plan = ev.start_plan(&ev.outputs[0], &policy("UTC", &[])).unwrap();
    assert_eq!(plan.partitions, vec![spec("year=2026/month=08/day=24/region=cn"), spec("dt=2026-08-24/region=us")]);
}

#[test]
fn an_unusable_subset_drops_the_output_and_another_condition_falls_back_to_dt() {
    let bad = start_event(json!([output(
        "d",
        json!({"subset": {"outputCondition": {
        "type": "partition", "partitions": [{"dimensions": {"dt": "2026-08-24 00"}}]}}})
    )]));
    assert!(bad.outputs.is_empty());
    assert!(bad.warnings[0].starts_with("outputs[0] is ignored: subset partition [0]"), "{:?}", bad.warnings);

    let location = start_event(json!([output(
        "d",
        json!({"subset": {"outputCondition": {
        "type": "location", "locations": ["s3://b/d/dt=2026-08-23"]}}})
    )]));
    let plan = location.start_plan(&location.outputs[0], &policy("UTC", &[])).unwrap();
    assert_eq!(plan.partitions, vec![spec("dt=2026-08-23")]);
    assert!(location.warnings[0].contains("type \"location\" names no partitions"));
}

#[test]
fn a_table_named_by_its_location_is_named_by_its_table_symlink() {
    let ev = start_event(json!([
        {"namespace": "hdfs://nn:8020", "name": "/warehouse/dws.db/order_detail",
         "facets": {"symlinks": {"identifiers": [
            {"namespace": "hive://metastore:9083", "name": "dws.order_detail", "type": "TABLE"}]}}},
        {"namespace": "file", "name": "/tmp/scratch/out"},
    ]));
    assert_eq!(ev.outputs.len(), 1);
    assert_eq!(ev.outputs[0].dataset.as_str(), "dws.order_detail");
    assert_eq!(ev.outputs[0].name, "/warehouse/dws.db/order_detail");
    assert!(ev.warnings[0].starts_with("outputs[1] is ignored: name \"/tmp/scratch/out\""));
}

#[test]
fn output_statistics_give_rows_written_and_row_count() {
    let ev = start_event(json!([output("d", json!({"outputStatistics": {"rowCount": 1000, "size": 52000}}))]));
    let plan = ev.outputs[0].commit_plan("r1", &[spec("dt=2026-08-24")], &policy("UTC", &[])).unwrap();
    let p = &plan.evidence.partitions[0];
    assert_eq!((p.rows_written, p.row_count), (1000, 1000));
    assert_eq!((p.distinct_keys, p.null_keys), (None, None));
    assert_eq!(plan.evidence.marker, "openlineage:r1");
    assert_eq!(p.partition, spec("dt=2026-08-24"));
    assert!(plan.warnings.is_empty());
}

#[test]
fn data_quality_metrics_give_the_key_counts_and_sums() {
    let ev = start_event(json!([{"namespace": "bigquery", "name": "d",
        "outputFacets": {"outputStatistics": {"rowCount": 1000}},
        "facets": {"dataQualityMetrics": {"rowCount": 1020, "columnMetrics": {
            "order_id": {"nullCount": 0, "distinctCount": 990},
            "amount": {"nullCount": 3, "sum": 12345.5}}}}}]));
    let plan = ev.outputs[0].commit_plan("r1", &[spec("dt=2026-08-24")], &policy("UTC", &["order_id"])).unwrap();
    let p = &plan.evidence.partitions[0];
    assert_eq!((p.rows_written, p.row_count), (1000, 1020));
    assert_eq!((p.distinct_keys, p.null_keys), (Some(990), Some(0)));
    assert_eq!(p.metrics, BTreeMap::from([("amount".to_owned(), 12345.5)]));

    let composite =
        ev.outputs[0].commit_plan("r1", &[spec("dt=2026-08-24")], &policy("UTC", &["order_id", "amount"])).unwrap();
    let p = &composite.evidence.partitions[0];
    assert_eq!((p.distinct_keys, p.null_keys), (None, Some(3)));
    assert!(composite.warnings[0].contains("composite key"));

    let unmeasured =
        ev.outputs[0].commit_plan("r1", &[spec("dt=2026-08-24")], &policy("UTC", &["customer_id"])).unwrap();
    assert!(unmeasured.warnings[0].contains("no columnMetrics for the unique key"));
}

#[test]
fn without_counts_or_with_several_partitions_there_is_no_commit() {
    let ev = start_event(json!([output("d", json!({}))]));
    let err = ev.outputs[0].commit_plan("r1", &[spec("dt=2026-08-24")], &policy("UTC", &[])).unwrap_err();
    assert!(err.contains("no evidence"), "{err}");

    let ev = start_event(json!([output("d", json!({"outputStatistics": {"rowCount": 5}}))]));
    let err = ev.outputs[0].commit_plan("r1", &[spec("dt=1/h=0"), spec("dt=1/h=1")], &policy("UTC", &[])).unwrap_err();
    assert!(err.contains("cover 2 partitions"), "{err}");
}

#[test]
fn the_same_event_plans_the_same_requests() {
    let a = start_event(json!([output("d", json!({"outputStatistics": {"rowCount": 7}}))]));
    let b = start_event(json!([output("d", json!({"outputStatistics": {"rowCount": 7}}))]));
    let p = policy("UTC", &[]);
    assert_eq!(a.start_plan(&a.outputs[0], &p), b.start_plan(&b.outputs[0], &p));
    let declared = [spec("dt=2026-08-23")];
    assert_eq!(a.outputs[0].commit_plan("r1", &declared, &p), b.outputs[0].commit_plan("r1", &declared, &p));
}

#[test]
fn failures_are_write_stage_with_the_error_message() {
    let ev = event(json!({"eventType": "FAIL", "run": {"runId": "r", "facets": {"errorMessage": {
        "message": "division by zero", "programmingLanguage": "python", "stackTrace": "Traceback…"}}}}));
    let plan = ev.fail_plan();
    assert_eq!((plan.stage, plan.category), (FailStage::Write, FailCategory::Unknown));
    assert_eq!(plan.message, "division by zero");

    let abort = event(json!({"eventType": "ABORT", "run": {"runId": "r"}}));
    assert_eq!(abort.fail_plan().message, "OpenLineage ABORT event without an errorMessage facet");
}

#[test]
fn what_cannot_be_read_becomes_warnings() {
    let ev = event(json!({"job": {"name": "j"}}));
    assert_eq!(ev.kind, None);
    assert_eq!(ev.warnings.len(), 2, "{:?}", ev.warnings);
    assert!(ev.warnings[0].starts_with("no eventType"));
    assert!(ev.warnings[1].starts_with("run.runId is missing"));

    let ev = event(json!({"eventType": "COMPLETE", "run": {"runId": "r"},
        "outputs": [output("d", json!({"outputStatistics": {"rowCount": -1}}))]}));
    assert_eq!(ev.kind, Some(EventType::Complete));
    assert!(ev.outputs.is_empty());
    assert!(
        ev.warnings[0].starts_with("outputs[0].outputFacets.outputStatistics.rowCount does not follow"),
        "{:?}",
        ev.warnings
    );

    let ev = event(json!({"eventType": "FINISHED", "run": {"runId": "r"}}));
    assert!(ev.warnings[0].contains("\"FINISHED\" is not one of"));
    let w = RunEvent::parse(b"[1, 2]").unwrap().warnings;
    assert_eq!(w[2], "the event is not a JSON object");
    assert!(RunEvent::parse(b"{not json").is_err());
}
