//! Service annotations as data, and the value parsers providers share.
//!
//! Each provider lists the annotations it reads as a table of [`Annotation`] rows (name, value type, the
//! load-balancer kinds it applies to, default, one doc line). That table is the provider's one list: its
//! README table is checked against it ([`check_readme_table`]) and its fuzz target reads its keys from it.
//!
//! The parsers read values the way the upstream Go providers do (`strconv.ParseBool`, `Atoi`,
//! `ParseUint`, comma-separated lists, `k=v` pairs, CIDRs). Where two upstream providers read the same
//! shape differently, both readings are here, each named for what it does.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

/// What an annotation's value is, as its provider reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// A boolean, Go's `strconv.ParseBool` ([`parse_go_bool`]).
    GoBool,
    /// An integer, Go's `strconv.Atoi` ([`parse_go_int`]) or a range-checked whole number.
    Integer,
    /// An unsigned integer, Go's `strconv.ParseUint` ([`parse_go_uint`]).
    Unsigned,
    /// Free text (a name, an ARN, a path, an address).
    Text,
    /// One of a fixed set of values.
    OneOf(&'static [&'static str]),
    /// A comma-separated list.
    List,
    /// Comma-separated `k=v` pairs.
    KeyValuePairs,
    /// Comma-separated CIDRs.
    CidrList,
    /// Only whether the annotation is present counts, not its value.
    Presence,
}

/// The load-balancer kinds of a provider whose annotations apply to all its load balancers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllKinds;

/// One annotation a provider reads: a row of its annotation table.
///
/// `K` says which of the provider's load-balancer kinds the annotation applies to ([`AllKinds`] when the
/// provider has a single kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Annotation<K: 'static> {
    /// The full annotation key.
    pub name: &'static str,
    /// How the value is read.
    pub value: ValueType,
    /// The load-balancer kinds that read it.
    pub applies_to: K,
    /// The value that applies when the annotation is absent, when there is one.
    pub default: Option<&'static str>,
    /// What it does, in one line.
    pub doc: &'static str,
}

/// The names of an annotation table, in table order.
pub fn names<K>(table: &[Annotation<K>]) -> Vec<&'static str> {
    table.iter().map(|a| a.name).collect()
}

/// Go's `strconv.ParseBool`: `1`, `t`, `T`, `TRUE`, `true`, `True` and their false counterparts; nothing
/// else (no trimming, no other casing).
///
/// ```
/// use cloud_provider::annotations::parse_go_bool;
/// assert_eq!(parse_go_bool("True"), Some(true));
/// assert_eq!(parse_go_bool("f"), Some(false));
/// assert_eq!(parse_go_bool("tRuE"), None);
/// assert_eq!(parse_go_bool(" true"), None);
/// ```
pub fn parse_go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.Atoi` on a 64-bit platform: an optional `+` or `-`, then decimal digits.
///
/// ```
/// use cloud_provider::annotations::parse_go_int;
/// assert_eq!(parse_go_int("+42"), Some(42));
/// assert_eq!(parse_go_int("-3"), Some(-3));
/// assert_eq!(parse_go_int(" 3"), None);
/// assert_eq!(parse_go_int(""), None);
/// ```
pub fn parse_go_int(v: &str) -> Option<i64> {
    v.parse::<i64>().ok()
}

/// Go's `strconv.ParseUint(v, 10, 64)`: decimal digits only, no sign.
///
/// ```
/// use cloud_provider::annotations::parse_go_uint;
/// assert_eq!(parse_go_uint("90"), Some(90));
/// assert_eq!(parse_go_uint("+90"), None);
/// ```
pub fn parse_go_uint(v: &str) -> Option<u64> {
    if v.starts_with('+') {
        return None;
    }
    v.parse::<u64>().ok()
}

/// A comma-separated list, each piece trimmed, empty pieces kept (DigitalOcean's `getStrings`).
///
/// ```
/// use cloud_provider::annotations::comma_list_keeping_empty;
/// assert_eq!(comma_list_keeping_empty(" a, ,b"), ["a", "", "b"]);
/// ```
pub fn comma_list_keeping_empty(value: &str) -> Vec<String> {
    value.split(',').map(|p| p.trim().to_string()).collect()
}

/// A comma-separated list, each piece trimmed, empty pieces dropped (AWS's ID and subnet lists).
///
/// ```
/// use cloud_provider::annotations::comma_list_skipping_empty;
/// assert_eq!(comma_list_skipping_empty(" a,, b ,"), ["a", "b"]);
/// ```
pub fn comma_list_skipping_empty(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A comma-separated list, each piece trimmed; `None` when a piece is empty (lists that must name one
/// thing per item, such as one Elastic IP per subnet).
///
/// ```
/// use cloud_provider::annotations::comma_list_without_empty;
/// assert_eq!(comma_list_without_empty("a, b"), Some(vec!["a".to_string(), "b".to_string()]));
/// assert_eq!(comma_list_without_empty("a,,b"), None);
/// ```
pub fn comma_list_without_empty(value: &str) -> Option<Vec<String>> {
    let items = comma_list_keeping_empty(value);
    (!items.iter().any(String::is_empty)).then_some(items)
}

/// `k=v,k2=` pairs as upstream AWS reads them for classic load balancers: items trimmed, split at the
/// first `=` (text after a second `=` dropped), key and value as written, items with an empty key
/// skipped, later items winning.
///
/// ```
/// use cloud_provider::annotations::key_value_pairs;
/// let pairs = key_value_pairs("=v, a=1, a=2=3, b");
/// assert_eq!(pairs.get("a").map(String::as_str), Some("2"));
/// assert_eq!(pairs.get("b").map(String::as_str), Some(""));
/// assert_eq!(pairs.len(), 2);
/// ```
pub fn key_value_pairs(value: &str) -> BTreeMap<String, String> {
    pairs(value, false)
}

/// `k=v,k2=` pairs read like [`key_value_pairs`], with key and value trimmed too (network load
/// balancers' tags, labels and target-group attributes).
///
/// ```
/// use cloud_provider::annotations::key_value_pairs_trimmed;
/// let pairs = key_value_pairs_trimmed("a = 1");
/// assert_eq!(pairs.get("a").map(String::as_str), Some("1"));
/// ```
pub fn key_value_pairs_trimmed(value: &str) -> BTreeMap<String, String> {
    pairs(value, true)
}

fn pairs(value: &str, trim_parts: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for item in value.trim().split(',').map(str::trim) {
        let mut parts = item
            .split('=')
            .map(|p| if trim_parts { p.trim() } else { p });
        let key = parts.next().unwrap_or_default();
        if !key.is_empty() {
            out.insert(
                key.to_string(),
                parts.next().unwrap_or_default().to_string(),
            );
        }
    }
    out
}

/// CIDRs (each trimmed), reduced to their network and listed once, in first-seen order; `Err` names the
/// first item that is not a CIDR.
///
/// ```
/// use cloud_provider::annotations::cidr_list;
/// let nets = cidr_list(["10.0.0.0/8", " 192.168.1.7/24", "10.1.0.0/8"]).unwrap();
/// assert_eq!(nets.len(), 2);
/// assert_eq!(nets[1].to_string(), "192.168.1.0/24");
/// assert_eq!(cidr_list(["10.0.0.0/33"]).unwrap_err(), "10.0.0.0/33");
/// ```
pub fn cidr_list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Result<Vec<IpNet>, String> {
    let mut ranges: Vec<IpNet> = Vec::new();
    for item in items {
        let item = item.as_ref();
        let net: IpNet = item.trim().parse().map_err(|_| item.to_string())?;
        if !ranges.contains(&net.trunc()) {
            ranges.push(net.trunc());
        }
    }
    Ok(ranges)
}

/// A CIDR read like Go's `ParseCIDR` after upstream DigitalOcean's sloppy IPv4 handling (leading zeros
/// allowed), printed as Go prints its network (IPv4-mapped IPv6 networks print as IPv4).
///
/// ```
/// use cloud_provider::annotations::parse_cidr_go_sloppy;
/// assert_eq!(parse_cidr_go_sloppy("010.001.0.7/16").as_deref(), Some("10.1.0.0/16"));
/// assert_eq!(parse_cidr_go_sloppy("::ffff:10.0.0.0/104").as_deref(), Some("10.0.0.0/8"));
/// assert_eq!(parse_cidr_go_sloppy("nope"), None);
/// ```
pub fn parse_cidr_go_sloppy(raw: &str) -> Option<String> {
    let (address, prefix) = raw.split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    let address = strip_ipv4_leading_zeros(address).unwrap_or_else(|| address.to_string());
    let network = IpNet::new(address.parse::<IpAddr>().ok()?, prefix)
        .ok()?
        .trunc();
    if let IpNet::V6(v6) = network
        && let Some(v4) = v6.network().to_ipv4_mapped()
        && v6.prefix_len() >= 96
    {
        return Some(format!("{v4}/{}", v6.prefix_len() - 96));
    }
    Some(network.to_string())
}

/// `010.001.0.1` → `10.1.0.1`, for dotted IPv4 addresses; `None` for anything else.
fn strip_ipv4_leading_zeros(address: &str) -> Option<String> {
    let octets: Vec<&str> = address.split('.').collect();
    if octets.len() != 4
        || octets
            .iter()
            .any(|o| o.is_empty() || o.len() > 3 || !o.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let parsed: Vec<u8> = octets
        .iter()
        .map(|o| o.parse::<u8>().ok())
        .collect::<Option<_>>()?;
    Some(Ipv4Addr::new(parsed[0], parsed[1], parsed[2], parsed[3]).to_string())
}

/// Checks a README's annotation table against a provider's annotation table: every row of the table is
/// named in the README and every name in the README table is a row.
///
/// The README table is the first Markdown table after the line `heading`; its names are the backquoted
/// items of each row's first cell. A name with a `/` is a full key; any other name is `short_prefix` +
/// name. A name starting with `-` abbreviates the cell's first name: it replaces the tail of that name
/// after one of its dashes (the longest head that makes a known annotation), so that
/// `` `aws-load-balancer-healthcheck-interval` / `-timeout` `` names both health-check annotations.
///
/// `Err` lists every difference.
pub fn check_readme_table<K>(
    table: &[Annotation<K>],
    readme: &str,
    heading: &str,
    short_prefix: &str,
) -> Result<(), String> {
    let known: BTreeSet<&str> = table.iter().map(|a| a.name).collect();
    let Some(rows) = readme_table_rows(readme, heading) else {
        return Err(format!("no annotation table after the heading {heading:?}"));
    };
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for cell in rows {
        let items = backquoted(&cell);
        let Some(first) = items.first().map(|i| full_name(i, short_prefix)) else {
            continue;
        };
        for item in &items {
            let name = if let Some(tail) = item.strip_prefix('-') {
                expand_shorthand(&first, tail, &known)
                    .ok_or_else(|| format!("{item:?} (after {first}) abbreviates no annotation"))
            } else {
                Ok(full_name(item, short_prefix))
            };
            match name {
                Ok(name) => {
                    documented.insert(name);
                }
                Err(problem) => problems.push(problem),
            }
        }
    }
    for name in &known {
        if !documented.contains(*name) {
            problems.push(format!("{name} is read but not in the README table"));
        }
    }
    for name in &documented {
        if !known.contains(name.as_str()) {
            problems.push(format!("{name} is in the README table but not read"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The checks a provider's tests run on its annotation table: the rows are in name order, each name once
/// (fuzz corpora depend on the order), and the README's table after `heading` names exactly the rows
/// ([`check_readme_table`]). `Err` lists every difference.
pub fn check_table<K>(
    table: &[Annotation<K>],
    readme: &str,
    heading: &str,
    short_prefix: &str,
) -> Result<(), String> {
    let names = names(table);
    if let Some(pair) = names.windows(2).find(|pair| pair[0] >= pair[1]) {
        return Err(format!(
            "the table is not in name order, each name once: {} before {}",
            pair[0], pair[1]
        ));
    }
    check_readme_table(table, readme, heading, short_prefix)
}

/// The first cells of the body rows of the first table after `heading`.
fn readme_table_rows(readme: &str, heading: &str) -> Option<Vec<String>> {
    let mut lines = readme.lines().skip_while(|l| l.trim() != heading);
    lines.next()?;
    let rows: Vec<String> = lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| row.split('|').nth(1).unwrap_or_default().to_string())
        .collect();
    (!rows.is_empty()).then_some(rows)
}

fn backquoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn full_name(item: &str, short_prefix: &str) -> String {
    if item.contains('/') {
        item.to_string()
    } else {
        format!("{short_prefix}{item}")
    }
}

fn expand_shorthand(first: &str, tail: &str, known: &BTreeSet<&str>) -> Option<String> {
    first
        .rmatch_indices('-')
        .map(|(at, _)| format!("{}{tail}", &first[..=at]))
        .find(|candidate| known.contains(candidate.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[Annotation<AllKinds>] = &[
        Annotation {
            name: "example.com/lb-healthcheck-interval",
            value: ValueType::Integer,
            applies_to: AllKinds,
            default: Some("10"),
            doc: "seconds between checks",
        },
        Annotation {
            name: "example.com/lb-healthcheck-timeout",
            value: ValueType::Integer,
            applies_to: AllKinds,
            default: Some("5"),
            doc: "seconds before a check fails",
        },
        Annotation {
            name: "other.io/flag",
            value: ValueType::GoBool,
            applies_to: AllKinds,
            default: None,
            doc: "a flag",
        },
    ];

    const README: &str = "\
intro
## Annotations
text
| annotation | meaning |
|---|---|
| `lb-healthcheck-interval` / `-timeout` | checks |
| `other.io/flag` | flag |

after
";

    #[test]
    fn go_booleans_and_numbers() {
        for v in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(v), Some(true), "{v}");
        }
        for v in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(v), Some(false), "{v}");
        }
        for v in ["", "yes", "tRuE", " true", "2"] {
            assert_eq!(parse_go_bool(v), None, "{v}");
        }
        assert_eq!(parse_go_int("007"), Some(7));
        assert_eq!(parse_go_int("1e3"), None);
        assert_eq!(parse_go_uint("-1"), None);
        assert_eq!(parse_go_uint(""), None);
    }

    #[test]
    fn pairs_as_written_or_trimmed() {
        let raw = key_value_pairs("a = 1");
        assert_eq!(raw.get("a ").map(String::as_str), Some(" 1"));
        let trimmed = key_value_pairs_trimmed(" =x, a = 1 ,b");
        assert_eq!(
            trimmed,
            BTreeMap::from([("a".into(), "1".into()), ("b".into(), "".into())])
        );
    }

    #[test]
    fn readme_tables_match_with_shorthands() {
        check_readme_table(TABLE, README, "## Annotations", "example.com/").unwrap();
        assert_eq!(
            names(TABLE),
            [
                "example.com/lb-healthcheck-interval",
                "example.com/lb-healthcheck-timeout",
                "other.io/flag"
            ]
        );
    }

    #[test]
    fn readme_differences_are_listed() {
        let missing = README.replace(" / `-timeout`", "");
        let err =
            check_readme_table(TABLE, &missing, "## Annotations", "example.com/").unwrap_err();
        assert!(
            err.contains("lb-healthcheck-timeout is read but not"),
            "{err}"
        );
        let extra = README.replace("`other.io/flag`", "`other.io/flag`, `lb-gone`, `-nothing`");
        let err = check_readme_table(TABLE, &extra, "## Annotations", "example.com/").unwrap_err();
        assert!(
            err.contains("example.com/lb-gone is in the README table but not read"),
            "{err}"
        );
        assert!(err.contains("\"-nothing\""), "{err}");
        assert!(check_readme_table(TABLE, README, "## Nope", "example.com/").is_err());
    }

    #[test]
    fn tables_must_be_in_name_order() {
        check_table(TABLE, README, "## Annotations", "example.com/").unwrap();
        let unordered = [TABLE[1], TABLE[0], TABLE[2]];
        let err = check_table(&unordered, README, "## Annotations", "example.com/").unwrap_err();
        assert!(err.contains("not in name order"), "{err}");
    }
}
