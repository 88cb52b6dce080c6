//! Staleness: a partition built on upstream data that has since moved on.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::policy::string_enum;
use super::readiness::Standing;

string_enum! {
    /// Why the upstream partition a version was built on no longer stands:
    /// taken out of service, published again, or itself stale.
    StaleCause { Invalidated = "invalidated", Restated = "restated", Stale = "stale" }
}

/// Names the upstream partition a stale version was built on, the version
/// it read and the version current now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Staleness {
    pub dataset: String,
    pub partition: String,
    pub built_on_version: i64,
    pub current_version: i64,
    pub cause: StaleCause,
}

impl Staleness {
    /// Why a partition that read `dataset` `partition` at `built_on` is
    /// stale, given where that input stands now (`standing`, `version`);
    /// `None` while the input is still what was read.
    pub fn of(dataset: &str, partition: &str, built_on: i64, standing: Standing, version: i64) -> Option<Self> {
        let cause = if standing.invalidated {
            StaleCause::Invalidated
        } else if version > built_on {
            StaleCause::Restated
        } else if standing.stale_upstream {
            StaleCause::Stale
        } else {
            return None;
        };
        Some(Self {
            dataset: dataset.to_owned(),
            partition: partition.to_owned(),
            built_on_version: built_on,
            current_version: version,
            cause,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::readiness::PartitionState;

    fn standing(invalidated: bool, stale_upstream: bool) -> Standing {
        Standing { state: PartitionState::Ready, invalidated, stale_upstream }
    }

    #[test]
    fn invalidation_beats_restatement_beats_staleness() {
        let cause = |s, v| Staleness::of("ods.a", "dt=1", 1, s, v).map(|x| x.cause);
        assert_eq!(cause(standing(true, true), 2), Some(StaleCause::Invalidated));
        assert_eq!(cause(standing(false, true), 2), Some(StaleCause::Restated));
        assert_eq!(cause(standing(false, true), 1), Some(StaleCause::Stale));
        assert_eq!(cause(standing(false, false), 1), None);
        let s = Staleness::of("ods.a", "dt=1", 1, standing(false, false), 3).unwrap();
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::json!({"dataset": "ods.a", "partition": "dt=1", "built_on_version": 1, "current_version": 3,
                "cause": "restated"})
        );
    }
}
