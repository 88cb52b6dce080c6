//! Where the service reads the time. Tests swap in a [`ManualClock`] so that
//! lease expiry and deadlines are driven without sleeping.

use std::sync::Mutex;

use chrono::{DateTime, Duration, DurationRound, Utc};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock, truncated to microseconds (what both backends store).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        truncate(Utc::now())
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(Mutex::new(truncate(start)))
    }

    pub fn advance(&self, by: Duration) {
        let mut t = self.0.lock().expect("clock mutex");
        *t += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock().expect("clock mutex") = truncate(to);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock mutex")
    }
}

fn truncate(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(Duration::microseconds(1)).unwrap_or(t)
}
