//! A small reader for the INI dialect of `--cloud-config` files (the git-config style used by the
//! Kubernetes cloud providers).
//!
//! The dialect: `[Section]` and `[Section "subsection"]` headers, `Name = value` lines, comments starting
//! with `;` or `#` (on their own line or after a value), optional double quotes around values (with `\"`,
//! `\\`, `\n` and `\t` escapes), and a bare `Name` meaning `Name = true`. Section and key names are
//! case-insensitive; subsection names are not. A key may repeat; the caller decides whether that is allowed.

use std::fmt;

/// One `Name = value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key as written.
    pub key: String,
    /// The value, unquoted and unescaped; `None` for a bare key.
    pub value: Option<String>,
    /// The 1-based line number.
    pub line: usize,
}

/// A section with its entries in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The section name as written (compare case-insensitively).
    pub name: String,
    /// The quoted subsection name, if any.
    pub subsection: Option<String>,
    /// The 1-based line number of the header.
    pub line: usize,
    /// The section's entries.
    pub entries: Vec<Entry>,
}

impl Section {
    /// The section header as written in the file, e.g. `[ServiceOverride "1"]`.
    pub fn header(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("[{} {sub:?}]", self.name),
            None => format!("[{}]", self.name),
        }
    }
}

/// A syntax error with its line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for SyntaxError {}

/// Parses the whole file into its sections, in file order.
pub fn parse(text: &str) -> Result<Vec<Section>, SyntaxError> {
    let mut sections: Vec<Section> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with(';') || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            sections.push(parse_header(rest, line)?);
            continue;
        }
        let Some(section) = sections.last_mut() else {
            return Err(SyntaxError {
                line,
                message: "a key outside any section (start the file with [Global])".to_string(),
            });
        };
        section.entries.push(parse_entry(trimmed, line)?);
    }
    Ok(sections)
}

fn parse_header(rest: &str, line: usize) -> Result<Section, SyntaxError> {
    let err = |message: &str| SyntaxError {
        line,
        message: message.to_string(),
    };
    let close = rest
        .rfind(']')
        .ok_or_else(|| err("a section header without a closing ']'"))?;
    let after = rest[close + 1..].trim();
    if !(after.is_empty() || after.starts_with(';') || after.starts_with('#')) {
        return Err(err("unexpected text after the section header"));
    }
    let inner = rest[..close].trim();
    let (name, subsection) = match inner.find(char::is_whitespace) {
        None => (inner, None),
        Some(split) => {
            let quoted = inner[split..].trim();
            let Some(body) = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"')) else {
                return Err(err("a subsection name must be in double quotes"));
            };
            (&inner[..split], Some(unescape(body, line)?))
        }
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(err("an empty or invalid section name"));
    }
    Ok(Section {
        name: name.to_string(),
        subsection,
        line,
        entries: Vec::new(),
    })
}

fn parse_entry(text: &str, line: usize) -> Result<Entry, SyntaxError> {
    let (key, value) = match text.find('=') {
        Some(eq) => (text[..eq].trim(), Some(text[eq + 1..].trim())),
        None => (strip_comment(text).trim(), None),
    };
    if key.is_empty()
        || !key.starts_with(|c: char| c.is_ascii_alphabetic())
        || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(SyntaxError {
            line,
            message: format!("invalid key name {key:?}"),
        });
    }
    let value = match value {
        Some(v) => Some(parse_value(v, line)?),
        None => None,
    };
    Ok(Entry {
        key: key.to_string(),
        value,
        line,
    })
}

/// Everything before an unquoted `;` or `#`.
fn strip_comment(text: &str) -> &str {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => in_quotes = !in_quotes,
            ';' | '#' if !in_quotes => return &text[..i],
            _ => {}
        }
    }
    text
}

/// A value: unquoted text with surrounding blanks removed, quoted parts kept verbatim (after escapes).
fn parse_value(raw: &str, line: usize) -> Result<String, SyntaxError> {
    let text = strip_comment(raw).trim();
    let mut out = String::with_capacity(text.len());
    let mut in_quotes = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => in_quotes = !in_quotes,
            '\\' => match chars.next() {
                Some('"') => out.push('"'),
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                other => {
                    return Err(SyntaxError {
                        line,
                        message: format!(
                            "invalid escape sequence \\{}",
                            other.map(String::from).unwrap_or_default()
                        ),
                    });
                }
            },
            _ => out.push(c),
        }
    }
    if in_quotes {
        return Err(SyntaxError {
            line,
            message: "an unterminated quoted value".to_string(),
        });
    }
    Ok(out)
}

fn unescape(body: &str, line: usize) -> Result<String, SyntaxError> {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => {
                    return Err(SyntaxError {
                        line,
                        message: "invalid escape sequence in a subsection name".to_string(),
                    });
                }
            },
            '"' => {
                return Err(SyntaxError {
                    line,
                    message: "an unescaped quote in a subsection name".to_string(),
                });
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_entries_and_comments() {
        let text = "; leading comment\n\
                    [Global]\n\
                    Region = us-east-1 ; trailing comment\n\
                    # another comment\n\
                    DisableSecurityGroupIngress\n\
                    Quoted = \"a ; b # c\" \n\
                    Escaped = \"say \\\"hi\\\"\"\n\
                    Empty =\n\
                    \n\
                    [ServiceOverride \"1\"]\n\
                    URL = http://127.0.0.1:5000/\n";
        let sections = parse(text).unwrap();
        assert_eq!(sections.len(), 2);
        let global = &sections[0];
        assert_eq!(global.name, "Global");
        assert_eq!(global.subsection, None);
        assert_eq!(global.line, 2);
        let values: Vec<(&str, Option<&str>, usize)> = global
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_deref(), e.line))
            .collect();
        assert_eq!(
            values,
            vec![
                ("Region", Some("us-east-1"), 3),
                ("DisableSecurityGroupIngress", None, 5),
                ("Quoted", Some("a ; b # c"), 6),
                ("Escaped", Some("say \"hi\""), 7),
                ("Empty", Some(""), 8),
            ]
        );
        let over = &sections[1];
        assert_eq!(over.subsection.as_deref(), Some("1"));
        assert_eq!(over.header(), "[ServiceOverride \"1\"]");
        assert_eq!(
            over.entries[0].value.as_deref(),
            Some("http://127.0.0.1:5000/")
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let cases = [
            ("Region = x\n", 1, "outside any section"),
            ("[Global\n", 1, "closing ']'"),
            ("[Global]\n[Over 1]\n", 2, "double quotes"),
            ("[Global] junk\n", 1, "after the section header"),
            ("[]\n", 1, "section name"),
            ("[Global]\n= value\n", 2, "invalid key name"),
            ("[Global]\nbad key = 1\n", 2, "invalid key name"),
            ("[Global]\nRegion = \"open\n", 2, "unterminated"),
            ("[Global]\nRegion = \\q\n", 2, "escape"),
        ];
        for (text, line, fragment) in cases {
            let err = parse(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}");
            assert!(err.message.contains(fragment), "{text:?}: {err}");
            assert!(err.to_string().starts_with(&format!("line {line}: ")));
        }
    }

    #[test]
    fn empty_file_has_no_sections() {
        assert!(parse("").unwrap().is_empty());
        assert!(parse("  \n; only comments\n").unwrap().is_empty());
    }
}
