//! Durations on the command line and in `FRONTA_*` settings, parsed by humantime:
//! `500ms`, `2s`, `1.5s`, `5m`, `1h`, `1d`, combinations such as `1h 30m`, or a bare
//! number of seconds (`30`, `0.5`). A value too large for a duration is refused with a
//! message, never a panic; so is a negative one.

use std::time::Duration;

/// The duration `text` says.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let hint = "try 500ms, 2s, 5m, 1h, 1d";
    if text.is_empty() {
        return Err(format!("an empty duration ({hint})"));
    }
    // A bare number is seconds, as it always was here (humantime wants a unit).
    let bare = text
        .bytes()
        .all(|byte| byte.is_ascii_digit() || byte == b'.');
    let with_unit;
    let text_with_unit = if bare {
        with_unit = format!("{text}s");
        with_unit.as_str()
    } else {
        text
    };
    humantime::parse_duration(text_with_unit).map_err(|err| match err {
        humantime::DurationError::NumberOverflow => {
            format!("{text:?} is too long a duration (or finer than a nanosecond)")
        }
        humantime::DurationError::UnknownUnit { unit, .. } => {
            format!("unknown unit {unit:?} in {text:?} (ns, us, ms, s, m or min, h, d, w)")
        }
        other => format!("{text:?} is not a duration: {other} ({hint})"),
    })
}

/// `duration` as this parser reads it back (`5ms`, `1m 30s`, `0s`).
pub fn format(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_the_units_users_type() {
        let cases = [
            ("30", Duration::from_secs(30)),
            ("2", Duration::from_secs(2)),
            ("0.5", Duration::from_millis(500)),
            ("500ms", Duration::from_millis(500)),
            ("0.5ms", Duration::from_micros(500)),
            ("2s", Duration::from_secs(2)),
            ("1.5s", Duration::from_millis(1500)),
            ("5m", Duration::from_secs(300)),
            ("5min", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("24h", Duration::from_secs(86_400)),
            ("1d", Duration::from_secs(86_400)),
            (" 10s ", Duration::from_secs(10)),
            ("1h 30m", Duration::from_secs(5400)),
            ("0", Duration::ZERO),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn out_of_range_durations_are_an_error_not_a_panic() {
        for text in [
            "99999999999999999999d",
            "99999999999999999999",
            "999999999999999999y",
            "18446744073709551616s",
        ] {
            let refused = std::panic::catch_unwind(|| parse(text));
            let refused = refused.unwrap_or_else(|_| panic!("{text:?} panicked"));
            let message = refused.expect_err(text);
            assert!(
                message.contains("too long"),
                "{text:?}: the message says why: {message}"
            );
        }
    }

    #[test]
    fn nonsense_is_refused_with_a_hint() {
        assert!(
            parse("  ").expect_err("blank").contains("empty"),
            "a blank duration is called empty"
        );
        for text in ["5 parsecs", "-1s", "fast", "1.s", "1..5s"] {
            let message = parse(text).expect_err(text);
            assert!(
                message.contains(text.trim()),
                "{text:?}: the message quotes what was given: {message}"
            );
        }
        assert!(
            parse("5 parsecs")
                .expect_err("an unknown unit")
                .contains("unknown unit"),
            "an unknown unit is named as such"
        );
    }

    #[test]
    fn formatted_durations_parse_back_to_themselves() {
        for duration in [
            Duration::ZERO,
            Duration::from_millis(5),
            Duration::from_micros(2_500),
            Duration::from_nanos(300_000_001),
            Duration::from_secs(5400),
        ] {
            assert_eq!(
                parse(&format(duration)),
                Ok(duration),
                "{duration:?} as {:?}",
                format(duration)
            );
        }
    }
}
