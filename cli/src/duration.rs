//! Durations on the command line: `500ms`, `2s`, `1.5s`, `5m`, `1h`, or a bare number of
//! seconds. Ten lines instead of a crate.

use std::time::Duration;

pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try 500ms, 2s, 5m, 1h)"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (ms, s, m, h, d)"
            ));
        }
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("{text:?} is not a duration"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert!(parse("5 parsecs").is_err(), "unknown unit refused");
        assert!(parse("-1s").is_err(), "negative refused");
    }
}
