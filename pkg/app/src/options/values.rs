//! Parsers of the flag value types upstream's flags have beyond strings, numbers and durations: Go
//! booleans, klog levels, `--version`'s forms, `--tls-sni-cert-key`'s named certificate pairs, Kubernetes
//! quantities (`--log-*-info-buffer-size`) and key=value maps (`--tags`).

use std::path::PathBuf;

/// Parses a boolean as Go's `strconv.ParseBool` does (`1`, `t`, `T`, `TRUE`, `true`, `True` and their
/// false forms), which is what every boolean flag of upstream takes.
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!(
            "invalid boolean {other:?} (expected true, false, 1, 0, t or f)"
        )),
    }
}

/// Parses one occurrence of a key=value map flag (`--tags`) as pflag's string-to-string flag does: a value
/// with one `=` is one pair (quotes around it dropped, commas kept in the value); with more, the value is a
/// CSV record of `key=value` fields. Later occurrences of the flag add to (and override) earlier ones.
pub fn parse_key_value_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let fields = match text.matches('=').count() {
        0 => return Err(format!("{text} must be formatted as key=value")),
        1 => vec![text.trim_matches('"').to_string()],
        _ => csv_record(text)?,
    };
    fields
        .into_iter()
        .map(|field| match field.split_once('=') {
            Some((key, value)) => Ok((key.to_string(), value.to_string())),
            None => Err(format!("{field} must be formatted as key=value")),
        })
        .collect()
}

/// The fields of one CSV record (RFC 4180 quoting: `"a,b"` is one field, `""` inside quotes is a quote).
fn csv_record(text: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err(format!("{text}: unterminated quoted field"));
    }
    fields.push(field);
    Ok(fields)
}

/// Parses a klog verbosity level: any number that fits in 31 bits (levels past 10 log what 10 logs).
pub fn parse_level(text: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|level| *level <= i32::MAX as u32)
        .ok_or_else(|| format!("invalid level {text:?} (expected a number from 0 to 2147483647)"))
}

/// What `--version` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum VersionFlag {
    /// Not given, or `--version=false`: run.
    #[default]
    Off,
    /// `--version` or `--version=true`: print the version and the providers, and exit.
    Print,
    /// `--version=raw`: print the version information as JSON, and exit.
    Raw,
    /// `--version=vX.Y.Z`: run, reporting this version.
    Report(String),
}

/// Parses `--version`'s value as upstream's version flag does.
pub fn parse_version_flag(text: &str) -> Result<VersionFlag, String> {
    if text == "raw" {
        return Ok(VersionFlag::Raw);
    }
    if let Ok(print) = parse_go_bool(text) {
        return Ok(if print {
            VersionFlag::Print
        } else {
            VersionFlag::Off
        });
    }
    let semantic = text.strip_prefix('v').is_some_and(|rest| {
        let core = rest.split(['-', '+']).next().unwrap_or_default();
        let parts: Vec<&str> = core.split('.').collect();
        parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    });
    if semantic {
        Ok(VersionFlag::Report(text.to_string()))
    } else {
        Err(format!(
            "invalid version flag {text:?} (expected true, false, raw or vX.Y.Z)"
        ))
    }
}

/// One `--tls-sni-cert-key`: a certificate and key file, served to clients asking for one of `names`
/// (when empty: the names in the certificate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedCertKey {
    /// The PEM certificate (chain).
    pub cert_file: PathBuf,
    /// The PEM private key.
    pub key_file: PathBuf,
    /// The server names (DNS names, `*.` wildcards, IP addresses) it answers; empty for its own names.
    pub names: Vec<String>,
}

/// Parses `cert,key` or `cert,key:name1,name2` as upstream's `namedCertKey` flag does.
pub fn parse_named_cert_key(text: &str) -> Result<NamedCertKey, String> {
    let (files, names) = match text.split_once(':') {
        Some((files, names)) => {
            let names: Vec<String> = names.split(',').map(|n| n.trim().to_string()).collect();
            if names.iter().all(String::is_empty) {
                return Err("empty names list is not allowed".to_string());
            }
            (files, names)
        }
        None => (text, Vec::new()),
    };
    let parts: Vec<&str> = files.split(',').map(str::trim).collect();
    match parts.as_slice() {
        [cert, key] if !cert.is_empty() && !key.is_empty() => Ok(NamedCertKey {
            cert_file: PathBuf::from(cert),
            key_file: PathBuf::from(key),
            names: names.into_iter().filter(|n| !n.is_empty()).collect(),
        }),
        _ => Err("expected comma separated certificate and key file paths".to_string()),
    }
}

/// Parses a Kubernetes quantity of bytes (`512`, `1K`, `2Ki`, `3M`, `4Gi`, `1e3`) into a byte count.
pub fn parse_byte_quantity(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "invalid quantity {text:?} (expected a number of bytes with an optional suffix: K, M, G, T, P, \
             E, Ki, Mi, Gi, Ti, Pi, Ei)"
        )
    };
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().map_err(|_| bad())?;
            10f64.powi(power)
        }
        _ => return Err(bad()),
    };
    let bytes = (number * multiplier).ceil();
    if bytes.is_finite() && bytes >= 0.0 && bytes <= u64::MAX as f64 {
        Ok(bytes as u64)
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_booleans() {
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(yes), Ok(true));
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(no), Ok(false));
        }
        assert!(parse_go_bool("yes").is_err());
        assert!(parse_go_bool("").is_err());
    }

    #[test]
    fn key_value_pairs_as_pflag_reads_them() {
        let pairs = |text: &str| -> Vec<(String, String)> { parse_key_value_pairs(text).unwrap() };
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(pairs("team=ml"), [kv("team", "ml")]);
        // One `=`: the whole value is one pair, commas included.
        assert_eq!(pairs("owner=a,b"), [kv("owner", "a,b")]);
        assert_eq!(pairs("\"k=v\""), [kv("k", "v")]);
        assert_eq!(pairs("a=1,b=2"), [kv("a", "1"), kv("b", "2")]);
        assert_eq!(pairs("a=1,b="), [kv("a", "1"), kv("b", "")]);
        assert_eq!(pairs("\"a=x,y\",b=2"), [kv("a", "x,y"), kv("b", "2")]);
        assert_eq!(pairs("a==b,c=d"), [kv("a", "=b"), kv("c", "d")]);
        for bad in ["", "team", "a=1,b,c=2", "\"a=1,b=2"] {
            assert!(parse_key_value_pairs(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn levels() {
        assert_eq!(parse_level("0"), Ok(0));
        assert_eq!(parse_level("2147483647"), Ok(2_147_483_647));
        assert!(parse_level("2147483648").is_err());
        assert!(parse_level("-1").is_err());
        assert!(parse_level("two").is_err());
    }

    #[test]
    fn versions() {
        assert_eq!(
            parse_version_flag("v1.37.1-rc.0+abc"),
            Ok(VersionFlag::Report("v1.37.1-rc.0+abc".into()))
        );
        assert!(parse_version_flag("1.2.3").is_err());
        assert!(parse_version_flag("v1.2").is_err());
    }

    #[test]
    fn named_cert_keys() {
        assert_eq!(
            parse_named_cert_key("a.crt,a.key"),
            Ok(NamedCertKey {
                cert_file: "a.crt".into(),
                key_file: "a.key".into(),
                names: vec![],
            })
        );
        assert_eq!(
            parse_named_cert_key("foo.crt,foo.key:*.foo.com,foo.com")
                .unwrap()
                .names,
            ["*.foo.com", "foo.com"]
        );
        assert_eq!(
            parse_named_cert_key("a.crt").unwrap_err(),
            "expected comma separated certificate and key file paths"
        );
        assert_eq!(
            parse_named_cert_key("a.crt,a.key:").unwrap_err(),
            "empty names list is not allowed"
        );
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_byte_quantity("512"), Ok(512));
        assert_eq!(parse_byte_quantity("1K"), Ok(1000));
        assert_eq!(parse_byte_quantity("2Ki"), Ok(2048));
        assert_eq!(parse_byte_quantity("3M"), Ok(3_000_000));
        assert_eq!(parse_byte_quantity("1.5Mi"), Ok(1_572_864));
        assert_eq!(parse_byte_quantity("1e3"), Ok(1000));
        assert_eq!(parse_byte_quantity("0"), Ok(0));
        for bad in ["", "K", "1X", "-1", "1.2.3"] {
            assert!(parse_byte_quantity(bad).is_err(), "{bad}");
        }
    }
}
