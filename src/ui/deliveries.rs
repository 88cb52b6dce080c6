//! What was pushed about a dataset (`/v1/deliveries?dataset=`), on its page:
//! each CloudEvent, Airflow asset event and alert webhook, whether it went,
//! and the last error of one that has not. The receiver shows as its origin
//! only: a URL may carry a credential in its path or query.

use maud::{html, Markup};

use super::{badge, enc, lineage_href, when};
use crate::store::{DeliveryQuery, DeliveryRecord};

/// How many deliveries a dataset's page shows (newest first).
pub(super) const SHOWN: i64 = 20;

/// The query for a dataset's latest deliveries.
pub(super) fn latest(dataset: &str) -> DeliveryQuery {
    DeliveryQuery { target: None, state: None, dataset: Some(dataset.to_owned()), limit: SHOWN, after_id: None }
}

/// `scheme://host[:port]` of a receiver, or `—` when it does not parse.
fn origin(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) if u.has_host() => u.origin().ascii_serialization(),
        _ => "—".to_owned(),
    }
}

pub(super) fn section(dataset: &str, items: &[DeliveryRecord]) -> Markup {
    html! {
        section aria-labelledby="deliveries-h" {
            h2 #deliveries-h { "Deliveries" }
            p.dim {
                "The latest " (SHOWN) " pushes about this dataset (CloudEvents, Airflow asset events, alert webhooks), newest first. "
                a href={ "/v1/deliveries?dataset=" (enc(dataset)) } { "All (JSON)" }
            }
            @if items.is_empty() {
                p.empty { "No deliveries: nothing about this dataset was pushed (no receiver is set, or nothing changed)." }
            } @else {
                table.deliveries {
                    thead { tr { th { "Queued" } th { "Target" } th { "Receiver" } th { "Partition" } th { "State" } th { "Attempts" } th { "Outcome" } } }
                    tbody {
                        @for d in items {
                            tr {
                                td { (when(d.created_at)) }
                                td { (d.target.as_str()) }
                                td.mono { (origin(&d.url)) }
                                td {
                                    @match &d.partition {
                                        Some(p) => a href=(lineage_href(dataset, p)) { (p) },
                                        None => "—",
                                    }
                                }
                                td { (badge(&d.state)) }
                                td { (d.attempts) }
                                td {
                                    @if let Some(at) = d.delivered_at {
                                        "delivered " (when(at))
                                    } @else {
                                        @if let Some(at) = d.given_up_at {
                                            "given up " (when(at))
                                        } @else {
                                            "next attempt " (when(d.next_attempt_at))
                                        }
                                        @if let Some(e) = &d.last_error { br; span.error { (e) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};
    use sqlx::types::Json;

    use super::{origin, section};
    use crate::domain::push::Target;
    use crate::store::DeliveryRecord;

    fn at(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 8, 24, 10, minute, 0).unwrap()
    }

    fn delivery(
        id: i64,
        state: &str,
        delivered: Option<u32>,
        given_up: Option<u32>,
        error: Option<&str>,
    ) -> DeliveryRecord {
        DeliveryRecord {
            id,
            target: Target::Events,
            state: state.to_owned(),
            url: "http://127.0.0.1:9000/events?token=secret".to_owned(),
            dataset: Some("sales.orders".to_owned()),
            partition: Some("dt=2026-08-24".to_owned()),
            alert_id: None,
            cursor: None,
            change_id: Some(id),
            attempts: 3,
            last_error: error.map(str::to_owned),
            next_attempt_at: at(30),
            created_at: at(0),
            delivered_at: delivered.map(at),
            given_up_at: given_up.map(at),
            payload: Json(serde_json::json!({})),
        }
    }

    /// The text of each row's last cell (the outcome), tags dropped and a
    /// line break read as a space.
    fn outcomes(html: &str) -> Vec<String> {
        html.split("<tr>")
            .skip(2)
            .map(|row| {
                let cell = row.rsplit("<td>").next().unwrap_or_default().replace("<br>", " ");
                let mut text = String::new();
                let mut in_tag = false;
                for ch in cell.chars() {
                    match ch {
                        '<' => in_tag = true,
                        '>' => in_tag = false,
                        _ if !in_tag => text.push(ch),
                        _ => {}
                    }
                }
                text
            })
            .collect()
    }

    /// Each state's outcome: when it went, when it was given up and why, or
    /// when it is tried next and why it has not gone yet. The receiver shows
    /// without its query.
    #[test]
    fn each_delivery_says_how_it_ended_or_when_it_is_tried_next() {
        let items = [
            delivery(1, "delivered", Some(5), None, Some("an earlier attempt's error")),
            delivery(2, "given_up", None, Some(20), Some("HTTP 500 from the receiver")),
            delivery(3, "pending", None, None, Some("connection refused")),
        ];
        let html = section("sales.orders", &items).into_string();
        assert_eq!(
            outcomes(&html),
            [
                "delivered 2026-08-24 10:05:00 UTC",
                "given up 2026-08-24 10:20:00 UTC HTTP 500 from the receiver",
                "next attempt 2026-08-24 10:30:00 UTC connection refused",
            ]
        );
        assert!(!html.contains("secret"), "{html}");
    }

    #[test]
    fn a_receiver_shows_without_its_path_query_or_credentials() {
        assert_eq!(
            origin("https://user:secret@hooks.example.com:8443/t/abc?token=x"),
            "https://hooks.example.com:8443"
        );
        assert_eq!(origin("http://127.0.0.1:9000/events"), "http://127.0.0.1:9000");
        assert_eq!(origin("not a url"), "—");
    }
}
