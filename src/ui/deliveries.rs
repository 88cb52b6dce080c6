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
    use super::origin;

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
