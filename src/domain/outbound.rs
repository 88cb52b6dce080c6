//! Which hosts the service may send a webhook to. The operator lists them
//! (`--webhook-allow`); the host of the service-wide `--webhook-url` is
//! always on the list. A client can name a URL (a dataset's `webhook_url`),
//! but never one outside the list, so no request can make the service contact
//! an arbitrary host. The same rule is asked when a dataset is written and
//! again just before each delivery.
//!
//! A pattern is a host (`hooks.corp.example`, `10.0.0.7`, `[::1]`), or a glob
//! `*.corp.example` for any host below that domain (not the domain itself),
//! optionally with `:PORT`; without a port any port is allowed. Hosts compare
//! as the URL standard normalises them (lower case, IDNA, IPv4 in dotted form),
//! so `http://0x7f.1/` is `127.0.0.1` and `http://ok.example@evil.example/`
//! is `evil.example`.

use std::fmt;

use url::{Host, Url};

/// One allowed host or family of hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exact {
        host: String,
        port: Option<u16>,
    },
    /// `*.corp.example`: `suffix` is `.corp.example`.
    Below {
        suffix: String,
        port: Option<u16>,
    },
}

impl HostPattern {
    fn parse(raw: &str) -> Result<Self, String> {
        let bad = || format!("{raw:?} is not a host pattern (HOST, HOST:PORT, *.DOMAIN or *.DOMAIN:PORT)");
        if raw.is_empty() || raw.contains(['/', '@', '?', '#', '\\']) || raw.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        let (glob, rest) = match raw.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, raw),
        };
        if rest.contains('*') {
            return Err(bad());
        }
        // Parsed as a URL's authority, so a pattern normalises as URLs do.
        let url = Url::parse(&format!("http://{rest}/")).map_err(|_| bad())?;
        let port = url.port();
        match url.host() {
            Some(Host::Domain(d)) if glob => Ok(Self::Below { suffix: format!(".{d}"), port }),
            Some(_) if glob => Err(format!("{raw:?}: a glob must name a domain, not an address")),
            Some(h) => Ok(Self::Exact { host: h.to_string(), port }),
            None => Err(bad()),
        }
    }

    fn matches(&self, host: &str, port: Option<u16>) -> bool {
        let (ok, want) = match self {
            Self::Exact { host: h, port } => (h == host, port),
            Self::Below { suffix, port } => (host.len() > suffix.len() && host.ends_with(suffix.as_str()), port),
        };
        ok && want.is_none_or(|p| Some(p) == port)
    }
}

/// Why a webhook URL may not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not an absolute http(s) URL with a host.
    NotAUrl(String),
    /// A well-formed URL whose host is not on the list.
    NotAllowed { host: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAUrl(why) => f.write_str(why),
            Self::NotAllowed { host } => write!(
                f,
                "webhook host {host:?} is not allowed: the service only calls the host of --webhook-url and \
                 those listed in --webhook-allow"
            ),
        }
    }
}

/// The hosts webhooks may go to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    patterns: Vec<HostPattern>,
}

impl AllowList {
    /// From `--webhook-allow` entries (each may itself be comma-separated;
    /// blanks are ignored) and the operator's own receivers (`--webhook-url`,
    /// `--airflow-url`, `--events-url`), whose hosts are always allowed (on any port).
    pub fn new<S: AsRef<str>>(entries: &[S], service_urls: &[&str]) -> Result<Self, String> {
        let mut patterns = Vec::new();
        for entry in entries {
            for raw in entry.as_ref().split(',').map(str::trim).filter(|s| !s.is_empty()) {
                patterns.push(HostPattern::parse(raw)?);
            }
        }
        for url in service_urls {
            let (host, _) = host_of(url).map_err(|e| format!("receiver URL: {e}"))?;
            patterns.push(HostPattern::Exact { host, port: None });
        }
        Ok(Self { patterns })
    }

    /// Whether a webhook may be sent to `url`.
    pub fn check(&self, url: &str) -> Result<(), Refusal> {
        let (host, port) = host_of(url).map_err(Refusal::NotAUrl)?;
        if self.patterns.iter().any(|p| p.matches(&host, port)) {
            Ok(())
        } else {
            Err(Refusal::NotAllowed { host })
        }
    }
}

/// The normalised host and the port (explicit or the scheme's) of an http(s) URL.
fn host_of(url: &str) -> Result<(String, Option<u16>), String> {
    let parsed = Url::parse(url).map_err(|e| format!("{url:?} is not an http(s) URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url:?} is not an http(s) URL"));
    }
    let host = parsed.host().ok_or_else(|| format!("{url:?} has no host"))?;
    Ok((host.to_string(), parsed.port_or_known_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str], service: Option<&str>) -> AllowList {
        AllowList::new(entries, &service.into_iter().collect::<Vec<_>>()).expect("valid list")
    }

    fn allowed(l: &AllowList, url: &str) -> bool {
        l.check(url).is_ok()
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let l = AllowList::default();
        assert_eq!(l.check("http://hooks.example/x"), Err(Refusal::NotAllowed { host: "hooks.example".into() }));
        assert!(!allowed(&l, "http://127.0.0.1:9/"));
    }

    #[test]
    fn the_service_webhook_host_is_always_allowed_on_any_port() {
        let l = list(&[], Some("https://alerts.corp.example:8443/hook"));
        assert!(allowed(&l, "https://alerts.corp.example/other"));
        assert!(allowed(&l, "http://ALERTS.corp.example:9000/x"));
        assert!(!allowed(&l, "https://corp.example/"));
        assert!(!allowed(&l, "https://x.alerts.corp.example/"));
    }

    #[test]
    fn exact_hosts_and_ports() {
        let l = list(&["hooks.example, 127.0.0.1:9000", "[::1]"], None);
        assert!(allowed(&l, "http://hooks.example/a"));
        assert!(allowed(&l, "https://Hooks.Example:444/a"));
        assert!(allowed(&l, "http://127.0.0.1:9000/a"));
        assert!(!allowed(&l, "http://127.0.0.1:9001/a"));
        assert!(!allowed(&l, "http://127.0.0.1/a"), "the default port 80 is not 9000");
        assert!(allowed(&l, "http://[::1]:5/a"));
        assert!(!allowed(&l, "http://hooks.example.evil.example/"));
        assert!(!allowed(&l, "http://evilhooks.example/"));
    }

    #[test]
    fn a_glob_allows_hosts_below_a_domain_only() {
        let l = list(&["*.corp.example"], None);
        assert!(allowed(&l, "https://a.corp.example/x"));
        assert!(allowed(&l, "https://a.b.corp.example/x"));
        assert!(!allowed(&l, "https://corp.example/x"), "the domain itself is not below it");
        assert!(!allowed(&l, "https://evilcorp.example/x"));
        assert!(!allowed(&l, "https://a.corp.example.evil.example/x"));
        let with_port = list(&["*.corp.example:8443"], None);
        assert!(allowed(&with_port, "https://a.corp.example:8443/"));
        assert!(!allowed(&with_port, "https://a.corp.example/"));
    }

    #[test]
    fn tricks_with_the_url_resolve_to_the_real_host() {
        let l = list(&["ok.example", "127.0.0.1"], None);
        assert!(!allowed(&l, "http://ok.example@evil.example/"), "userinfo is not the host");
        assert!(!allowed(&l, "http://evil.example/#@ok.example"));
        assert!(!allowed(&l, "http://evil.example\\@ok.example/"));
        assert!(allowed(&l, "http://0x7f.1/"), "0x7f.1 is 127.0.0.1");
        assert!(allowed(&l, "http://2130706433/"), "so is 2130706433");
        assert!(!allowed(&l, "http://127.0.0.2/"));
    }

    #[test]
    fn only_http_urls_with_a_host() {
        let l = list(&["ok.example"], None);
        for bad in ["ftp://ok.example/", "file:///etc/passwd", "ok.example/x", "", "http://", "gopher://ok.example"] {
            assert!(matches!(l.check(bad), Err(Refusal::NotAUrl(_))), "{bad:?}");
        }
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in ["*", "*.", "a.*.example", "http://x", "x/y", "u@x", "*.10.0.0.1", "a b"] {
            assert!(AllowList::new(&[bad], &[]).is_err(), "{bad:?}");
        }
        assert!(AllowList::new(&[""], &[]).unwrap().check("http://x/").is_err(), "blank entries allow nothing");
        assert!(AllowList::new::<&str>(&[], &["not a url"]).is_err());
    }
}
