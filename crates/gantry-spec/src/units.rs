//! Sizes and durations as the workflow file writes them.

use std::time::Duration;

const SIZE_UNITS: &[(&str, u128)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1_000),
    ("kb", 1_000),
    ("ki", 1 << 10),
    ("kib", 1 << 10),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("mi", 1 << 20),
    ("mib", 1 << 20),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("gi", 1 << 30),
    ("gib", 1 << 30),
    ("t", 1_000_000_000_000),
    ("tb", 1_000_000_000_000),
    ("ti", 1 << 40),
    ("tib", 1 << 40),
    ("p", 1_000_000_000_000_000),
    ("pb", 1_000_000_000_000_000),
    ("pi", 1 << 50),
    ("pib", 1 << 50),
    ("e", 1_000_000_000_000_000_000),
    ("eb", 1_000_000_000_000_000_000),
    ("ei", 1 << 60),
    ("eib", 1 << 60),
];

/// Digits kept after the decimal point. More cannot change a byte or
/// nanosecond count of a value that fits in 64 bits, and the cap keeps the
/// arithmetic inside `u128`.
const MAX_FRACTION_DIGITS: usize = 20;

/// A decimal number split into its integer part and a fraction
/// `frac / 10^scale`, parsed exactly: floating point would turn `1.1TB`
/// into 1100000000000.0002 bytes.
struct Decimal {
    int: u128,
    frac: u128,
    scale: u32,
}

/// Parses `digits[.digits]` at the start of `s`; returns it and the rest.
fn parse_decimal(s: &str) -> Option<(Decimal, &str)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut int: u128 = 0;
    let mut digits = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        int = int
            .checked_mul(10)?
            .checked_add(u128::from(bytes[i] - b'0'))?;
        i += 1;
        digits += 1;
    }
    let mut frac: u128 = 0;
    let mut scale: u32 = 0;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            if (scale as usize) < MAX_FRACTION_DIGITS {
                frac = frac * 10 + u128::from(bytes[i] - b'0');
                scale += 1;
            }
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    Some((Decimal { int, frac, scale }, &s[i..]))
}

impl Decimal {
    /// `self * unit`, rounded up to a whole count; `None` on overflow.
    fn times(&self, unit: u128) -> Option<u128> {
        let whole = self.int.checked_mul(unit)?;
        let denom = 10u128.pow(self.scale);
        let num = self.frac.checked_mul(unit)?;
        let part = num.div_ceil(denom);
        whole.checked_add(part)
    }

    /// `self * unit`, truncated like Go's `time.ParseDuration`.
    fn times_trunc(&self, unit: u128) -> Option<u128> {
        let whole = self.int.checked_mul(unit)?;
        let denom = 10u128.pow(self.scale);
        let part = self.frac.checked_mul(unit)? / denom;
        whole.checked_add(part)
    }
}

/// Parses a size in bytes: a decimal number and an optional unit, case-
/// insensitive, SI (`KB`, `MB`, `GB`, `TB`, ... and the bare `K`, `M`, `G`,
/// `T`) or IEC (`KiB`, `MiB`, `GiB`, `TiB`, ... and `Ki`, `Mi`, ...). A bare
/// number is bytes. Fractions of a byte round up.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty size; write a number and a unit, such as 512MiB or 2GB".into());
    }
    let (num, rest) = parse_decimal(text).ok_or_else(|| {
        format!("invalid size `{s}`: expected a number and an optional unit, such as 512MiB or 2GB")
    })?;
    let unit_text = rest.trim_start();
    let unit = unit_text.to_ascii_lowercase();
    let mult = SIZE_UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, m)| *m)
        .ok_or_else(|| {
            format!(
                "unknown unit `{unit_text}` in size `{s}`; use B, KB, MB, GB, TB, PB (powers of 1000) \
                 or KiB, MiB, GiB, TiB, PiB (powers of 1024)"
            )
        })?;
    num.times(mult)
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| format!("size `{s}` is too large"))
}

const NANOS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a duration in Go's syntax (`time.ParseDuration`): a sequence of
/// decimal numbers, each with a unit, such as `90s`, `1h30m`, `12h0m0s`,
/// `1.5h`, `500ms`, `10us`. Unlike Go, negative durations are refused: a
/// workflow has no use for them.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration; write a number and a unit, such as 90s or 1h30m".into());
    }
    let mut rest = text;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if rest.starts_with('-') {
        return Err(format!("duration `{s}` is negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("invalid duration `{s}`"));
    }
    // Go caps durations at the largest int64 nanosecond count.
    let max = i64::MAX as u128;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (num, after) = parse_decimal(rest).ok_or_else(|| {
            format!("invalid duration `{s}`: expected a number and a unit, such as 90s or 1h30m")
        })?;
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let unit = &after[..unit_len];
        if unit.is_empty() {
            return Err(format!(
                "missing unit in duration `{s}`; use ns, us, ms, s, m or h (for example 90s)"
            ));
        }
        let mult = NANOS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!("unknown unit `{unit}` in duration `{s}`; use ns, us, ms, s, m or h")
            })?;
        let value = num
            .times_trunc(mult)
            .filter(|v| *v <= max)
            .ok_or_else(|| format!("duration `{s}` is too long"))?;
        total = total
            .checked_add(value)
            .filter(|v| *v <= max)
            .ok_or_else(|| format!("duration `{s}` is too long"))?;
        rest = &after[unit_len..];
    }
    let nanos = u64::try_from(total).map_err(|_| format!("duration `{s}` is too long"))?;
    Ok(Duration::from_nanos(nanos))
}

/// Formats a duration the way Go's `Duration.String` does (`1h30m0s`,
/// `1.5s`, `500ms`), so a value read from a file can be written back.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (unit, div) = if nanos < 1_000 {
            ("ns", 1u128)
        } else if nanos < 1_000_000 {
            ("\u{b5}s", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{}", frac_str(nanos, div), unit);
    }
    let hours = nanos / 3_600_000_000_000;
    let rem = nanos % 3_600_000_000_000;
    let mins = rem / 60_000_000_000;
    let secs_nanos = rem % 60_000_000_000;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || mins > 0 {
        out.push_str(&format!("{mins}m"));
    }
    out.push_str(&frac_str(secs_nanos, 1_000_000_000));
    out.push('s');
    out
}

fn frac_str(value: u128, div: u128) -> String {
    let whole = value / div;
    let frac = value % div;
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{}.{}", whole, digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let cases: &[(&str, u64)] = &[
            ("1024", 1024),
            ("0", 0),
            ("512MIB", 512 << 20),
            ("512MiB", 512 << 20),
            ("512mib", 512 << 20),
            ("2GB", 2_000_000_000),
            ("2gb", 2_000_000_000),
            ("0.5GiB", 1 << 29),
            ("1.5T", 1_500_000_000_000),
            ("1.5TiB", 3 << 39),
            ("1.1TB", 1_100_000_000_000),
            ("35GB", 35_000_000_000),
            ("8GiB", 8 << 30),
            ("1GB", 1_000_000_000),
            ("24GiB", 24 << 30),
            ("10 MB", 10_000_000),
            ("  4Ki ", 4096),
            ("100B", 100),
            ("1.5KB", 1500),
            ("1.0001KB", 1001),
            ("0.1B", 1),
            ("15EiB", 15 << 60),
            ("3.", 3),
            (".5KiB", 512),
        ];
        for (input, want) in cases {
            assert_eq!(parse_size(input), Ok(*want), "{input}");
        }
    }

    #[test]
    fn size_errors() {
        let cases: &[(&str, &str)] = &[
            ("", "empty size; write a number and a unit, such as 512MiB or 2GB"),
            ("GB", "invalid size `GB`: expected a number and an optional unit, such as 512MiB or 2GB"),
            ("-1GB", "invalid size `-1GB`: expected a number and an optional unit, such as 512MiB or 2GB"),
            ("12XB", "unknown unit `XB` in size `12XB`; use B, KB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024)"),
            ("1.2.3GB", "unknown unit `.3GB` in size `1.2.3GB`; use B, KB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024)"),
            ("17EiB", "size `17EiB` is too large"),
            ("99999999999999999999999999999999999999999", "invalid size `99999999999999999999999999999999999999999`: expected a number and an optional unit, such as 512MiB or 2GB"),
        ];
        for (input, want) in cases {
            assert_eq!(parse_size(input), Err(want.to_string()), "{input}");
        }
    }

    #[test]
    fn durations() {
        let cases: &[(&str, Duration)] = &[
            ("90s", Duration::from_secs(90)),
            ("2h", Duration::from_secs(7200)),
            ("12h0m0s", Duration::from_secs(43200)),
            ("1h30m", Duration::from_secs(5400)),
            ("1m300s", Duration::from_secs(360)),
            ("1.5h", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("10us", Duration::from_micros(10)),
            ("10\u{b5}s", Duration::from_micros(10)),
            ("10\u{3bc}s", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("0", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            ("0.5s", Duration::from_millis(500)),
            (".5s", Duration::from_millis(500)),
            ("1.000000001s", Duration::from_nanos(1_000_000_001)),
            ("1.0000000019s", Duration::from_nanos(1_000_000_001)),
            ("30m", Duration::from_secs(1800)),
            ("2562047h", Duration::from_secs(2562047 * 3600)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input), Ok(*want), "{input}");
        }
    }

    #[test]
    fn duration_errors() {
        let cases: &[(&str, &str)] = &[
            (
                "",
                "empty duration; write a number and a unit, such as 90s or 1h30m",
            ),
            (
                "120",
                "missing unit in duration `120`; use ns, us, ms, s, m or h (for example 90s)",
            ),
            (
                "1d",
                "unknown unit `d` in duration `1d`; use ns, us, ms, s, m or h",
            ),
            ("-5s", "duration `-5s` is negative"),
            (
                "h",
                "invalid duration `h`: expected a number and a unit, such as 90s or 1h30m",
            ),
            (
                "1h 30m",
                "unknown unit `h ` in duration `1h 30m`; use ns, us, ms, s, m or h",
            ),
            ("2562048h", "duration `2562048h` is too long"),
            ("+", "invalid duration `+`"),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input), Err(want.to_string()), "{input}");
        }
    }

    #[test]
    fn duration_format_round_trips() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(7200), "2h0m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_micros(10), "10\u{b5}s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_nanos(1_500), "1.5\u{b5}s"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(*d), *want);
            assert_eq!(parse_duration(want), Ok(*d));
        }
    }
}
