//! Query strings, read strictly: a repeated single-valued parameter or an
//! unknown one is a 422 naming it, so a typo never widens a filter silently.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, NaiveDate, Utc};

use crate::domain::names::parse_dt;
use crate::error::{Error, Result};

pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn parse(raw: Option<&str>) -> Self {
        Self(form_urlencoded::parse(raw.unwrap_or_default().as_bytes()).into_owned().collect())
    }

    /// All values of a repeatable parameter.
    pub fn all(&mut self, name: &str) -> Vec<String> {
        let (mine, rest) = std::mem::take(&mut self.0).into_iter().partition(|(k, _)| k == name);
        self.0 = rest;
        mine.into_iter().map(|(_, v)| v).collect()
    }

    /// A parameter given at most once; an empty value counts as absent.
    pub fn one(&mut self, name: &str) -> Result<Option<String>> {
        let mut vs = self.all(name);
        match vs.len() {
            0 => Ok(None),
            1 => Ok(Some(vs.remove(0)).filter(|v| !v.is_empty())),
            _ => Err(Error::invalid(name, format!("{name} may be given only once"))),
        }
    }

    pub fn required(&mut self, name: &str) -> Result<String> {
        self.one(name)?.ok_or_else(|| Error::invalid_code("missing_field", name, format!("{name} is required")))
    }

    pub fn date(&mut self, name: &str) -> Result<Option<NaiveDate>> {
        self.one(name)?.map(|v| parse_dt(&v).map_err(|e| Error::invalid(name, e.to_string()))).transpose()
    }

    pub fn time(&mut self, name: &str) -> Result<Option<DateTime<Utc>>> {
        self.one(name)?
            .map(|v| {
                DateTime::parse_from_rfc3339(&v)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| Error::invalid(name, format!("{name}: {v:?} is not an RFC 3339 time: {e}")))
            })
            .transpose()
    }

    /// `limit`, 1 to `max`, `default` when absent.
    pub fn limit(&mut self, default: i64, max: i64) -> Result<i64> {
        match self.one("limit")? {
            None => Ok(default),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(Error::invalid("limit", format!("limit must be a whole number from 1 to {max}, got {v:?}"))),
            },
        }
    }

    /// Refuses whatever parameter nobody asked for.
    pub fn finish(self) -> Result<()> {
        match self.0.into_iter().next() {
            None => Ok(()),
            Some((k, _)) => {
                Err(Error::invalid_code("unknown_field", k.clone(), format!("unknown query parameter {k:?}")))
            }
        }
    }
}

/// Cursors are opaque to clients: URL-safe base64 of the keyset position.
pub fn encode_cursor<T: serde::Serialize>(position: &T) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_string(position).expect("a keyset position serialises"))
}

pub fn decode_cursor<T: serde::de::DeserializeOwned>(cursor: &str) -> Result<T> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| Error::invalid("cursor", "cursor is not one this service handed out"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_and_unknown_parameters_are_refused() {
        let mut p = Params::parse(Some("partition=dt%3D2026-08-24&partition=dt%3D2026-08-25&dataset=a&dataset=b&x=1"));
        assert_eq!(p.all("partition"), vec!["dt=2026-08-24", "dt=2026-08-25"]);
        assert!(p.one("dataset").is_err());
        assert!(p.finish().is_err());
        let mut p = Params::parse(Some("limit=0"));
        assert!(p.limit(100, 500).is_err());
        let mut p = Params::parse(Some("limit=500"));
        assert_eq!(p.limit(100, 500).unwrap(), 500);
        assert!(p.finish().is_ok());
    }

    #[test]
    fn cursors_round_trip_and_reject_forgeries() {
        let c = encode_cursor(&serde_json::json!([42]));
        assert_eq!(decode_cursor::<(i64,)>(&c).unwrap(), (42,));
        assert!(decode_cursor::<(i64,)>("not-a-cursor!").is_err());
    }
}
