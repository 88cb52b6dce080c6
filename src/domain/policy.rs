//! A dataset's policy: how strict its gate is and how its producers write.

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize, ::utoipa::ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [&'static str] = &[$($text),+];
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok(Self::$variant),)+
                    _ => Err(format!("{s:?} is not one of {}", Self::ALL.join(", "))),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use string_enum;

use super::checks::CheckName;

string_enum! {
    /// How much a dataset's gate blocks.
    Tier { Core = "core", Standard = "standard", Scratch = "scratch" }
}

string_enum! {
    /// How the producing task writes its partitions: decides what "rows
    /// written" must add up to.
    WriteMode {
        OverwritePartition = "overwrite_partition",
        DeleteInsertByBatch = "delete_insert_by_batch",
        Merge = "merge",
        Append = "append",
    }
}

/// The policy applied to every commit of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetPolicy {
    pub tier: Tier,
    pub write_mode: WriteMode,
    pub unique_key: Vec<String>,
    pub timezone: String,
    pub max_volume_change: f64,
    pub baseline_periods: u32,
    pub allow_empty: bool,
    pub owner: Option<String>,
    /// Most partitions one `overwrite_partition` batch may replace.
    pub max_partitions_per_batch: u32,
    /// By when each data date should be published.
    pub deadline: Option<super::deadline::Deadline>,
    /// Where this dataset's alerts are POSTed, besides the service-wide URL.
    pub webhook_url: Option<String>,
    /// The Airflow asset (name or URI) each published version is reported
    /// to as an asset event; none: no events.
    pub airflow_asset: Option<String>,
    /// The asset event's partition key: a template over the partition
    /// spec's keys (see [`super::push::PartitionKeyTemplate`]); none: `{dt}`.
    pub partition_key: Option<String>,
    /// Where this dataset's change-feed entries are POSTed as CloudEvents,
    /// besides the service-wide `--events-url`.
    pub events_url: Option<String>,
}

// The policy a dataset gets for what a PUT leaves out, or when a batch is
// started for a dataset nobody described: written here once.
// `DatasetPolicy::default` is made of them, the HTTP layer fills a PUT from
// it, and the store always writes a dataset's every column from a
// `DatasetPolicy`. The `DEFAULT`s on the `datasets` columns in the first
// migrations (0001, 0002) repeat these values but never decide anything: an
// applied migration cannot change, so they stay.

/// The tier of a dataset whose policy does not name one.
pub const DEFAULT_TIER: Tier = Tier::Standard;
pub const DEFAULT_WRITE_MODE: WriteMode = WriteMode::OverwritePartition;
/// The zone a dataset's data dates are read in.
pub const DEFAULT_TIMEZONE: &str = "UTC";
/// Largest allowed `|row_count − baseline| / baseline`.
pub const DEFAULT_MAX_VOLUME_CHANGE: f64 = 0.3;
/// Earlier published data dates the volume baseline is the median of.
pub const DEFAULT_BASELINE_PERIODS: u32 = 7;
pub const DEFAULT_ALLOW_EMPTY: bool = false;
/// Most partitions one `overwrite_partition` batch may replace: a month of days.
pub const DEFAULT_MAX_PARTITIONS_PER_BATCH: u32 = 31;

impl Default for DatasetPolicy {
    fn default() -> Self {
        Self {
            tier: DEFAULT_TIER,
            write_mode: DEFAULT_WRITE_MODE,
            unique_key: Vec::new(),
            timezone: DEFAULT_TIMEZONE.into(),
            max_volume_change: DEFAULT_MAX_VOLUME_CHANGE,
            baseline_periods: DEFAULT_BASELINE_PERIODS,
            allow_empty: DEFAULT_ALLOW_EMPTY,
            owner: None,
            max_partitions_per_batch: DEFAULT_MAX_PARTITIONS_PER_BATCH,
            deadline: None,
            webhook_url: None,
            airflow_asset: None,
            partition_key: None,
            events_url: None,
        }
    }
}

impl DatasetPolicy {
    /// The partition key template asset events use. Templates are parsed
    /// when a policy is written, so an error here means a stored value that
    /// was changed behind the service's back: the caller names it.
    pub fn partition_key_template(&self) -> Result<super::push::PartitionKeyTemplate, String> {
        let raw = self.partition_key.as_deref().unwrap_or(super::push::DEFAULT_PARTITION_KEY);
        super::push::PartitionKeyTemplate::parse(raw).map_err(|e| format!("partition_key {raw:?}: {e}"))
    }
}

impl Tier {
    /// Whether a failing check of this name blocks publication, or only warns.
    pub fn blocks(self, check: CheckName) -> bool {
        match self {
            Tier::Core => true,
            Tier::Standard => check != CheckName::VolumeVsBaseline,
            Tier::Scratch => matches!(check, CheckName::MarkerPresent | CheckName::PartitionsComplete),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::checks::CheckName;

    #[test]
    fn tiers_block_what_the_contract_says() {
        assert!(Tier::Core.blocks(CheckName::VolumeVsBaseline));
        assert!(!Tier::Standard.blocks(CheckName::VolumeVsBaseline));
        assert!(Tier::Standard.blocks(CheckName::UniqueKeys));
        assert!(Tier::Scratch.blocks(CheckName::PartitionsComplete));
        assert!(Tier::Scratch.blocks(CheckName::MarkerPresent));
        assert!(!Tier::Scratch.blocks(CheckName::RowsMatchWritten));
    }

    #[test]
    fn enums_parse_their_wire_names_only() {
        assert_eq!("merge".parse::<WriteMode>().unwrap(), WriteMode::Merge);
        assert!("Merge".parse::<WriteMode>().is_err());
        assert_eq!(Tier::Scratch.to_string(), "scratch");
    }
}
