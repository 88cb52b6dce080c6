//! JWTs from an identity provider: `--jwt-jwks FILE|URL`, `--jwt-issuer`,
//! `--jwt-audience`. Signatures are checked against the JWKS (asymmetric
//! algorithms only: an `HS*` token signed with a public key as its secret is
//! the classic confusion attack); `exp` is required and checked against the
//! service's clock; scopes come from `scope` (space-separated) or `scp`
//! (array or string); the actor is `jwt:<sub>`.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use tokio::sync::RwLock;

use super::{Actor, AuthError, Scope};

/// Leeway for clocks that disagree a little.
const LEEWAY_SECONDS: i64 = 60;
/// Least time between two fetches of a JWKS URL (on an unknown `kid`).
const REFETCH_EVERY: Duration = Duration::from_secs(60);

/// Where the keys come from and what the tokens must say.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// A file path, or an `http(s)://` URL.
    pub jwks: String,
    pub issuer: Option<String>,
    pub audience: Option<String>,
}

pub struct JwtVerifier {
    settings: JwtSettings,
    keys: RwLock<(JwkSet, Instant)>,
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    exp: Option<i64>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Scp>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Scp {
    List(Vec<String>),
    Text(String),
}

fn refused(why: impl Into<String>) -> AuthError {
    AuthError::Unauthenticated(format!("the JWT is not accepted: {}", why.into()))
}

impl JwtVerifier {
    /// Loads the key set (reading the file or fetching the URL once).
    pub async fn load(settings: JwtSettings) -> anyhow::Result<Self> {
        let keys = fetch(&settings.jwks).await?;
        Ok(Self { settings, keys: RwLock::new((keys, Instant::now())) })
    }

    pub async fn verify(&self, token: &str, now: DateTime<Utc>) -> Result<Actor, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| refused(e.to_string()))?;
        if matches!(header.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(refused("symmetric algorithms (HS*) are not accepted"));
        }
        let key = match self.key(header.kid.as_deref(), header.alg).await {
            Some(k) => k,
            None if self.refetch().await => self
                .key(header.kid.as_deref(), header.alg)
                .await
                .ok_or_else(|| refused("no key in the JWKS matches"))?,
            None => return Err(refused("no key in the JWKS matches")),
        };
        let mut v = Validation::new(header.alg);
        // Expiry is checked below against the service's clock.
        v.validate_exp = false;
        v.required_spec_claims.clear();
        match &self.settings.issuer {
            Some(iss) => v.set_issuer(&[iss]),
            None => v.iss = None,
        }
        match &self.settings.audience {
            Some(aud) => v.set_audience(&[aud]),
            None => v.validate_aud = false,
        }
        if self.settings.issuer.is_some() {
            v.required_spec_claims.insert("iss".into());
        }
        if self.settings.audience.is_some() {
            v.required_spec_claims.insert("aud".into());
        }
        let data = jsonwebtoken::decode::<Claims>(token, &key, &v).map_err(|e| refused(e.to_string()))?;
        let claims = data.claims;
        let exp = claims.exp.ok_or_else(|| refused("it has no exp claim"))?;
        if exp + LEEWAY_SECONDS <= now.timestamp() {
            let at = DateTime::from_timestamp(exp, 0).map(|t| t.to_rfc3339()).unwrap_or_else(|| exp.to_string());
            return Err(AuthError::Expired(at));
        }
        let sub = claims.sub.filter(|s| !s.is_empty()).ok_or_else(|| refused("it has no sub claim"))?;
        let words: Vec<String> = match (claims.scope, claims.scp) {
            (Some(s), _) => s.split_whitespace().map(str::to_owned).collect(),
            (None, Some(Scp::List(l))) => l,
            (None, Some(Scp::Text(s))) => s.split_whitespace().map(str::to_owned).collect(),
            (None, None) => Vec::new(),
        };
        // Scopes this service does not know (an IdP's `openid`, `email`)
        // are ignored, not refused.
        let scopes: Vec<Scope> = words.iter().filter_map(|w| w.parse().ok()).collect();
        Ok(Actor { name: format!("jwt:{sub}"), scopes })
    }

    /// The key for `kid` (or the only key when the token names none).
    async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
        let keys = self.keys.read().await;
        let jwk = match kid {
            Some(k) => keys.0.find(k)?,
            None if keys.0.keys.len() == 1 => &keys.0.keys[0],
            None => return None,
        };
        if let Some(ka) = jwk.common.key_algorithm {
            if format!("{ka:?}") != format!("{alg:?}") {
                return None;
            }
        }
        DecodingKey::from_jwk(jwk).ok()
    }

    /// Fetches a JWKS URL again (keys rotate), at most once a minute.
    async fn refetch(&self) -> bool {
        if !self.settings.jwks.starts_with("http") {
            return false;
        }
        let mut keys = self.keys.write().await;
        if keys.1.elapsed() < REFETCH_EVERY {
            return false;
        }
        keys.1 = Instant::now();
        match fetch(&self.settings.jwks).await {
            Ok(k) => {
                keys.0 = k;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot fetch the JWKS again");
                false
            }
        }
    }
}

async fn fetch(source: &str) -> anyhow::Result<JwkSet> {
    let text = if source.starts_with("http://") || source.starts_with("https://") {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
        client.get(source).send().await?.error_for_status()?.text().await?
    } else {
        tokio::fs::read_to_string(source).await.map_err(|e| anyhow::anyhow!("cannot read the JWKS {source}: {e}"))?
    };
    let set: JwkSet = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{source} is not a JWKS: {e}"))?;
    anyhow::ensure!(!set.keys.is_empty(), "the JWKS {source} holds no keys");
    Ok(set)
}
