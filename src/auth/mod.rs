//! Who is calling, and what they may do.
//!
//! Every request passes [`layer::gate`] before its handler: it turns the
//! request into an [`Actor`] (a token's name, `jwt:<sub>`, or `anonymous`
//! with auth off), looks the route up in [`rules::RULES`], checks the
//! actor's [`scopes`] against the dataset(s) the request touches, and after
//! the handler writes one audit row per write.
//!
//! # For other front ends (the web console)
//! Verify a bearer secret with [`Authenticator::authenticate`]: it answers
//! the [`Actor`] (name and scopes) or why not ([`AuthError`], whose
//! [`AuthError::code`] is the API's error code). Then ask
//! [`Actor::allows`]`(kind, datasets)` before acting: `Ok(())` or the scope
//! that was needed. Both read the same tokens, cache and revocations as the
//! API, so a revoked token stops working in the console at the same moment.

pub mod jwt;
pub mod layer;
pub mod rules;
pub mod scopes;
pub mod tokens;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use chrono::Duration;

use crate::changes::{ChangeHub, Generation};
use crate::clock::Clock;
use crate::store::{SqlStore, TokenRecord};
pub use jwt::{JwtSettings, JwtVerifier};
pub use scopes::{Kind, Scope};

/// `--auth`: whether requests must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AuthMode {
    /// Off on a loopback listen address, required on any other.
    #[default]
    Auto,
    Required,
    Off,
}

impl AuthMode {
    /// Whether a service listening on `addr` requires authentication.
    pub fn required_on(self, addr: SocketAddr) -> bool {
        match self {
            AuthMode::Required => true,
            AuthMode::Off => false,
            AuthMode::Auto => !addr.ip().is_loopback(),
        }
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// A token's name, `jwt:<sub>`, `bootstrap` or `anonymous`.
    pub name: String,
    pub scopes: Vec<Scope>,
}

impl Actor {
    /// The caller when authentication is off: may do everything.
    pub fn anonymous() -> Self {
        Self { name: "anonymous".into(), scopes: vec![Scope::Admin] }
    }

    /// `Ok(())`, or the scope that was needed (e.g. `produce:sales.orders`).
    pub fn allows(&self, kind: Kind, datasets: &[String]) -> Result<(), String> {
        scopes::check(&self.scopes, kind, datasets)
    }
}

/// Why a bearer secret was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("the token expired at {0}; ask an admin for a new one")]
    Expired(String),
    /// The database could not be asked (a 503, not the caller's fault).
    #[error("cannot check the token: {0}")]
    Unavailable(crate::error::Error),
}

impl AuthError {
    /// The API's error code.
    pub fn code(&self) -> &'static str {
        match self {
            AuthError::Unauthenticated(_) => "unauthenticated",
            AuthError::Expired(_) => "token_expired",
            AuthError::Unavailable(e) => e.code(),
        }
    }
}

/// How often at most a token's `last_used_at` is written.
const TOUCH_EVERY: Duration = Duration::seconds(60);

/// Checks bearer secrets: API tokens (cached, dropped on every change the
/// hub hears of, which includes revocations on any replica), the bootstrap
/// token from the environment, and JWTs.
pub struct Authenticator {
    store: Arc<SqlStore>,
    hub: Arc<ChangeHub>,
    clock: Arc<dyn Clock>,
    /// SHA-256 of `BATCHGATE_BOOTSTRAP_TOKEN`.
    bootstrap: Option<String>,
    jwt: Option<JwtVerifier>,
    /// Only on PostgreSQL, where every replica's hub hears every revocation.
    /// SQLite replicas hear only their own changes, so each lookup reads the
    /// (local, cheap) database.
    cached: bool,
    cache: Mutex<(Option<Generation>, HashMap<String, TokenRecord>)>,
}

impl Authenticator {
    pub fn new(
        store: Arc<SqlStore>,
        hub: Arc<ChangeHub>,
        clock: Arc<dyn Clock>,
        bootstrap: Option<&str>,
        jwt: Option<JwtVerifier>,
    ) -> Self {
        Self {
            cached: store.backend() == "postgres",
            store,
            hub,
            clock,
            bootstrap: bootstrap.filter(|b| !b.is_empty()).map(tokens::hash),
            jwt,
            cache: Mutex::new((None, HashMap::new())),
        }
    }

    /// The service's time (the clock tests drive).
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// The actor a bearer secret (the part after `Bearer `) stands for.
    pub async fn authenticate(&self, bearer: &str) -> Result<Actor, AuthError> {
        let bearer = bearer.trim();
        if bearer.is_empty() {
            return Err(AuthError::Unauthenticated("send Authorization: Bearer <token>".into()));
        }
        if !bearer.starts_with(tokens::PREFIX) && bearer.matches('.').count() == 2 {
            return match &self.jwt {
                Some(v) => v.verify(bearer, self.clock.now()).await,
                None => Err(AuthError::Unauthenticated("JWTs are not accepted: no --jwt-jwks is configured".into())),
            };
        }
        let hash = tokens::hash(bearer);
        if let Some(boot) = &self.bootstrap {
            if tokens::same_hash(boot, &hash) {
                return Ok(Actor { name: "bootstrap".into(), scopes: vec![Scope::Admin] });
            }
        }
        let Some(token) = self.lookup(&hash).await? else {
            return Err(AuthError::Unauthenticated("unknown or revoked token".into()));
        };
        let now = self.clock.now();
        if let Some(at) = token.expires_at.filter(|at| *at <= now) {
            return Err(AuthError::Expired(at.to_rfc3339()));
        }
        if token.last_used_at.is_none_or(|at| now - at >= TOUCH_EVERY) {
            self.touch(&token, now);
        }
        // Scopes were checked when the token was made; one that no longer
        // parses (a downgrade) is dropped rather than widened.
        let scopes = token.scopes.0.iter().filter_map(|s| s.parse().ok()).collect();
        Ok(Actor { name: token.name, scopes })
    }

    /// The token with this hash: from the cache while no change was
    /// published since it was filled, else from the database.
    async fn lookup(&self, hash: &str) -> Result<Option<TokenRecord>, AuthError> {
        let seen = self.hub.cache_generation().filter(|_| self.cached);
        {
            let cache = self.cache.lock().expect("token cache");
            if seen.is_some() && cache.0 == seen {
                if let Some(t) = cache.1.get(hash) {
                    // The map is keyed by hash; compare the stored hash in
                    // constant time all the same.
                    return Ok(Some(t.clone()).filter(|t| tokens::same_hash(&t.secret_hash, hash)));
                }
            }
        }
        let found = self.store.find_token(hash).await.map_err(AuthError::Unavailable)?;
        let found = found.filter(|t| tokens::same_hash(&t.secret_hash, hash));
        if let Some(t) = &found {
            let mut cache = self.cache.lock().expect("token cache");
            // A change published while we read may have revoked this very
            // token: fill only if none was.
            if seen.is_some() && self.hub.cache_generation() == seen {
                if cache.0 != seen {
                    *cache = (seen, HashMap::new());
                }
                if cache.1.len() < 10_000 {
                    cache.1.insert(hash.to_owned(), t.clone());
                }
            }
        }
        Ok(found)
    }

    /// Records the use in the background (at most once a minute per token).
    fn touch(&self, token: &TokenRecord, now: chrono::DateTime<chrono::Utc>) {
        {
            let mut cache = self.cache.lock().expect("token cache");
            if let Some(t) = cache.1.get_mut(&token.secret_hash) {
                t.last_used_at = Some(now);
            }
        }
        let (store, name) = (self.store.clone(), token.name.clone());
        tokio::spawn(async move {
            if let Err(e) = store.touch_token(&name, now).await {
                tracing::warn!(token = %name, error = %e, "cannot record a token's last use");
            }
        });
    }
}

/// What the auth layer needs: whether to enforce, and how to verify.
pub struct Gate {
    pub required: bool,
    /// `/ready` answers without a token.
    pub public_ready: bool,
    pub authenticator: Authenticator,
}

impl Gate {
    /// Whether `GET /ready` needs a `read` token.
    pub fn ready_needs_token(&self) -> bool {
        self.required && !self.public_ready
    }
}

/// Makes a token: checks the name and scopes (422 naming the field), stores
/// the hash, and returns the secret, which exists nowhere else from then on.
/// Shared by `POST /v1/tokens` and `batchgate token create`.
pub async fn issue_token(
    store: &SqlStore,
    now: chrono::DateTime<chrono::Utc>,
    name: &str,
    scopes: &[String],
    lifetime: Option<std::time::Duration>,
) -> crate::error::Result<(String, TokenRecord)> {
    use crate::error::Error;
    tokens::check_name(name).map_err(|m| Error::invalid("name", m))?;
    if scopes.is_empty() {
        return Err(Error::invalid("scopes", "give at least one scope: read, produce:<glob>, operate:<glob>, admin"));
    }
    let mut canonical = Vec::new();
    for (i, s) in scopes.iter().enumerate() {
        let scope: Scope =
            s.parse().map_err(|e: scopes::BadScope| Error::invalid(format!("scopes[{i}]"), e.to_string()))?;
        if !canonical.contains(&scope.to_string()) {
            canonical.push(scope.to_string());
        }
    }
    let expires_at = match lifetime {
        None => None,
        Some(d) => Some(
            Duration::from_std(d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .ok_or_else(|| Error::invalid("expires_in", "too long"))?,
        ),
    };
    let secret = tokens::generate();
    let record = store
        .create_token(&crate::store::NewToken {
            name: name.to_owned(),
            secret_hash: tokens::hash(&secret),
            scopes: canonical,
            expires_at,
        })
        .await?;
    Ok((secret, record))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_off_on_loopback_only() {
        let at = |a: &str| a.parse::<SocketAddr>().unwrap();
        assert!(!AuthMode::Auto.required_on(at("127.0.0.1:8080")));
        assert!(!AuthMode::Auto.required_on(at("[::1]:8080")));
        assert!(AuthMode::Auto.required_on(at("0.0.0.0:8080")));
        assert!(AuthMode::Auto.required_on(at("10.1.2.3:8080")));
        assert!(AuthMode::Required.required_on(at("127.0.0.1:8080")));
        assert!(!AuthMode::Off.required_on(at("0.0.0.0:8080")));
    }
}
