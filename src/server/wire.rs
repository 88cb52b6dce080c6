//! The JSON error envelope for the answers hyper writes by itself.
//!
//! When a request head cannot be parsed, hyper answers before any handler
//! runs, with an empty body: 400 (not HTTP), 414 (a request target longer
//! than 65,534 bytes, a hard limit of hyper's) or 431 (a head larger than the
//! read buffer). No middleware sees those requests, so this wrapper around
//! the connection's byte stream recognises such an answer as hyper writes it
//! (its status line with `content-length: 0`; every answer of the router
//! carries a JSON body) and writes the JSON envelope in its place. Hyper then
//! closes the connection; the request's unread bytes are first read and
//! dropped for a moment, so that the client gets to read the answer instead
//! of a reset.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// How long, and how many bytes, the rest of a refused request is drained.
const LINGER_FOR: Duration = Duration::from_secs(2);
const LINGER_BYTES: u64 = 4 << 20;

#[derive(Serialize)]
struct Envelope {
    error: Detail,
}

#[derive(Serialize)]
struct Detail {
    code: &'static str,
    message: &'static str,
    details: Empty,
}

#[derive(Serialize)]
struct Empty {}

/// The whole HTTP answer that replaces hyper's empty one, if `head` is one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let (status, reason, code, message) = if head.starts_with(b"HTTP/1.1 414 ") {
        (414, "URI Too Long", "uri_too_long", "the request target (path and query) is longer than 65534 bytes")
    } else if head.starts_with(b"HTTP/1.1 431 ") {
        (
            431,
            "Request Header Fields Too Large",
            "headers_too_large",
            "the request line and headers together are larger than the server reads (about 400 KB)",
        )
    } else if head.starts_with(b"HTTP/1.1 400 ") {
        (400, "Bad Request", "malformed_request", "the request is not valid HTTP/1.1")
    } else {
        return None;
    };
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    let lower = head[..end].to_ascii_lowercase();
    if !lower.windows(19).any(|w| w == b"\r\ncontent-length: 0") {
        return None;
    }
    let body = serde_json::to_vec(&Envelope { error: Detail { code, message, details: Empty {} } })
        .expect("an error envelope serialises");
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend(body);
    Some(out)
}

/// A connection's byte stream, with hyper's bodiless error answers replaced.
pub(super) struct WireErrors<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> {
    inner: Option<I>,
    /// The replacement still to be written, and how much of it was.
    pending: Option<(Vec<u8>, usize)>,
    replaced: bool,
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> WireErrors<I> {
    pub(super) fn new(inner: I) -> Self {
        Self { inner: Some(inner), pending: None, replaced: false }
    }

    fn io(&mut self) -> &mut I {
        self.inner.as_mut().expect("the stream is present until drop")
    }

    /// Writes out what is left of a replacement.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = self.pending.take() {
            if done == bytes.len() {
                break;
            }
            let inner = self.inner.as_mut().expect("the stream is present until drop");
            match Pin::new(inner).poll_write(cx, &bytes[done..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.pending = Some((bytes, done + n)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.pending = Some((bytes, done));
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Takes over `buf` if it is one of hyper's bodiless error answers.
    fn intercept(&mut self, buf: &[u8]) -> bool {
        if self.replaced {
            return false;
        }
        match replacement(buf) {
            Some(bytes) => {
                self.pending = Some((bytes, 0));
                self.replaced = true;
                true
            }
            None => false,
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for WireErrors<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_read(cx, buf)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for WireErrors<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if self.intercept(buf) {
            // Hyper's bytes count as written; the replacement goes out on
            // the next write, flush or shutdown (a flush always follows).
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(self.io()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            // Hyper writes a bodiless head as one buffer.
            if bufs.iter().filter(|b| !b.is_empty()).count() == 1 && self.intercept(first) {
                let _ = self.poll_pending(cx)?;
                return Poll::Ready(Ok(first.len()));
            }
        }
        Pin::new(self.io()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(self.io()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(self.io()).poll_shutdown(cx)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> Drop for WireErrors<I> {
    fn drop(&mut self) {
        if !self.replaced {
            return;
        }
        let (Some(mut io), pending) = (self.inner.take(), self.pending.take()) else {
            return;
        };
        // Closing with unread bytes would reset the connection, and the
        // client could lose the answer: finish writing it, then drain.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = tokio::time::timeout(LINGER_FOR, async {
                    if let Some((bytes, done)) = pending {
                        io.write_all(&bytes[done..]).await?;
                    }
                    io.flush().await?;
                    let mut sink = [0u8; 16 * 1024];
                    let mut left = LINGER_BYTES;
                    while left > 0 {
                        let n = io.read(&mut sink).await?;
                        if n == 0 {
                            break;
                        }
                        left = left.saturating_sub(n as u64);
                    }
                    io.shutdown().await
                })
                .await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_answers_are_replaced() {
        let hyper_414 =
            b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(hyper_414).expect("replaced")).unwrap();
        assert!(out.starts_with("HTTP/1.1 414 URI Too Long\r\ncontent-type: application/json\r\n"), "{out}");
        let body: serde_json::Value = serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "uri_too_long");

        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 57\r\n\r\n";
        assert!(replacement(ours).is_none(), "an answer of the router keeps its body");
        assert!(replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement(b"{\"HTTP/1.1 414 ").is_none());
    }
}
