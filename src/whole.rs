//! Whole numbers as JSON writes them. JSON has one number type: `1000`,
//! `1000.0` and `1e3` are the same integer to JSON Schema (the spec's
//! `integer` accepts all three) and to a Python task that counted its rows
//! in a float. The API's integer fields take them with
//! `#[serde(deserialize_with = "crate::whole::deserialize")]` (or
//! `crate::whole::option` for an optional field). A fraction stays refused,
//! and so does a whole number a double cannot hold exactly (beyond 2^53: the
//! digits sent may not be the number read), each a 422 naming the field.

use std::any::type_name;

use serde::de::{Deserializer, Error, Unexpected};
use serde::Deserialize;
use serde_json::Number;

/// The largest integer below which every integer is exactly a double.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// A required integer field.
pub fn deserialize<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64> + TryFrom<i64>,
{
    integer(Number::deserialize(d)?)
}

/// An optional integer field (absent or `null` is `None`).
pub fn option<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64> + TryFrom<i64>,
{
    Option::<Number>::deserialize(d)?.map(integer).transpose()
}

/// The number as a `T`, with serde's own wording when it is not one
/// ("invalid type: floating point `1.5`, expected u64").
fn integer<T: TryFrom<u64> + TryFrom<i64>, E: Error>(n: Number) -> Result<T, E> {
    let expected = type_name::<T>();
    let unsigned = |u: u64| T::try_from(u).map_err(|_| E::invalid_value(Unexpected::Unsigned(u), &expected));
    let signed = |i: i64| T::try_from(i).map_err(|_| E::invalid_value(Unexpected::Signed(i), &expected));
    if let Some(u) = n.as_u64() {
        return unsigned(u);
    }
    if let Some(i) = n.as_i64() {
        return signed(i);
    }
    let f = n.as_f64().expect("a JSON number is a u64, an i64 or an f64");
    if f.fract() != 0.0 || f.abs() > EXACT {
        return Err(E::invalid_type(Unexpected::Float(f), &expected));
    }
    // Whole and within ±2^53: the casts are exact.
    if f < 0.0 {
        signed(f as i64)
    } else {
        unsigned(f as u64)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Counts {
        #[serde(deserialize_with = "super::deserialize")]
        rows: u64,
        #[serde(default, deserialize_with = "super::option")]
        lease: Option<i64>,
        #[serde(default, deserialize_with = "super::option")]
        days: Option<u32>,
    }

    fn read(v: serde_json::Value) -> Result<Counts, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_in_any_notation_are_integers() {
        let want = Counts { rows: 1000, lease: Some(-5), days: None };
        assert_eq!(read(json!({"rows": 1000, "lease": -5})), Ok(want));
        let from_text = |t: &str| read(serde_json::from_str(t).unwrap());
        assert_eq!(
            from_text(r#"{"rows": 1000.0, "lease": -5.0}"#),
            Ok(Counts { rows: 1000, lease: Some(-5), days: None })
        );
        assert_eq!(from_text(r#"{"rows": 1e3, "days": 7.0}"#), Ok(Counts { rows: 1000, lease: None, days: Some(7) }));
        assert_eq!(from_text(r#"{"rows": 9007199254740992.0, "lease": null}"#).map(|c| c.rows), Ok(1 << 53));
        assert_eq!(from_text(r#"{"rows": -0.0}"#).map(|c| c.rows), Ok(0));
    }

    #[test]
    fn fractions_out_of_range_and_inexact_doubles_are_refused() {
        let from_text = |t: &str| read(serde_json::from_str(t).unwrap()).unwrap_err();
        assert_eq!(from_text(r#"{"rows": 1000.5}"#), "invalid type: floating point `1000.5`, expected u64");
        assert_eq!(from_text(r#"{"rows": -1}"#), "invalid value: integer `-1`, expected u64");
        assert_eq!(from_text(r#"{"rows": -1.0}"#), "invalid value: integer `-1`, expected u64");
        assert_eq!(
            from_text(r#"{"rows": 1, "days": 5000000000}"#),
            "invalid value: integer `5000000000`, expected u32"
        );
        assert!(from_text(r#"{"rows": 1e16}"#).starts_with("invalid type: floating point"), "beyond 2^53");
        assert!(from_text(r#"{"rows": "12"}"#).starts_with("invalid type: string"));
    }
}
