//! Go-style durations for flags: `300ms`, `5s`, `1m30s`, `1.5h`, `0`.
//!
//! The syntax is the one of Go's `time.ParseDuration` (units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`, decimal
//! fractions, several components), restricted to non-negative values because every duration flag of the
//! daemon is a period or a timeout.

use std::time::Duration;

/// Why a duration could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text is empty.
    #[error("empty duration")]
    Empty,
    /// A negative duration was given.
    #[error("invalid duration {0:?}: must not be negative")]
    Negative(String),
    /// A number is missing or malformed.
    #[error("invalid duration {0:?}: expected a number followed by a unit (e.g. 300ms, 5s, 1m30s)")]
    Malformed(String),
    /// A component has no unit (only a bare `0` may omit it).
    #[error("invalid duration {0:?}: missing unit (one of ns, us, ms, s, m, h)")]
    MissingUnit(String),
    /// An unknown unit.
    #[error("invalid duration {text:?}: unknown unit {unit:?} (one of ns, us, ms, s, m, h)")]
    UnknownUnit {
        /// The whole text.
        text: String,
        /// The offending unit.
        unit: String,
    },
    /// The value does not fit.
    #[error("invalid duration {0:?}: too large")]
    Overflow(String),
}

/// Parses a Go-style duration.
///
/// ```
/// use std::time::Duration;
/// use ccm_app::duration::parse_duration;
/// assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
/// assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
/// assert!(parse_duration("5").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let original = text;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Some(stripped) = rest.strip_prefix('-') {
        // "-0" is zero in Go; anything else negative is refused.
        if stripped.chars().all(|c| c == '0' || c == '.') && !stripped.is_empty() {
            return Ok(Duration::ZERO);
        }
        return Err(DurationError::Negative(original.to_string()));
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Malformed(original.to_string()));
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(DurationError::Malformed(original.to_string()));
        }
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_nanos: u128 = match unit {
            "" => return Err(DurationError::MissingUnit(original.to_string())),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    text: original.to_string(),
                    unit: other.to_string(),
                });
            }
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole
                .parse()
                .map_err(|_| DurationError::Overflow(original.to_string()))?
        };
        let mut component = whole
            .checked_mul(unit_nanos)
            .ok_or_else(|| DurationError::Overflow(original.to_string()))?;
        // Fractions beyond nanosecond precision are truncated, as Go does.
        let mut scale = unit_nanos;
        for digit in fraction.chars() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            let value = u128::from(digit.to_digit(10).unwrap_or(0));
            component += value * scale;
        }
        total_nanos = total_nanos
            .checked_add(component)
            .ok_or_else(|| DurationError::Overflow(original.to_string()))?;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000)
        .map_err(|_| DurationError::Overflow(original.to_string()))?;
    // The remainder is below 1e9 and always fits.
    let nanos = (total_nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Formats a duration the way Go prints one: `1m30s`, `300ms`, `2h0m0s`, `0s`.
///
/// ```
/// use std::time::Duration;
/// use ccm_app::duration::format_duration;
/// assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
/// assert_eq!(format_duration(Duration::from_millis(300)), "300ms");
/// assert_eq!(format_duration(Duration::from_secs(7200)), "2h0m0s");
/// ```
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = duration.as_secs();
    let hours = total_secs / 3_600;
    let minutes = (total_secs % 3_600) / 60;
    let seconds = trim_fraction(
        u128::from(total_secs % 60) * 1_000_000_000 + u128::from(duration.subsec_nanos()),
        1_000_000_000,
    );
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// Formats a duration as [`format_duration`] does, without the zero units at its end: `5m`, `1h30m`,
/// `10s`, `0s`. The flags' help shows their defaults this way; [`parse_duration`] reads it back.
///
/// ```
/// use std::time::Duration;
/// use ccm_app::duration::format_duration_compact;
/// assert_eq!(format_duration_compact(Duration::from_secs(300)), "5m");
/// assert_eq!(format_duration_compact(Duration::from_secs(5400)), "1h30m");
/// assert_eq!(format_duration_compact(Duration::from_secs(10)), "10s");
/// ```
pub fn format_duration_compact(duration: Duration) -> String {
    let mut text = format_duration(duration);
    for zero in ["0s", "0m"] {
        let rest = text.len() - zero.len();
        if text.ends_with(zero) && text[..rest].ends_with(['h', 'm']) {
            text.truncate(rest);
        }
    }
    text
}

/// `value / unit` with the fractional part written out and trailing zeros dropped.
fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let fraction = value % unit;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("5s", Duration::from_secs(5)),
            ("+5s", Duration::from_secs(5)),
            ("1m30s", Duration::from_secs(90)),
            ("300ms", Duration::from_millis(300)),
            ("1.5h", Duration::from_secs(5_400)),
            ("2h45m", Duration::from_secs(9_900)),
            ("1h1m1s1ms1us1ns", Duration::new(3_661, 1_001_001)),
            ("10µs", Duration::from_micros(10)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("0.0000000015s", Duration::from_nanos(1)),
            ("5m0s", Duration::from_secs(300)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text).as_ref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_bad_durations() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("-1s"),
            Err(DurationError::Negative("-1s".into()))
        );
        assert_eq!(
            parse_duration("5"),
            Err(DurationError::MissingUnit("5".into()))
        );
        assert_eq!(
            parse_duration("5d"),
            Err(DurationError::UnknownUnit {
                text: "5d".into(),
                unit: "d".into()
            })
        );
        assert_eq!(
            parse_duration("s"),
            Err(DurationError::Malformed("s".into()))
        );
        assert_eq!(
            parse_duration("1..5s"),
            Err(DurationError::Malformed("1..5s".into()))
        );
        assert_eq!(
            parse_duration("-"),
            Err(DurationError::Negative("-".into()))
        );
        assert!(matches!(
            parse_duration("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        assert_eq!(
            parse_duration("5s x").unwrap_err().to_string(),
            "invalid duration \"5s x\": unknown unit \"s x\" (one of ns, us, ms, s, m, h)"
        );
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(15), "15ns"),
            (Duration::from_micros(10), "10µs"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_millis(2_500), "2.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3_600), "1h0m0s"),
        ];
        for (duration, want) in cases {
            assert_eq!(format_duration(*duration), *want);
            assert_eq!(parse_duration(want).unwrap(), *duration, "{want}");
        }
    }

    #[test]
    fn compact_formats_drop_trailing_zero_units() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(60), "1m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(600), "10m"),
            (Duration::from_secs(3_600), "1h"),
            (Duration::from_secs(3_610), "1h0m10s"),
            (Duration::from_secs(5_400), "1h30m"),
            (Duration::from_millis(60_500), "1m0.5s"),
        ];
        for (duration, want) in cases {
            assert_eq!(format_duration_compact(*duration), *want);
            assert_eq!(parse_duration(want).unwrap(), *duration, "{want}");
        }
    }
}
