//! A typed async client for a running batchgate service, and the client
//! commands built on it (`batchgate batch …`, `batchgate wait`).
//!
//! The client speaks HTTP, or HTTPS (rustls, the system's root certificates)
//! when the service sits behind a TLS proxy or listener.

pub mod cli;
pub mod commands;
mod error;
mod exit;
pub mod people;
mod table;
mod types;
pub mod wait;

use std::fmt;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;

use error::{chain, excerpt};
pub use error::{ApiError, ClientError};
pub use exit::Exit;
pub use types::*;

/// A service that does not accept a connection in this time is down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long any call but a long-poll may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// What a long-poll may take beyond its `wait=` before it counts as lost.
const LONG_POLL_SLACK: Duration = Duration::from_secs(30);

/// A decoded answer with the JSON body it came from, for `--json`.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub value: T,
    pub body: Value,
}

/// A client for one service.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Client {
    /// A client for the service at `base_url` (`http://host:port`, optionally
    /// with a path prefix). An empty `token` counts as none.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self, ClientError> {
        let bad = |reason: &str| ClientError::BadUrl { url: base_url.to_owned(), reason: reason.to_owned() };
        let base = Url::parse(base_url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad("give an http:// or https:// URL"));
        }
        if base.cannot_be_a_base() || base.query().is_some() || base.fragment().is_some() {
            return Err(bad("give the service's address, without query or fragment"));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| ClientError::BadRequest(chain(&e)))?;
        Ok(Self { http, base, token: token.filter(|t| !t.is_empty()) })
    }

    /// `POST /v1/batches`: starts a batch (or, with an `Idempotency-Key`
    /// already used with the same body, returns the batch it started).
    pub async fn start_batch(
        &self,
        req: &StartRequest,
        idempotency_key: Option<&str>,
    ) -> Result<Answer<Started>, ClientError> {
        let mut call = self.request(Method::POST, &["v1", "batches"]).json(req);
        if let Some(key) = idempotency_key {
            call = call.header("Idempotency-Key", key);
        }
        let reply = self.exchange(call).await?;
        match reply.status {
            StatusCode::OK | StatusCode::CREATED => reply.decode(),
            _ => Err(reply.into_error()),
        }
    }

    /// `POST /v1/batches/{id}/heartbeat`: extends the lease.
    pub async fn heartbeat(&self, batch_id: &str) -> Result<Answer<Lease>, ClientError> {
        let call = self.request(Method::POST, &["v1", "batches", batch_id, "heartbeat"]);
        let reply = self.exchange(call).await?;
        match reply.status {
            StatusCode::OK => reply.decode(),
            _ => Err(reply.into_error()),
        }
    }

    /// `POST /v1/batches/{id}/commit`. A decided commit is `Ok` whether it
    /// published or was rejected: look at the record's `state`.
    pub async fn commit(&self, batch_id: &str, req: &CommitRequest) -> Result<Answer<BatchRecord>, ClientError> {
        let call = self.request(Method::POST, &["v1", "batches", batch_id, "commit"]).json(req);
        let reply = self.exchange(call).await?;
        let rejected =
            reply.status == StatusCode::UNPROCESSABLE_ENTITY && reply.body["error"]["code"] == "checks_failed";
        match reply.status {
            StatusCode::OK => reply.decode(),
            _ if rejected => reply.decode(),
            _ => Err(reply.into_error()),
        }
    }

    /// `POST /v1/batches/{id}/written`: the rows written so far, before a
    /// commit.
    pub async fn written(&self, batch_id: &str, req: &WrittenRequest) -> Result<Answer<Value>, ClientError> {
        self.send(self.request(Method::POST, &["v1", "batches", batch_id, "written"]).json(req), &[StatusCode::OK])
            .await
    }

    /// `GET` of a JSON document at `segments`, with `query`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<Answer<T>, ClientError> {
        self.send(self.request(Method::GET, segments).query(query), &[StatusCode::OK]).await
    }

    /// `POST /v1/partitions/{dataset}/{partition}/invalidate`.
    pub async fn invalidate(
        &self,
        dataset: &str,
        partition: &str,
        req: &InvalidateRequest,
    ) -> Result<Answer<Value>, ClientError> {
        let call = self.request(Method::POST, &["v1", "partitions", dataset, partition, "invalidate"]).json(req);
        self.send(call, &[StatusCode::OK]).await
    }

    /// `POST /v1/repairs`: a repair plan.
    pub async fn create_repair(&self, req: &RepairRequest) -> Result<Answer<Value>, ClientError> {
        self.send(self.request(Method::POST, &["v1", "repairs"]).json(req), &[StatusCode::CREATED]).await
    }

    /// `PUT /v1/datasets/{dataset}`: replaces the dataset's policy.
    pub async fn put_dataset(&self, dataset: &str, req: &PolicyRequest) -> Result<Answer<Value>, ClientError> {
        let call = self.request(Method::PUT, &["v1", "datasets", dataset]).json(req);
        self.send(call, &[StatusCode::OK, StatusCode::CREATED]).await
    }

    /// Sends `call` and decodes the answer when its status is one of `ok`.
    async fn send<T: DeserializeOwned>(
        &self,
        call: RequestBuilder,
        ok: &[StatusCode],
    ) -> Result<Answer<T>, ClientError> {
        let reply = self.exchange(call).await?;
        if ok.contains(&reply.status) {
            reply.decode()
        } else {
            Err(reply.into_error())
        }
    }

    /// `POST /v1/batches/{id}/fail`: reports that the task failed.
    pub async fn fail(&self, batch_id: &str, req: &FailRequest) -> Result<Answer<BatchRecord>, ClientError> {
        let call = self.request(Method::POST, &["v1", "batches", batch_id, "fail"]).json(req);
        let reply = self.exchange(call).await?;
        match reply.status {
            StatusCode::OK => reply.decode(),
            _ => Err(reply.into_error()),
        }
    }

    /// `GET /ready`. With `wait`, a long-poll that answers as soon as the
    /// target is ready (or, with `until_rejected`, rejected), else at the end
    /// of `wait` (at most 300 s).
    pub async fn ready(
        &self,
        target: &Target,
        wait: Option<Duration>,
        until_rejected: bool,
    ) -> Result<Readiness, ClientError> {
        Ok(self.ready_reply(target, wait, until_rejected).await?.0)
    }

    /// `GET /ready` once, without waiting: the answer and its body.
    pub async fn ready_answer(&self, target: &Target) -> Result<(Readiness, Value), ClientError> {
        self.ready_reply(target, None, false).await
    }

    async fn ready_reply(
        &self,
        target: &Target,
        wait: Option<Duration>,
        until_rejected: bool,
    ) -> Result<(Readiness, Value), ClientError> {
        let mut url = self.url(&["ready"]);
        {
            let mut q = url.query_pairs_mut();
            match target {
                Target::Partitions { dataset, partitions } => {
                    q.append_pair("dataset", dataset);
                    for p in partitions {
                        q.append_pair("partition", p);
                    }
                }
                Target::Task { task, dt } => {
                    q.append_pair("task", task).append_pair("dt", dt);
                }
            }
            if let Some(wait) = wait {
                q.append_pair("wait", &format!("{:.3}", wait.as_secs_f64()));
            }
            if until_rejected {
                q.append_pair("until", "ready_or_rejected");
            }
        }
        let timeout = wait.map_or(REQUEST_TIMEOUT, |w| w + LONG_POLL_SLACK);
        let call = self.authorised(self.http.get(url)).timeout(timeout);
        let reply = self.exchange(call).await?;
        match (reply.status, &reply.body["ready"]) {
            (StatusCode::OK, Value::Bool(true)) => {
                let a = reply.decode()?;
                Ok((Readiness::Ready(a.value), a.body))
            }
            (StatusCode::NOT_FOUND, Value::Bool(false)) => {
                let a = reply.decode()?;
                Ok((Readiness::NotReady(a.value), a.body))
            }
            _ => Err(reply.into_error()),
        }
    }

    /// The base URL with `segments` appended, each percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut().expect("checked in new: the base URL has a path").pop_if_empty().extend(segments);
        url
    }

    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.authorised(self.http.request(method, self.url(segments))).timeout(REQUEST_TIMEOUT)
    }

    fn authorised(&self, call: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(token) => call.bearer_auth(token),
            None => call,
        }
    }

    /// Sends the request and reads the JSON body of whatever status came back.
    async fn exchange(&self, call: RequestBuilder) -> Result<Reply, ClientError> {
        let request = call.build().map_err(|e| ClientError::BadRequest(chain(&e)))?;
        let url = request.url().clone();
        let mut endpoint = url.clone();
        // `wait=8.994` and the like say nothing about why it is unreachable.
        endpoint.set_query(None);
        let unreachable =
            |e: reqwest::Error| ClientError::Unreachable { url: endpoint.clone(), reason: unreachable_reason(e) };
        let resp = self.http.execute(request).await.map_err(unreachable)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(unreachable)?;
        let body = serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
            url: url.clone(),
            status,
            reason: format!("not JSON ({e}): {}", excerpt(&bytes)),
        })?;
        Ok(Reply { url, status, body })
    }
}

/// Why no answer came, in a few words: a timeout, or the innermost cause of
/// a connection error ("Connection refused (os error 111)"); reqwest's outer
/// layers ("error sending request: client error (Connect): tcp connect
/// error") only repeat that. The URL is already in the message.
fn unreachable_reason(e: reqwest::Error) -> String {
    if e.is_timeout() {
        return "no answer in time (timed out)".into();
    }
    if e.is_connect() {
        let mut root: &dyn std::error::Error = &e;
        while let Some(next) = root.source() {
            root = next;
        }
        return root.to_string();
    }
    chain(&e.without_url())
}

/// An answer whose body is JSON.
struct Reply {
    url: Url,
    status: StatusCode,
    body: Value,
}

impl Reply {
    fn decode<T: DeserializeOwned>(self) -> Result<Answer<T>, ClientError> {
        match T::deserialize(&self.body) {
            Ok(value) => Ok(Answer { value, body: self.body }),
            Err(e) => Err(ClientError::Protocol { url: self.url, status: self.status, reason: e.to_string() }),
        }
    }

    /// The service's error body as an [`ApiError`]; anything else is a
    /// protocol error.
    fn into_error(self) -> ClientError {
        let e = &self.body["error"];
        match (e["code"].as_str(), e["message"].as_str()) {
            (Some(code), Some(message)) => ClientError::Api(ApiError {
                status: self.status,
                code: code.to_owned(),
                message: message.to_owned(),
                details: e["details"].clone(),
            }),
            _ => ClientError::Protocol {
                url: self.url,
                status: self.status,
                reason: format!("unexpected body {}", excerpt(self.body.to_string().as_bytes())),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_appended_to_the_base_and_encoded() {
        let c = Client::new("http://h:1/gate/", None).unwrap();
        assert_eq!(
            c.url(&["v1", "batches", "a/b c", "commit"]).as_str(),
            "http://h:1/gate/v1/batches/a%2Fb%20c/commit"
        );
        let c = Client::new("http://h:1", None).unwrap();
        assert_eq!(c.url(&["ready"]).as_str(), "http://h:1/ready");
    }

    #[test]
    fn unusable_urls_are_refused_by_name() {
        for url in ["localhost:8080", "ftp://h", "http://h/?x=1", "not a url"] {
            let e = Client::new(url, None).unwrap_err();
            assert!(matches!(&e, ClientError::BadUrl { url: u, .. } if u == url), "{url}: {e}");
        }
    }

    #[test]
    fn https_urls_are_accepted() {
        let c = Client::new("https://gate.example/batchgate", None).unwrap();
        assert_eq!(c.url(&["ready"]).as_str(), "https://gate.example/batchgate/ready");
    }

    #[test]
    fn the_token_stays_out_of_debug_output() {
        let c = Client::new("http://h", Some("s3cret".into())).unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
