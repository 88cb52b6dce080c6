//! The exit statuses of the client commands: the contract a shell script or a
//! scheduler branches on. `1` is `batchgate ready`'s "not ready" (and the
//! server commands' own errors); `2` matches what clap exits with on a usage
//! error.

use std::process::ExitCode;

use reqwest::StatusCode;

use super::ClientError;

/// How a client command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done: the batch started, published, failed as reported or
    /// heartbeated; or what `wait` waited for is ready.
    Success = 0,
    /// 1: `batchgate ready`: the service answered, and it is not ready.
    NotReady = 1,
    /// 2: invalid input: bad arguments, an unreadable statistics file, or a
    /// request the service refused as malformed (a 4xx other than 409).
    Invalid = 2,
    /// 3: refused: the service will not do it now (409, e.g.
    /// `batch_in_progress`, `already_decided`), or the commit's checks failed
    /// and the batch was rejected.
    Refused = 3,
    /// 4: the service is unreachable: no connection, a timeout, a 5xx, or an
    /// answer that is not batchgate's.
    Unavailable = 4,
    /// 5: `wait` timed out before the data was ready.
    TimedOut = 5,
    /// 6: `wait --fail-on-rejected`: the latest batch was rejected.
    Rejected = 6,
}

impl Exit {
    /// The exit status for a request that failed.
    pub fn for_error(e: &ClientError) -> Self {
        match e {
            ClientError::BadUrl { .. } | ClientError::BadRequest(_) => Exit::Invalid,
            ClientError::Unreachable { .. } => Exit::Unavailable,
            ClientError::Api(api) => Self::for_status(api.status),
            ClientError::Protocol { status, .. } => Self::for_status(*status),
        }
    }

    fn for_status(status: StatusCode) -> Self {
        match status {
            StatusCode::CONFLICT => Exit::Refused,
            // A timeout or throttling says nothing about the request itself.
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => Exit::Unavailable,
            s if s.is_client_error() => Exit::Invalid,
            _ => Exit::Unavailable,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}
