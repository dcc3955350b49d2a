//! What counts as a date: one parser shared by the webhook contract (a `date` parameter)
//! and conditions (ISO dates compare as instants, never as numbers or text).
//!
//! Accepted: RFC 3339 (`2026-09-07T10:00:00Z`, `2026-09-07T12:00:00+02:00`, fractions,
//! a space for the `T`), an ISO date-time without offset (read as UTC), and a plain ISO
//! date (midnight UTC). Anything else is not a date — in particular no bare numbers:
//! the prototype's `Number()` over dates is the bug this module exists to avoid.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};

/// `at` to the whole millisecond, as the stores keep instants and the API writes them.
pub fn whole_millis(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.timestamp_millis()).unwrap_or(at)
}

/// Reads an ISO-8601 / RFC 3339 text as an instant in UTC.
pub fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    // Every accepted form starts with `YYYY-`; this keeps numbers and words out cheaply.
    let bytes = text.as_bytes();
    if bytes.len() < 10 || !bytes[..4].iter().all(u8::is_ascii_digit) || bytes[4] != b'-' {
        return None;
    }
    if let Ok(instant) = DateTime::parse_from_rfc3339(text) {
        return Some(instant.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, format) {
            return Some(naive.and_utc());
        }
    }
    if text.len() == 10
        && let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d")
    {
        return date.and_hms_opt(0, 0, 0).map(|midnight| midnight.and_utc());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("a valid test instant")
    }

    #[test]
    fn rfc3339_with_offset_is_read_in_utc() {
        assert_eq!(
            parse_instant("2026-09-07T12:00:00+02:00"),
            Some(utc(2026, 9, 7, 10, 0, 0)),
            "the offset is applied"
        );
        assert_eq!(
            parse_instant("2026-09-07T10:00:00.250Z").map(|i| i.timestamp_subsec_millis()),
            Some(250),
            "fractions are kept"
        );
    }

    #[test]
    fn date_time_without_offset_and_plain_date_are_utc() {
        assert_eq!(
            parse_instant("2026-09-07T10:00:00"),
            Some(utc(2026, 9, 7, 10, 0, 0)),
            "no offset means UTC"
        );
        assert_eq!(
            parse_instant("2026-09-07"),
            Some(utc(2026, 9, 7, 0, 0, 0)),
            "a date is its midnight in UTC"
        );
    }

    #[test]
    fn numbers_words_and_impossible_dates_are_not_dates() {
        for text in [
            "1000",
            "2026",
            "tomorrow",
            "",
            "2026-13-01",
            "2026-02-30",
            "20260907",
        ] {
            assert_eq!(parse_instant(text), None, "{text:?} is not a date");
        }
    }
}
