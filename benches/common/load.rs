//! The load generator the benches share: keep-alive connections on 127.0.0.1
//! writing pre-built HTTP/1.1 requests back to back, and what they measured.

// Each bench uses a part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Requests and answers, of one connection or added up.
#[derive(Default)]
pub struct Tally {
    pub sent: usize,
    pub non_ok: usize,
    /// Microseconds, of the requests sent in measured windows.
    pub latencies: Vec<u32>,
    /// Requests per second of each measured window.
    pub window_rps: Vec<f64>,
}

/// What a server did under load.
pub struct Load {
    /// Every request sent, warm-up included.
    pub sent: usize,
    /// Answers other than 200, warm-up included.
    pub non_ok: usize,
    pub rps: f64,
    /// Requests per second of each measured window, in the order measured.
    pub windows: Vec<f64>,
    pub p50: Duration,
    pub p99: Duration,
}

impl Load {
    /// The slowest measured window's requests per second.
    pub fn rps_min(&self) -> f64 {
        self.windows.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// The fastest measured window's requests per second.
    pub fn rps_max(&self) -> f64 {
        self.windows.iter().copied().fold(0.0, f64::max)
    }
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.sent += other.sent;
        self.non_ok += other.non_ok;
        self.latencies.extend(other.latencies);
        self.window_rps.extend(other.window_rps);
    }

    /// Throughput and percentiles over windows of `window` each.
    pub fn summary(mut self, window: Duration) -> Result<Load> {
        ensure!(!self.latencies.is_empty(), "no request completed in a measured window");
        self.latencies.sort_unstable();
        Ok(Load {
            sent: self.sent,
            non_ok: self.non_ok,
            rps: self.latencies.len() as f64 / (window.as_secs_f64() * self.window_rps.len() as f64),
            windows: self.window_rps,
            p50: percentile(&self.latencies, 0.50),
            p99: percentile(&self.latencies, 0.99),
        })
    }
}

/// A warm-up, then one measured window, from `connections` connections
/// cycling over `requests` (each starting at its own offset).
pub async fn window(
    addr: SocketAddr,
    requests: &std::sync::Arc<[Vec<u8>]>,
    connections: usize,
    warmup: Duration,
    measured: Duration,
) -> Result<Tally> {
    let measure_from = Instant::now() + warmup;
    let until = measure_from + measured;
    let conns: Vec<JoinHandle<Result<Tally>>> = (0..connections)
        .map(|c| {
            let requests = requests.clone();
            let offset = c * requests.len() / connections;
            tokio::spawn(async move { drive(addr, &requests, offset, measure_from, until).await })
        })
        .collect();
    let mut total = Tally::default();
    for conn in conns {
        total.add(conn.await??);
    }
    total.window_rps.push(total.latencies.len() as f64 / measured.as_secs_f64());
    Ok(total)
}

/// One keep-alive connection sending requests back to back until `until`.
async fn drive(
    addr: SocketAddr,
    requests: &[Vec<u8>],
    offset: usize,
    measure_from: Instant,
    until: Instant,
) -> Result<Tally> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    let mut tally = Tally { latencies: Vec::with_capacity(1 << 16), ..Tally::default() };
    for request in requests.iter().cycle().skip(offset) {
        let sent = Instant::now();
        if sent >= until {
            break;
        }
        stream.write_all(request).await?;
        let status = read_response(&mut stream, &mut buf).await?;
        tally.sent += 1;
        tally.non_ok += usize::from(status != 200);
        if sent >= measure_from {
            let micros = sent.elapsed().as_micros();
            tally.latencies.push(u32::try_from(micros).unwrap_or(u32::MAX));
        }
    }
    Ok(tally)
}

/// Reads one whole response into `buf` and returns its status code.
pub async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<u16> {
    buf.clear();
    let head_len = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        fill(stream, buf).await?;
    };
    let head = std::str::from_utf8(&buf[..head_len])?;
    let status: u16 =
        head.get(9..12).and_then(|s| s.parse().ok()).with_context(|| format!("bad status line in {head:?}"))?;
    let body_len: usize = head
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .with_context(|| format!("no content-length in {head:?}"))?;
    while buf.len() < head_len + body_len {
        fill(stream, buf).await?;
    }
    ensure!(buf.len() == head_len + body_len, "bytes after the response: one request is in flight at a time");
    Ok(status)
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<()> {
    if stream.read_buf(buf).await? == 0 {
        bail!("the server closed the connection");
    }
    Ok(())
}

/// The `q` quantile of sorted microseconds.
pub fn percentile(sorted: &[u32], q: f64) -> Duration {
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    Duration::from_micros(u64::from(sorted[rank.clamp(1, sorted.len()) - 1]))
}

/// CPU time spent so far, in clock ticks, from Linux's `/proc`.
pub struct CpuTicks {
    /// Every CPU, busy and idle.
    total: u64,
    /// Every CPU, running processes (or stolen by the hypervisor).
    busy: u64,
    /// The processes counted as ours.
    own: u64,
}

impl CpuTicks {
    /// The machine's ticks and those of this process and of `children` (pids).
    pub fn now(children: &[u32]) -> Option<Self> {
        // The first line: cpu user nice system idle iowait irq softirq steal …
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> =
            stat.lines().next()?.split_whitespace().skip(1).take(8).map(|t| t.parse().ok()).collect::<Option<_>>()?;
        let &[user, nice, system, idle, iowait, irq, softirq, steal] = cpu.as_slice() else {
            return None;
        };
        let mut own = process_ticks("/proc/self/stat")?;
        for pid in children {
            own += process_ticks(&format!("/proc/{pid}/stat")).unwrap_or(0);
        }
        Some(Self {
            total: user + nice + system + idle + iowait + irq + softirq + steal,
            // Interrupt time is left out: this process's own loopback traffic
            // lands there, accounted to no process.
            busy: user + nice + system + steal,
            own,
        })
    }

    /// The share of the machine's CPU that other processes used since `earlier`.
    pub fn others_share_since(&self, earlier: &Self) -> f64 {
        let others = (self.busy - earlier.busy).saturating_sub(self.own.saturating_sub(earlier.own));
        others as f64 / (self.total - earlier.total).max(1) as f64
    }
}

/// CPU time (user and system, every thread) `pid` has used so far, or this
/// process's with `None`; at the kernel's tick (10 ms here).
pub fn process_cpu(pid: Option<u32>) -> Option<Duration> {
    let path = pid.map_or_else(|| "/proc/self/stat".to_owned(), |p| format!("/proc/{p}/stat"));
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|&hz| hz > 0)?;
    Some(Duration::from_micros(process_ticks(&path)? * 1_000_000 / hz))
}

/// utime + stime of one process.
fn process_ticks(path: &str) -> Option<u64> {
    // After the command name: state is field 3, utime 14, stime 15.
    let own = std::fs::read_to_string(path).ok()?;
    let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}
