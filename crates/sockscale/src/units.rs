//! Parsing sizes and durations as users write them: `16KiB`, `1M`, `64k`; `10`, `0.5`, `500ms`.

use std::time::Duration;

/// Bytes, with an optional binary suffix (k, K, KB, KiB, M, MiB, G, GiB: all powers of 1024).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let value: usize = digits.parse().map_err(|_| format!("'{text}' is not a size (try 65536, 64KiB or 1MiB)"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => return Err(format!("unknown size suffix '{other}' in '{text}' (use KiB, MiB or GiB)")),
    };
    value.checked_mul(1 << shift).ok_or_else(|| format!("'{text}' is too large"))
}

/// A duration longer than zero: plain seconds (`10`, `0.5`) or with a unit (`500ms`, `2s`, `1m`).
///
/// Zero is refused here, for every flag at once: a zero timeout, interval or run length has no
/// useful meaning (a zero stats interval spins a core). A flag for which zero does mean
/// something says so in its help and parses with [`parse_duration_or_zero`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration_or_zero(text)?;
    if duration.is_zero() {
        return Err("must be longer than zero (e.g. 10, 0.5 or 500ms)".to_owned());
    }
    Ok(duration)
}

/// A duration of zero or more, for the flags where zero has a documented meaning.
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err("must not be negative (e.g. 10, 0.5 or 500ms)".to_owned());
    }
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("'{text}' is not a duration (try 10, 0.5, 500ms or 2m)"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown duration unit '{other}' in '{text}' (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("'{text}' is not a usable duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16KiB"), Ok(16384));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("-1").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 days").is_err());
    }

    #[test]
    fn zero_and_negative_durations_are_refused_with_the_reason() {
        for zero in ["0", "0s", "0ms", "0.0", "0.0000000001"] {
            let err = parse_duration(zero).unwrap_err();
            assert_eq!(err, "must be longer than zero (e.g. 10, 0.5 or 500ms)", "{zero}");
            assert!(parse_duration_or_zero(zero).is_ok_and(|d| d.is_zero()), "{zero}");
        }
        for negative in ["-1", "-0.5", "-500ms"] {
            let err = parse_duration(negative).unwrap_err();
            assert_eq!(err, "must not be negative (e.g. 10, 0.5 or 500ms)", "{negative}");
            assert!(parse_duration_or_zero(negative).unwrap_err().contains("negative"), "{negative}");
        }
        assert_eq!(parse_duration_or_zero("2s"), Ok(Duration::from_secs(2)));
    }
}
