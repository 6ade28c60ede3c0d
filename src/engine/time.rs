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

impl Timestamp {
    /// Parses an RFC 3339 time (`2030-01-01T00:00:00Z`, `2030-01-01T00:00:00.5+02:00`; `t`
    /// or a space between date and time, `z`, and no offset at all, read as UTC), to the
    /// millisecond (finer digits dropped). None before 1970 or if it is no such time.
    pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
        let (local, offset_ms) = split_offset(text.trim())?;
        if local.len() < 19 || !local.is_char_boundary(10) || !local.is_char_boundary(11) {
            return None;
        }
        let (date, separator, time) = (&local[..10], &local[10..11], &local[11..]);
        if !matches!(separator, "T" | "t" | " ") {
            return None;
        }
        let (hms, fraction) = match time.split_once('.') {
            Some((hms, digits))
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
            {
                (hms, format!(".{:0<3}", &digits[..digits.len().min(3)]))
            }
            Some(_) => return None,
            None => (time, String::new()),
        };
        let all_digits = |part: &str| part.split([':', '-']).all(two_or_four_digits);
        if !all_digits(date) || !all_digits(hms) {
            return None;
        }
        let at = Timestamp::parse_iso8601(&format!("{date}T{hms}{fraction}Z"))?;
        let utc = i64::try_from(at.0).ok()?.checked_sub(offset_ms)?;
        u64::try_from(utc).ok().map(Timestamp)
    }
}

/// `text` without its offset from UTC (`Z`, `z`, `+HH:MM` or `-HH:MM`; none read as UTC), and
/// the offset in milliseconds.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(local) = text.strip_suffix(['Z', 'z']) {
        return Some((local, 0));
    }
    let at = text.len().checked_sub(6)?;
    let Some(offset) = text.get(at..).filter(|o| o.starts_with(['+', '-'])) else {
        return Some((text, 0));
    };
    let (hours, minutes) = offset[1..].split_once(':')?;
    if !two_or_four_digits(hours) || hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (i64, i64) = (hours.parse().ok()?, minutes.parse().ok()?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    let ms = (hours * 60 + minutes) * 60_000;
    Some((&text[..at], if offset.starts_with('-') { -ms } else { ms }))
}

/// A date's or a time's field: two digits (four for a year).
fn two_or_four_digits(part: &str) -> bool {
    matches!(part.len(), 2 | 4) && part.bytes().all(|b| b.is_ascii_digit())
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
    fn rfc3339_times_are_read_with_their_offsets() {
        let utc = |text: &str| Timestamp::parse_rfc3339(text).map(Timestamp::iso8601);
        let at = |text: &str| Some(text.to_string());
        assert_eq!(utc("2030-01-01T00:00:00Z"), at("2030-01-01T00:00:00.000Z"));
        assert_eq!(
            utc("2030-01-01T00:00:00+02:00"),
            at("2029-12-31T22:00:00.000Z")
        );
        assert_eq!(
            utc("2030-01-02T00:00:00.5+01:00"),
            at("2030-01-01T23:00:00.500Z")
        );
        assert_eq!(
            utc("2030-01-06T00:00:00.100-05:00"),
            at("2030-01-06T05:00:00.100Z")
        );
        assert_eq!(utc("2029-01-01t00:00:01z"), at("2029-01-01T00:00:01.000Z"));
        assert_eq!(
            utc("2029-01-01 00:00:01.123456789"),
            at("2029-01-01T00:00:01.123Z")
        );
        assert_eq!(
            utc("1970-01-01T01:00:00+01:00"),
            at("1970-01-01T00:00:00.000Z")
        );
        for bad in [
            "1970-01-01T00:30:00+01:00",
            "2030-01-01T00:00:00+24:00",
            "2030-01-01T00:00:00+2:00",
            "2030-01-01T00:00:00.Z",
            "2030-01-01X00:00:00Z",
            "2030-1-01T00:00:00Z",
            "2030-01-01T00:00:00+0é:00",
            "yesterday",
            "",
        ] {
            assert_eq!(utc(bad), None, "{bad}");
        }
    }

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
