//! Push: what batchgate tells others when a partition's readiness changes.
//! No I/O here; the outbox (`src/outbox/`) sends what these rules build.
//!
//! - An **Airflow asset event** for each published version of a partition of
//!   a dataset with an `airflow_asset`: its `partition_key` rendered from
//!   the dataset's template over the partition spec's keys (default `{dt}`),
//!   and an `extra` that says which batch and version it is and, for a
//!   restatement, what it replaced.
//! - A **CloudEvent** (1.0, structured JSON) for every change-feed entry,
//!   whose `id` is the entry's feed cursor, so a receiver dedupes by `id`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::policy::string_enum;

string_enum! {
    /// Where a delivery goes: an alert's webhook, an Airflow asset event, a CloudEvent.
    Target { Webhook = "webhook", Airflow = "airflow", Events = "events" }
}

/// The partition key template a dataset without one uses.
pub const DEFAULT_PARTITION_KEY: &str = "{dt}";

/// The change-feed cursor of entry `id`, as `GET /v1/changes` hands it out
/// (and as a CloudEvent's `id`).
pub fn feed_cursor(id: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("[{id}]"))
}

/// One piece of a partition key template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Key(String),
}

/// `{region}|{dt}`: literal text and `{key}`s naming partition spec keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionKeyTemplate {
    pieces: Vec<Piece>,
}

impl PartitionKeyTemplate {
    /// Parses a template: at least one `{key}` (letters, digits, `_`), no
    /// stray braces, at most 200 characters.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.len() > 200 {
            return Err("partition_key is longer than 200 characters".into());
        }
        let mut pieces = Vec::new();
        let mut rest = raw;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                None => {
                    pieces.push(Piece::Text(rest.to_owned()));
                    rest = "";
                }
                Some(i) if rest.as_bytes()[i] == b'}' => {
                    return Err(format!("partition_key {raw:?}: a '}}' without its '{{'"));
                }
                Some(i) => {
                    if i > 0 {
                        pieces.push(Piece::Text(rest[..i].to_owned()));
                    }
                    let after = &rest[i + 1..];
                    let end = after.find('}').ok_or_else(|| format!("partition_key {raw:?}: a '{{' is not closed"))?;
                    let key = &after[..end];
                    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        return Err(format!(
                            "partition_key {raw:?}: {{{key}}} is not a partition spec key (letters, digits and '_')"
                        ));
                    }
                    pieces.push(Piece::Key(key.to_owned()));
                    rest = &after[end + 1..];
                }
            }
        }
        if !pieces.iter().any(|p| matches!(p, Piece::Key(_))) {
            return Err(format!("partition_key {raw:?} names no partition spec key, e.g. {DEFAULT_PARTITION_KEY}"));
        }
        if pieces.iter().any(|p| matches!(p, Piece::Text(t) if t.chars().any(char::is_control))) {
            return Err(format!("partition_key {raw:?} contains a control character"));
        }
        Ok(Self { pieces })
    }

    /// The keys the template names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Key(k) => Some(k.as_str()),
            Piece::Text(_) => None,
        })
    }

    /// The first key of the template that partition spec `spec` (`k=v/…`) lacks.
    pub fn missing_key(&self, spec: &str) -> Option<&str> {
        self.keys().find(|k| value_of(spec, k).is_none())
    }

    /// The partition key of `spec`; `Err` names a key the spec lacks.
    pub fn render(&self, spec: &str) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Key(k) => {
                    out.push_str(value_of(spec, k).ok_or_else(|| format!("partition {spec:?} has no key {k:?}"))?)
                }
            }
        }
        Ok(out)
    }
}

fn value_of<'a>(spec: &'a str, key: &str) -> Option<&'a str> {
    spec.split('/').filter_map(|p| p.split_once('=')).find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// The `extra` of an asset event: which batch published which version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssetEventExtra {
    pub batch_id: String,
    pub version: i64,
    pub row_count: Option<i64>,
    pub published_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restatement: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_row_count: Option<i64>,
}

impl AssetEventExtra {
    /// Version `version` of a partition, published by `batch_id`; from
    /// version 2 on it is a restatement of the one before.
    pub fn new(
        batch_id: String,
        version: i64,
        row_count: Option<i64>,
        published_at: DateTime<Utc>,
        superseded_row_count: Option<i64>,
    ) -> Self {
        let restated = version > 1;
        Self {
            batch_id,
            version,
            row_count,
            published_at,
            restatement: restated.then_some(true),
            superseded_version: restated.then_some(version - 1),
            superseded_row_count: if restated { superseded_row_count } else { None },
        }
    }
}

/// An asset event waiting in the outbox. The asset is named as the policy
/// names it; its Airflow id is looked up when it is sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingAssetEvent {
    pub asset: String,
    pub partition_key: String,
    pub extra: AssetEventExtra,
}

impl PendingAssetEvent {
    /// Whether `asset` is a URI (looked up by `uri_pattern`) rather than a name.
    pub fn asset_is_uri(&self) -> bool {
        self.asset.contains("://")
    }

    /// Whether an event Airflow already holds (`GET /api/v2/assets/events`)
    /// is this one: same partition key, batch and version. Before sending an
    /// event again after an attempt whose outcome is unknown, the sender asks.
    pub fn is_recorded_as(&self, existing: &Value) -> bool {
        let extra = &existing["extra"];
        existing["partition_key"].as_str() == Some(self.partition_key.as_str())
            && extra["batch_id"].as_str() == Some(self.extra.batch_id.as_str())
            && extra["version"].as_i64() == Some(self.extra.version)
    }
}

/// A change-feed entry as a CloudEvent (1.0, structured mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudEvent {
    pub specversion: String,
    /// The change-feed cursor of the entry.
    pub id: String,
    pub source: String,
    /// `io.batchgate.partition.<kind>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `<dataset>/<partition spec>`.
    pub subject: String,
    pub time: DateTime<Utc>,
    pub datacontenttype: String,
    pub data: Value,
}

/// The `source` of every CloudEvent batchgate sends.
pub const EVENT_SOURCE: &str = "batchgate";

impl CloudEvent {
    /// The event of change-feed entry `id`; `data` is the entry as the feed lists it.
    pub fn of_change(id: i64, kind: &str, dataset: &str, partition: &str, at: DateTime<Utc>, data: Value) -> Self {
        Self {
            specversion: "1.0".into(),
            id: feed_cursor(id),
            source: EVENT_SOURCE.into(),
            kind: format!("io.batchgate.partition.{kind}"),
            subject: format!("{dataset}/{partition}"),
            time: at,
            datacontenttype: "application/json".into(),
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_render_from_the_spec_keys() {
        let t = PartitionKeyTemplate::parse("{region}|{dt}").unwrap();
        assert_eq!(t.render("dt=2026-08-24/region=cn").unwrap(), "cn|2026-08-24");
        assert_eq!(t.keys().collect::<Vec<_>>(), ["region", "dt"]);
        assert_eq!(t.missing_key("dt=2026-08-24"), Some("region"));
        assert!(t.render("dt=2026-08-24").is_err());
        let d = PartitionKeyTemplate::parse(DEFAULT_PARTITION_KEY).unwrap();
        assert_eq!(d.render("dt=2026-08-24").unwrap(), "2026-08-24");
        assert_eq!(d.missing_key("dt=2026-08-24/hour=03"), None);
    }

    #[test]
    fn bad_templates_are_refused() {
        for bad in ["", "dt", "{", "}", "{dt", "dt}", "{}", "{d t}", "{a-b}", "x{dt}}", "{{dt}}"] {
            assert!(PartitionKeyTemplate::parse(bad).is_err(), "{bad:?}");
        }
        assert!(PartitionKeyTemplate::parse(&"{dt}".repeat(60)).is_err());
    }

    #[test]
    fn a_restatement_says_what_it_replaced() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let first = AssetEventExtra::new("b-1".into(), 1, Some(100), at, None);
        assert_eq!(
            serde_json::to_value(&first).unwrap(),
            json!({"batch_id": "b-1", "version": 1, "row_count": 100, "published_at": "1970-01-01T00:00:00Z"})
        );
        let second = AssetEventExtra::new("b-2".into(), 2, Some(120), at, Some(100));
        let v = serde_json::to_value(&second).unwrap();
        assert_eq!((v["restatement"].clone(), v["superseded_version"].clone()), (json!(true), json!(1)));
        assert_eq!(v["superseded_row_count"], 100);
    }

    #[test]
    fn a_recorded_event_matches_on_key_batch_and_version() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let e = PendingAssetEvent {
            asset: "dws.order_detail".into(),
            partition_key: "2026-08-24".into(),
            extra: AssetEventExtra::new("b-1".into(), 1, Some(1), at, None),
        };
        assert!(!e.asset_is_uri());
        let same =
            json!({"partition_key": "2026-08-24", "extra": {"batch_id": "b-1", "version": 1, "from_rest_api": true}});
        assert!(e.is_recorded_as(&same));
        for other in [
            json!({"partition_key": "2026-08-25", "extra": {"batch_id": "b-1", "version": 1}}),
            json!({"partition_key": "2026-08-24", "extra": {"batch_id": "b-2", "version": 1}}),
            json!({"partition_key": "2026-08-24", "extra": {"batch_id": "b-1", "version": 2}}),
            json!({"partition_key": "2026-08-24"}),
        ] {
            assert!(!e.is_recorded_as(&other), "{other}");
        }
    }

    #[test]
    fn a_cloud_event_is_identified_by_its_feed_cursor() {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let e = CloudEvent::of_change(42, "published", "dws.x", "dt=2026-08-24", at, json!({}));
        assert_eq!(e.id, feed_cursor(42));
        assert_eq!(e.id, URL_SAFE_NO_PAD.encode("[42]"));
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "io.batchgate.partition.published");
        assert_eq!(v["subject"], "dws.x/dt=2026-08-24");
        assert_eq!(v["specversion"], "1.0");
    }
}
