//! Scopes: what a token or a JWT may do. `read`, `produce:<glob>`,
//! `operate:<glob>` and `admin`, with globs over dataset names in which `*`
//! matches any run of characters (dots included).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One scope, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every GET, `/ready` included.
    Read,
    /// Start, heartbeat, written, commit and fail batches of matching
    /// datasets; OpenLineage events whose outputs all match.
    Produce(String),
    /// Dataset policies, invalidations and repairs of matching datasets.
    Operate(String),
    /// Everything, tokens and the whole audit log included.
    Admin,
}

/// What a route asks of the caller, once the dataset(s) it touches are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Produce,
    Operate,
    Admin,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Produce => "produce",
            Kind::Operate => "operate",
            Kind::Admin => "admin",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a scope: use read, produce:<glob>, operate:<glob> or admin")]
pub struct BadScope(pub String);

impl FromStr for Scope {
    type Err = BadScope;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let glob = |g: &str| {
            let ok = !g.is_empty()
                && g.len() <= 200
                // A dataset's own characters (`:` included) and `*`.
                && g.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '_' | '-' | '*'));
            if ok {
                Ok(g.to_owned())
            } else {
                Err(BadScope(s.to_owned()))
            }
        };
        match s.split_once(':') {
            None if s == "read" => Ok(Scope::Read),
            None if s == "admin" => Ok(Scope::Admin),
            Some(("produce", g)) => glob(g).map(Scope::Produce),
            Some(("operate", g)) => glob(g).map(Scope::Operate),
            _ => Err(BadScope(s.to_owned())),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Read => f.write_str("read"),
            Scope::Admin => f.write_str("admin"),
            Scope::Produce(g) => write!(f, "produce:{g}"),
            Scope::Operate(g) => write!(f, "operate:{g}"),
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `*` matches any run of characters (none included); everything else
/// matches itself.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if name.len() < first.len() + last.len() || !name.starts_with(first) || !name.ends_with(last) {
        return false;
    }
    // Match the middle pieces left to right, greedily taking the earliest
    // occurrence: for `*` globs that is enough to find a match if one exists.
    let mut rest = &name[first.len()..name.len() - last.len()];
    for piece in &parts[1..parts.len() - 1] {
        match rest.find(piece) {
            Some(i) => rest = &rest[i + piece.len()..],
            None => return false,
        }
    }
    true
}

/// Does any of `scopes` allow `kind` on every one of `datasets`? With no
/// dataset known (a body the handler will refuse anyway), any scope of the
/// kind is enough. Returns the scope that was needed when not.
pub fn check(scopes: &[Scope], kind: Kind, datasets: &[String]) -> Result<(), String> {
    if scopes.contains(&Scope::Admin) {
        return Ok(());
    }
    let globs = || {
        scopes.iter().filter_map(move |s| match (kind, s) {
            (Kind::Produce, Scope::Produce(g)) | (Kind::Operate, Scope::Operate(g)) => Some(g.as_str()),
            _ => None,
        })
    };
    match kind {
        Kind::Admin => Err("admin".to_owned()),
        Kind::Read if scopes.contains(&Scope::Read) => Ok(()),
        Kind::Read => Err("read".to_owned()),
        Kind::Produce | Kind::Operate => {
            if datasets.is_empty() {
                return if globs().next().is_some() { Ok(()) } else { Err(format!("{}:<dataset>", kind.as_str())) };
            }
            match datasets.iter().find(|d| !globs().any(|g| glob_matches(g, d))) {
                None => Ok(()),
                Some(d) => Err(format!("{}:{d}", kind.as_str())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_any_run_of_characters() {
        assert!(glob_matches("sales.*", "sales.orders"));
        assert!(glob_matches("sales.*", "sales."));
        assert!(!glob_matches("sales.*", "salesx"));
        assert!(glob_matches("*", "anything.at.all"));
        assert!(glob_matches("*.orders", "eu.sales.orders"));
        assert!(glob_matches("a*b*c", "aXXbYYc"));
        assert!(!glob_matches("a*b*c", "aXXcYYb"));
        assert!(glob_matches("a*a", "aa"));
        assert!(!glob_matches("a*a", "a"));
        assert!(glob_matches("sales.orders", "sales.orders"));
        assert!(!glob_matches("sales.orders", "sales.orders2"));
    }

    #[test]
    fn scopes_parse_and_print_back() {
        for s in ["read", "admin", "produce:sales.*", "operate:*", "produce:kafka:orders"] {
            assert_eq!(s.parse::<Scope>().unwrap().to_string(), s);
        }
        for bad in ["write", "produce:", "produce", "operate:a b", "admin:x", ""] {
            assert!(bad.parse::<Scope>().is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn each_scope_allows_only_its_own_kind() {
        let p: Vec<Scope> = vec!["produce:sales.*".parse().unwrap()];
        let ds = |d: &str| vec![d.to_owned()];
        assert_eq!(check(&p, Kind::Produce, &ds("sales.orders")), Ok(()));
        assert_eq!(check(&p, Kind::Produce, &ds("hr.people")), Err("produce:hr.people".into()));
        assert_eq!(
            check(&p, Kind::Produce, &["sales.a".into(), "hr.b".into()]),
            Err("produce:hr.b".into()),
            "every dataset must match"
        );
        assert_eq!(check(&p, Kind::Operate, &ds("sales.orders")), Err("operate:sales.orders".into()));
        assert_eq!(check(&p, Kind::Read, &[]), Err("read".into()));
        assert_eq!(check(&p, Kind::Admin, &[]), Err("admin".into()));
        assert_eq!(check(&[Scope::Admin], Kind::Operate, &ds("x")), Ok(()));
        assert_eq!(check(&[Scope::Read], Kind::Read, &[]), Ok(()));
        assert_eq!(check(&[Scope::Read], Kind::Produce, &[]), Err("produce:<dataset>".into()));
    }

    #[test]
    fn every_scope_a_refusal_names_can_be_granted() {
        // Dataset names may hold `:`; the scope a refusal asks for must parse
        // and then be enough.
        for dataset in ["kafka:orders", "a.b", "x-y_z:1"] {
            let needed = check(&[Scope::Read], Kind::Produce, &[dataset.to_owned()]).unwrap_err();
            let scope: Scope = needed.parse().unwrap_or_else(|e| panic!("{needed}: {e}"));
            assert_eq!(check(&[scope], Kind::Produce, &[dataset.to_owned()]), Ok(()), "{needed}");
        }
    }
}
