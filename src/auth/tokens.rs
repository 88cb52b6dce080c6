//! API tokens: `bgt_` and 43 characters of base64url over 256 random bits.
//! Only the SHA-256 of a token is stored: a leaked database dump holds
//! nothing that authenticates, and with 256 bits of entropy a plain hash
//! needs no salt or stretching.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What every token starts with, so that secret scanners and people can
/// recognise one.
pub const PREFIX: &str = "bgt_";

/// A new secret from the operating system's random source.
pub fn generate() -> String {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).expect("the operating system's random source");
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// The stored form of a secret: SHA-256, hex.
pub fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Compares two hashes in constant time.
pub fn same_hash(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A token name: 1 to 64 of `A-Z a-z 0-9 . _ -`; it appears in the audit log
/// and in URLs.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!("token name {name:?} must be 1 to 64 of A-Z a-z 0-9 . _ -"))
    }
}

/// `90d`, `12h`, `30m`, `1w` (humantime's syntax); see [`check_lifetime`].
pub fn parse_lifetime(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration such as 90d or 12h: {e}"))?;
    check_lifetime(d, &format!("{text:?}"))
}

/// A token lives at least a minute and at most a hundred years; `shown` is
/// how the caller wrote it, for the message.
pub fn check_lifetime(d: Duration, shown: &str) -> Result<Duration, String> {
    if d < Duration::from_secs(60) {
        return Err(format!("{shown} is shorter than a minute"));
    }
    if d > Duration::from_secs(100 * 365 * 86_400) {
        return Err(format!("{shown} is longer than a hundred years"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hashed() {
        let (a, b) = (generate(), generate());
        assert!(a.starts_with("bgt_") && a.len() == 4 + 43, "{a}");
        assert_ne!(a, b);
        assert_eq!(hash(&a).len(), 64);
        assert!(!hash(&a).contains(&a[4..]));
        assert!(same_hash(&hash(&a), &hash(&a)));
        assert!(!same_hash(&hash(&a), &hash(&b)));
    }

    #[test]
    fn lifetimes_and_names_are_checked() {
        assert_eq!(parse_lifetime("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert!(parse_lifetime("5s").is_err());
        assert!(parse_lifetime("soon").is_err());
        assert!(parse_lifetime("101y").unwrap_err().contains("hundred years"));
        assert!(check_lifetime(Duration::from_secs(8_833_947_922_962), "8833947922962 s").is_err());
        assert!(check_lifetime(Duration::from_secs(59), "59 s").unwrap_err().contains("minute"));
        assert!(check_name("team-sales.etl_1").is_ok());
        assert!(check_name("a b").is_err());
        assert!(check_name("").is_err());
    }
}
