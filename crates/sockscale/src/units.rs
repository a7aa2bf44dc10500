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

/// A duration: plain seconds (`10`, `0.5`) or with a unit (`500ms`, `2s`, `1m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
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
}
