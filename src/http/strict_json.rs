//! Every JSON body is read here first, by one visitor over every key and
//! string it holds, before any handler sees a field:
//!
//! - a key repeated in one object is `422 duplicate_field` (a last-one-wins
//!   parser would let `"null_keys": 7, "null_keys": 0` silently replace
//!   evidence);
//! - a NUL character in a key or a string is `422 invalid_field` (PostgreSQL
//!   cannot store it in text or jsonb, SQLite would; both refuse it here);
//! - a number too large for a double (`1e999`) is `422 invalid_field`, never
//!   an infinity.
//!
//! Each names the field by its path (`partitions[0].metrics.amount`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::Error;

/// Reads a body into a [`Value`], refusing what [the module](self) lists.
/// Malformed JSON stays `400 malformed_json`.
pub fn read(bytes: &[u8]) -> Result<Value, Error> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Node { path: String::new(), found: &found }.deserialize(&mut de).and_then(|v| de.end().map(|_| v));
    if let Some(refusal) = found.into_inner() {
        return Err(refusal);
    }
    parsed.map_err(|e| Error::Request {
        status: 400,
        code: "malformed_json",
        message: format!("the body is not valid JSON: {e}"),
    })
}

/// Where a NUL, a repeat or an overflow was seen: the first one wins.
type Found<'a> = &'a RefCell<Option<Error>>;

fn refuse<E: de::Error>(found: Found<'_>, error: Error) -> E {
    let message = error.to_string();
    found.borrow_mut().get_or_insert(error);
    E::custom(message)
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn nul_in(path: &str, what: &str) -> Error {
    let field = if path.is_empty() { "(body)".to_owned() } else { path.replace('\0', "\\u0000") };
    Error::invalid(field.clone(), format!("{field}: {what} contains a NUL character (\\u0000), which is never data"))
}

/// One value of the document, at `path`.
struct Node<'a> {
    path: String,
    found: Found<'a>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let path = self.path.clone();
        let found = self.found;
        d.deserialize_any(self).inspect_err(|e| {
            // serde_json refuses `1e999` itself; say which field held it.
            if found.borrow().is_none() && e.to_string().starts_with("number out of range") {
                let field = if path.is_empty() { "(body)".to_owned() } else { path.clone() };
                found.borrow_mut().replace(Error::invalid(
                    field.clone(),
                    format!("{field}: the number is too large to be represented (not a finite double)"),
                ));
            }
        })
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        match Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => Err(refuse(
                self.found,
                Error::invalid(self.path.clone(), format!("{}: not a finite number", self.path)),
            )),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        if v.contains('\0') {
            return Err(refuse(self.found, nul_in(&self.path, "the text")));
        }
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        if v.contains('\0') {
            return Err(refuse(self.found, nul_in(&self.path, "the text")));
        }
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) =
            seq.next_element_seed(Node { path: format!("{}[{}]", self.path, out.len()), found: self.found })?
        {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = child(&self.path, &key);
            if key.contains('\0') {
                return Err(refuse(self.found, nul_in(&path, "the key")));
            }
            if !seen.insert(key.clone()) {
                let message = format!(
                    "field {path:?} is given twice (the second would silently replace the first, so it is refused)"
                );
                return Err(refuse(self.found, Error::invalid_code("duplicate_field", path, message)));
            }
            let value = map.next_value_seed(Node { path, found: self.found })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(body: &str) -> (&'static str, String) {
        match read(body.as_bytes()) {
            Err(Error::Invalid { code, field, .. }) => (code, field.unwrap()),
            other => panic!("expected a 422 for {body}, got {other:?}"),
        }
    }

    #[test]
    fn a_repeated_key_is_refused_by_its_path() {
        assert_eq!(refusal(r#"{"null_keys": 7, "null_keys": 0}"#), ("duplicate_field", "null_keys".into()));
        assert_eq!(
            refusal(r#"{"partitions": [{"p": 1}, {"null_keys": 7, "x": {}, "null_keys": 0}]}"#),
            ("duplicate_field", "partitions[1].null_keys".into())
        );
        // The same key in two different objects is no repeat.
        assert!(read(br#"{"a": {"k": 1}, "b": {"k": 1}, "k": [{"k": 1}, {"k": 2}]}"#).is_ok());
    }

    #[test]
    fn nul_anywhere_is_refused_by_its_path() {
        assert_eq!(refusal(r#"{"message": "a\u0000b"}"#), ("invalid_field", "message".into()));
        assert_eq!(refusal(r#"{"m": {"k\u0000": 1}}"#), ("invalid_field", "m.k\\u0000".into()));
        assert_eq!(refusal(r#"{"s": ["ok", "\u0000"]}"#), ("invalid_field", "s[1]".into()));
        assert_eq!(refusal(r#""\u0000""#), ("invalid_field", "(body)".into()));
    }

    #[test]
    fn numbers_beyond_a_double_are_refused_not_infinite() {
        assert_eq!(refusal(r#"{"metrics": {"amount": 1e999}}"#), ("invalid_field", "metrics.amount".into()));
        assert_eq!(refusal(r#"[-1e400]"#), ("invalid_field", "[0]".into()));
        let v = read(br#"{"a": 1.5e308, "b": -3, "c": 18446744073709551615}"#).unwrap();
        assert_eq!(v["a"].as_f64(), Some(1.5e308));
        assert_eq!(v["c"].as_u64(), Some(u64::MAX));
    }

    #[test]
    fn malformed_json_stays_a_400() {
        for bad in ["{not json", r#"{"a": 1} x"#, ""] {
            assert!(matches!(read(bad.as_bytes()), Err(Error::Request { status: 400, .. })), "{bad}");
        }
    }
}
