//! `batchgate wait`: block until data is ready, on the service's long-poll.
//!
//! Each request is a long-poll slice (`/ready?wait=`), so waiting costs the
//! service no database polling and the command answers as soon as the data
//! is published. Between slices it prints a progress line. An outage is
//! ridden out with backoff for a grace period before it gives up.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::{Client, Exit, NotReady, NotReadyReason, Readiness, Target};

/// The longest long-poll slice: a progress line at least this often, well
/// under the service's 300 s cap.
const SLICE: Duration = Duration::from_secs(60);
/// A not-ready answer that comes back before its slice is over (a proxy that
/// ignores `wait=`, a service shutting down) is followed by this pause, so the
/// loop never spins.
const EARLY_ANSWER_PAUSE: Duration = Duration::from_secs(1);
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// How long to wait, and when to give up early.
#[derive(Debug, Clone)]
pub struct WaitOptions {
    /// Give up (exit 5) when the data is not ready after this long.
    pub timeout: Duration,
    /// Give up (exit 6) as soon as the service says the latest batch was
    /// rejected.
    pub fail_on_rejected: bool,
    /// Give up (exit 4) when the service has been unreachable this long.
    pub grace: Duration,
}

/// What one slice found.
enum Poll {
    Ready(String),
    NotReady(NotReady),
    /// No usable answer: the service is unreachable or cannot read its
    /// registry.
    Outage(String),
    /// An answer that waiting longer cannot change (a 4xx).
    Fatal(Exit, String),
}

/// Waits until `target` is ready, printing progress to stderr.
pub async fn wait(client: &Client, target: &Target, opts: &WaitOptions) -> Exit {
    let started = Instant::now();
    let deadline = started + opts.timeout;
    let mut outage_since: Option<Instant> = None;
    let mut retry = FIRST_RETRY;
    eprintln!(
        "batchgate: waiting up to {} for {target} to be ready{}",
        human(opts.timeout),
        if opts.fail_on_rejected { " (giving up if it is rejected)" } else { "" }
    );
    // The first look does not wait, so the log says at once what is missing.
    let mut first = true;
    loop {
        let asked = Instant::now();
        let slice = if first { Duration::ZERO } else { deadline.saturating_duration_since(asked).min(SLICE) };
        first = false;
        let poll = look(client, target, slice, opts.fail_on_rejected).await;
        let now = Instant::now();
        let elapsed = human(Duration::from_secs((now - started).as_secs()));
        match poll {
            Poll::Ready(versions) => {
                eprintln!("batchgate: {target} is ready after {elapsed}: {versions}");
                return Exit::Success;
            }
            Poll::Fatal(exit, message) => {
                eprintln!("batchgate: cannot wait for {target}: {message}");
                return exit;
            }
            Poll::NotReady(nr) if opts.fail_on_rejected && nr.reason == NotReadyReason::Rejected => {
                eprintln!("batchgate: giving up after {elapsed}: {target} {}", not_ready(&nr));
                return Exit::Rejected;
            }
            Poll::NotReady(nr) => {
                outage_since = None;
                retry = FIRST_RETRY;
                if now >= deadline {
                    eprintln!("batchgate: timed out after {elapsed}: {target} {}", not_ready(&nr));
                    return Exit::TimedOut;
                }
                eprintln!("batchgate: still waiting after {elapsed}: {target} {}", not_ready(&nr));
                if now - asked + EARLY_ANSWER_PAUSE < slice {
                    sleep(EARLY_ANSWER_PAUSE.min(deadline - now)).await;
                }
            }
            Poll::Outage(message) => {
                let since = *outage_since.get_or_insert(asked);
                let give_up_at = deadline.min(since + opts.grace);
                if now >= give_up_at {
                    eprintln!("batchgate: giving up after {elapsed}: {message} (for {})", human(now - since));
                    return Exit::Unavailable;
                }
                let pause = retry.min(give_up_at - now);
                eprintln!("batchgate: {message}; retrying in {}", human(pause));
                sleep(pause).await;
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    }
}

/// One request: a long-poll of `slice`.
async fn look(client: &Client, target: &Target, slice: Duration, until_rejected: bool) -> Poll {
    match client.ready(target, Some(slice), until_rejected).await {
        Ok(Readiness::Ready(ready)) => {
            let versions: Vec<String> =
                ready.partitions.iter().map(|p| format!("{} version {}", p.partition, p.version)).collect();
            Poll::Ready(versions.join(", "))
        }
        Ok(Readiness::NotReady(nr)) if nr.reason == NotReadyReason::Unavailable => {
            Poll::Outage("the service cannot read its registry right now".into())
        }
        Ok(Readiness::NotReady(nr)) => Poll::NotReady(nr),
        Err(e) => match Exit::for_error(&e) {
            Exit::Unavailable => Poll::Outage(e.to_string()),
            exit => Poll::Fatal(exit, e.to_string()),
        },
    }
}

/// `is not ready (running) on dt=2026-08-24, batch t-20260824-001`.
fn not_ready(nr: &NotReady) -> String {
    let mut s = format!("is not ready ({})", nr.reason);
    if let Some(p) = &nr.partition {
        s.push_str(&format!(" on {p}"));
    }
    if let Some(b) = &nr.batch_id {
        s.push_str(&format!(", batch {b}"));
    }
    s
}

/// A duration to the second (to the millisecond under a second), as
/// `1h 2m 3s`.
fn human(d: Duration) -> String {
    let d = if d >= Duration::from_secs(1) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(d).to_string()
}
