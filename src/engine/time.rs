//! Engine time: milliseconds since the Unix epoch, always passed in by the caller.
//!
//! The engine never reads a clock, so every timeout rule can be tested by choosing `now`.

use std::fmt;

/// A point in time, in milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn millis(self) -> u64 {
        self.0
    }

    /// Whole seconds since the epoch (AWS reports queue timestamps in seconds).
    pub fn seconds(self) -> u64 {
        self.0 / 1000
    }

    pub fn plus_seconds(self, seconds: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(seconds.saturating_mul(1000)))
    }

    pub fn plus_millis(self, millis: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(millis))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl Timestamp {
    /// ISO-8601 UTC with milliseconds, as SNS writes `Timestamp`: `2026-03-01T12:34:56.789Z`.
    pub fn iso8601(self) -> String {
        let millis = self.0 % 1000;
        let secs = self.0 / 1000;
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }
}

impl Timestamp {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.mmm]Z` (UTC), the form replay policies use.
    pub fn parse_iso8601(text: &str) -> Option<Timestamp> {
        let text = text.strip_suffix('Z')?;
        let (date, time) = text.split_once('T')?;
        let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
        let (year, month, day) = (d.next()??, d.next()??, d.next()??);
        let (hms, millis) = match time.split_once('.') {
            Some((hms, frac))
                if !frac.is_empty()
                    && frac.len() <= 3
                    && frac.chars().all(|c| c.is_ascii_digit()) =>
            {
                (
                    hms,
                    frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32),
                )
            }
            Some(_) => return None,
            None => (time, 0),
        };
        let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
        let (hour, minute, second) = (t.next()??, t.next()??, t.next()??);
        let valid = (1..=12).contains(&month)
            && (1..=31).contains(&day)
            && hour < 24
            && minute < 60
            && second < 60;
        if !valid || year < 1970 {
            return None;
        }
        // Days since 1970-01-01 from a civil date (Howard Hinnant's algorithm).
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let mp = (month + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
        Some(Timestamp((secs * 1000 + millis) as u64))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_formats_utc_with_millis() {
        assert_eq!(Timestamp(0).iso8601(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp(1_772_368_496_789).iso8601(),
            "2026-03-01T12:34:56.789Z"
        );
        assert_eq!(
            Timestamp(951_782_400_000).iso8601(),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
