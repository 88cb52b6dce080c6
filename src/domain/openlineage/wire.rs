//! The parts of an OpenLineage `RunEvent` the intake reads, as the spec names
//! them (`https://openlineage.io/spec/2-0-2/OpenLineage.json` and the facet
//! schemas under `https://openlineage.io/spec/facets/`). Everything is
//! optional and unknown fields are ignored: producers send many more facets,
//! and facets may be sent as `{"_deleted": true}`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The body of a `RunEvent`, less the header fields read separately.
#[derive(Debug, Default, Deserialize)]
pub struct Body {
    pub run: Option<Run>,
    pub inputs: Option<Vec<InputDataset>>,
    pub outputs: Option<Vec<OutputDataset>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Run {
    pub facets: Option<RunFacets>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFacets {
    /// `NominalTimeRunFacet`.
    pub nominal_time: Option<NominalTime>,
    /// `ErrorMessageRunFacet`.
    pub error_message: Option<ErrorMessage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NominalTime {
    pub nominal_start_time: Option<String>,
    pub nominal_end_time: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ErrorMessage {
    pub message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputDataset {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub facets: Option<DatasetFacets>,
    pub output_facets: Option<OutputFacets>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputDataset {
    pub name: Option<String>,
    pub facets: Option<DatasetFacets>,
    pub input_facets: Option<InputFacets>,
}

#[derive(Debug, Default, Deserialize)]
pub struct InputFacets {
    /// `InputSubsetInputDatasetFacet`: the partitions the run read.
    pub subset: Option<Subset>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatasetFacets {
    /// `SymlinksDatasetFacet`: Spark names a table by its location and lists
    /// the table's catalog name here.
    pub symlinks: Option<Symlinks>,
    /// `DataQualityMetricsDatasetFacet` (the current, dataset-level facet).
    pub data_quality_metrics: Option<DataQualityMetrics>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFacets {
    /// `OutputStatisticsOutputDatasetFacet`.
    pub output_statistics: Option<OutputStatistics>,
    /// The older `DataQualityMetricsInputDatasetFacet` shape, as some
    /// producers attach it to outputs.
    pub data_quality_metrics: Option<DataQualityMetrics>,
    /// `OutputSubsetOutputDatasetFacet`.
    pub subset: Option<Subset>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Symlinks {
    pub identifiers: Option<Vec<Symlink>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Symlink {
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputStatistics {
    pub row_count: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataQualityMetrics {
    pub row_count: Option<u64>,
    pub column_metrics: Option<BTreeMap<String, ColumnMetrics>>,
}

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ColumnMetrics {
    pub null_count: Option<u64>,
    pub distinct_count: Option<u64>,
    pub sum: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subset {
    pub output_condition: Option<Condition>,
    /// The condition of an input's subset facet.
    pub input_condition: Option<Condition>,
    /// The name the first published schema (`OutputSubsetOutputDatasetFacet`
    /// 1-0-0) gave the condition.
    pub condition: Option<Condition>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub partitions: Option<Vec<SubsetPartition>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct SubsetPartition {
    pub identifier: Option<String>,
    pub dimensions: Option<Dimensions>,
}

/// A partition's dimensions in the order the producer listed them: that
/// order is the order of the partition spec (`year=…/month=…/day=…`), which
/// a `serde_json::Map` (sorted by key) would lose.
#[derive(Debug, Default)]
pub struct Dimensions(pub Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Dimensions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Dimensions;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of dimension values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Dimensions, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    out.push(entry);
                }
                Ok(Dimensions(out))
            }
        }
        d.deserialize_map(InOrder)
    }
}
