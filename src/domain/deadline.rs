//! Deadlines: by when each data date should be published, in the dataset's
//! own time zone.

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// `{"time": "06:00", "days_after_dt": 1}`: 06:00 local time on the day
/// after the data date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Deadline {
    /// `HH:MM`, in the dataset's timezone.
    #[schema(pattern = "^[0-2][0-9]:[0-5][0-9]$", example = "06:00")]
    pub time: String,
    /// 0 to 366 (default 0).
    #[serde(default, deserialize_with = "crate::whole::deserialize")]
    #[schema(maximum = 366)]
    pub days_after_dt: u32,
}

impl Deadline {
    /// Checks the time of day and the day offset.
    pub fn validate(&self) -> Result<(), String> {
        self.local_time()?;
        if self.days_after_dt > 366 {
            return Err("days_after_dt must be from 0 to 366".into());
        }
        Ok(())
    }

    fn local_time(&self) -> Result<NaiveTime, String> {
        NaiveTime::parse_from_str(&self.time, "%H:%M")
            .map_err(|_| format!("deadline time {:?} is not HH:MM", self.time))
    }

    /// The instant the deadline of `dt` falls on. A local time that does not
    /// exist (a daylight-saving gap) moves to the first instant after it; an
    /// ambiguous one takes the earlier.
    pub fn instant(&self, dt: NaiveDate, tz: Tz) -> Result<DateTime<Utc>, String> {
        let day = dt.checked_add_days(Days::new(u64::from(self.days_after_dt))).ok_or("date out of range")?;
        let local = day.and_time(self.local_time()?);
        let mut probe = local;
        for _ in 0..180 {
            if let Some(t) = tz.from_local_datetime(&probe).earliest() {
                return Ok(t.with_timezone(&Utc));
            }
            probe += chrono::Duration::minutes(1);
        }
        Err(format!("{local} does not exist in {tz}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn the_deadline_is_local_time_on_the_offset_day() {
        let dl = Deadline { time: "06:00".into(), days_after_dt: 1 };
        let t = dl.instant(d("2026-08-24"), "Asia/Shanghai".parse().unwrap()).unwrap();
        assert_eq!(t.to_rfc3339(), "2026-08-24T22:00:00+00:00");
        let utc = dl.instant(d("2026-08-24"), Tz::UTC).unwrap();
        assert_eq!(utc.to_rfc3339(), "2026-08-25T06:00:00+00:00");
    }

    #[test]
    fn a_time_in_a_dst_gap_moves_forward() {
        // 2026-03-29 02:30 does not exist in Europe/Berlin.
        let dl = Deadline { time: "02:30".into(), days_after_dt: 0 };
        let t = dl.instant(d("2026-03-29"), "Europe/Berlin".parse().unwrap()).unwrap();
        assert_eq!(t.to_rfc3339(), "2026-03-29T01:00:00+00:00");
    }

    #[test]
    fn bad_times_are_refused() {
        assert!(Deadline { time: "6am".into(), days_after_dt: 1 }.validate().is_err());
        assert!(Deadline { time: "25:00".into(), days_after_dt: 1 }.validate().is_err());
        assert!(Deadline { time: "06:00".into(), days_after_dt: 400 }.validate().is_err());
    }
}
