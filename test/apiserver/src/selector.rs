//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `exists`, `!exists`, `<`, `>`) and field
//! selectors (`=`, `==`, `!=`) with the parsing errors the real server reports.

use crate::validation;

/// A parsing error; the server answers it with 400 BadRequest and this message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelectorError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Exists,
    NotExists,
    Equals,
    NotEquals,
    In,
    NotIn,
    GreaterThan,
    LessThan,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    reqs: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Equals,
    DoubleEquals,
    NotEquals,
    Bang,
    Open,
    Close,
    Comma,
    In,
    NotIn,
    Gt,
    Lt,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) => s.clone(),
            Token::Equals => "=".into(),
            Token::DoubleEquals => "==".into(),
            Token::NotEquals => "!=".into(),
            Token::Bang => "!".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Comma => ",".into(),
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            Token::Gt => ">".into(),
            Token::Lt => "<".into(),
            Token::End => "".into(),
        }
    }
}

fn special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(input: &str) -> Vec<Token> {
    let chars: Vec<char> = input.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let tok = match c {
            '=' if next == Some('=') => {
                i += 1;
                Token::DoubleEquals
            }
            '=' => Token::Equals,
            '!' if next == Some('=') => {
                i += 1;
                Token::NotEquals
            }
            '!' => Token::Bang,
            '(' => Token::Open,
            ')' => Token::Close,
            ',' => Token::Comma,
            '>' => Token::Gt,
            '<' => Token::Lt,
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !special(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Ident(word),
                });
                continue;
            }
        };
        out.push(tok);
        i += 1;
    }
    out.push(Token::End);
    out
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        self.toks.get(self.pos).unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn err(found: &Token, expected: &str) -> SelectorError {
        SelectorError(format!(
            "unable to parse requirement: found '{}', expected: {expected}",
            found.describe()
        ))
    }

    fn identifier(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            Token::Ident(s) => Ok(s),
            other => Err(Self::err(&other, "identifier")),
        }
    }

    fn value(&mut self) -> Result<String, SelectorError> {
        // A value may be empty (`key=`), which the lexer shows as the following token.
        match self.peek().clone() {
            Token::Ident(s) => {
                self.next();
                Ok(s)
            }
            Token::Comma | Token::End => Ok(String::new()),
            other => Err(Self::err(&other, "identifier")),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if *self.peek() == Token::Bang {
            self.next();
            let key = self.identifier()?;
            return Ok(Requirement {
                key,
                op: Op::NotExists,
                values: vec![],
            });
        }
        let key = self.identifier()?;
        let op = match self.peek().clone() {
            Token::Comma | Token::End => {
                return Ok(Requirement {
                    key,
                    op: Op::Exists,
                    values: vec![],
                });
            }
            Token::Equals | Token::DoubleEquals => Op::Equals,
            Token::NotEquals => Op::NotEquals,
            Token::In => Op::In,
            Token::NotIn => Op::NotIn,
            Token::Gt => Op::GreaterThan,
            Token::Lt => Op::LessThan,
            other => {
                return Err(Self::err(&other, "'=', '!=', '==', 'in', notin'"));
            }
        };
        self.next();
        let values = match op {
            Op::In | Op::NotIn => {
                let open = self.next();
                if open != Token::Open {
                    return Err(Self::err(&open, "'('"));
                }
                let mut vals = Vec::new();
                loop {
                    match self.next() {
                        Token::Ident(s) => vals.push(s),
                        Token::Close if vals.is_empty() => break,
                        other => return Err(Self::err(&other, "identifier")),
                    }
                    match self.next() {
                        Token::Comma => continue,
                        Token::Close => break,
                        other => return Err(Self::err(&other, "',' or ')'")),
                    }
                }
                vals
            }
            Op::GreaterThan | Op::LessThan => {
                let v = self.identifier()?;
                if v.parse::<i64>().is_err() {
                    return Err(SelectorError(format!(
                        "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {v}"
                    )));
                }
                vec![v]
            }
            _ => vec![self.value()?],
        };
        Ok(Requirement { key, op, values })
    }
}

impl LabelSelector {
    /// Parses a label selector string.
    pub(crate) fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut p = Parser {
            toks: lex(input),
            pos: 0,
        };
        let mut reqs = Vec::new();
        if *p.peek() == Token::End {
            return Ok(Self { reqs });
        }
        loop {
            let r = p.requirement()?;
            if let Some(m) = validation::qualified_name(&r.key).into_iter().next() {
                return Err(SelectorError(format!(
                    "unable to parse requirement: key: Invalid value: {:?}: {m}",
                    r.key
                )));
            }
            if matches!(r.op, Op::Equals | Op::NotEquals | Op::In | Op::NotIn) {
                for v in &r.values {
                    if let Some(m) = validation::label_value(v).into_iter().next() {
                        return Err(SelectorError(format!(
                            "unable to parse requirement: values[0][{}]: Invalid value: {:?}: {m}",
                            r.key, v
                        )));
                    }
                }
            }
            reqs.push(r);
            match p.next() {
                Token::End => break,
                Token::Comma => continue,
                other => return Err(Parser::err(&other, "',' or 'end of string'")),
            }
        }
        Ok(Self { reqs })
    }

    /// Whether the selector is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether a label set matches. `labels` is a lookup function so callers can keep their own shape.
    pub(crate) fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| {
            let v = get(&r.key);
            match r.op {
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Equals | Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotEquals | Op::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                Op::GreaterThan | Op::LessThan => {
                    let (Some(have), Some(want)) = (
                        v.and_then(|v| v.parse::<i64>().ok()),
                        r.values.first().and_then(|w| w.parse::<i64>().ok()),
                    ) else {
                        return false;
                    };
                    if r.op == Op::GreaterThan {
                        have > want
                    } else {
                        have < want
                    }
                }
            }
        })
    }
}

/// One field selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    negate: bool,
    value: String,
}

/// A parsed field selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    terms: Vec<FieldTerm>,
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if escaped {
        cur.push('\\');
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> Result<String, SelectorError> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('\\' | ',' | '=' | '!')) => out.push(n),
                Some(n) => {
                    return Err(SelectorError(format!(
                        "invalid field selector: invalid escape sequence: \\{n}"
                    )));
                }
                None => {
                    return Err(SelectorError(
                        "invalid field selector: unterminated escape sequence".into(),
                    ));
                }
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Finds the first unescaped occurrence of `pat` in `s`.
fn find_unescaped(s: &str, pat: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if s[i..].starts_with(pat) {
            return Some(i);
        }
        i += 1;
    }
    None
}

impl FieldSelector {
    /// Parses a field selector and checks every field against `supported`.
    pub(crate) fn parse(input: &str, supported: &[&str]) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Ok(Self { terms });
        }
        for part in split_unescaped(trimmed, ',') {
            if part.is_empty() {
                continue;
            }
            let (field, negate, value) = if let Some(i) = find_unescaped(&part, "!=") {
                (&part[..i], true, &part[i + 2..])
            } else if let Some(i) = find_unescaped(&part, "==") {
                (&part[..i], false, &part[i + 2..])
            } else if let Some(i) = find_unescaped(&part, "=") {
                (&part[..i], false, &part[i + 1..])
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{input}'; can't understand '{part}'"
                )));
            };
            let field = field.trim().to_string();
            if !supported.contains(&field.as_str()) {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            terms.push(FieldTerm {
                field,
                negate,
                value: unescape(value.trim())?,
            });
        }
        Ok(Self { terms })
    }

    /// Whether the selector is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether a field set matches; missing fields read as the empty string.
    pub(crate) fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.terms.iter().all(|t| {
            let v = get(&t.field).unwrap_or("");
            (v == t.value) != t.negate
        })
    }

    /// The value required for `field` by an equality term, if any (used to narrow lookups).
    pub(crate) fn required_value(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && !t.negate)
            .map(|t| t.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn m(sel: &str, l: &BTreeMap<String, String>) -> bool {
        LabelSelector::parse(sel)
            .unwrap()
            .matches(|k| l.get(k).map(String::as_str))
    }

    #[test]
    fn label_operators() {
        let a = labels(&[("env", "test"), ("tier", "web"), ("n", "5")]);
        assert!(m("env=test", &a));
        assert!(m("env==test", &a));
        assert!(!m("env!=test", &a));
        assert!(m("missing!=x", &a));
        assert!(m("env in (test,prod)", &a));
        assert!(m("env in (test, prod),!nonexistent", &a));
        assert!(!m("env notin (test)", &a));
        assert!(m("missing notin (test)", &a));
        assert!(m("tier", &a));
        assert!(!m("!tier", &a));
        assert!(m("n>3", &a));
        assert!(!m("n<3", &a));
        assert!(m("", &a));
        assert!(m("env=test,tier=web", &a));
    }

    #[test]
    fn label_parse_errors() {
        assert_eq!(
            LabelSelector::parse("env===x").unwrap_err().0,
            "unable to parse requirement: found '=', expected: identifier"
        );
        assert!(LabelSelector::parse("env in test").is_err());
        assert!(LabelSelector::parse("env=has space").is_err());
        assert!(LabelSelector::parse("env=a b").is_err());
    }

    #[test]
    fn field_selectors() {
        let supported = ["metadata.name", "metadata.namespace", "spec.unschedulable"];
        let s = FieldSelector::parse("metadata.name=node-b", &supported).unwrap();
        let f = |k: &str| match k {
            "metadata.name" => Some("node-b"),
            _ => None,
        };
        assert!(s.matches(f));
        assert_eq!(s.required_value("metadata.name"), Some("node-b"));
        assert!(
            !FieldSelector::parse("metadata.name!=node-b", &supported)
                .unwrap()
                .matches(f)
        );
        assert!(
            FieldSelector::parse("spec.unschedulable==", &supported)
                .unwrap()
                .matches(f)
        );
        assert_eq!(
            FieldSelector::parse("status.phase=Running", &supported)
                .unwrap_err()
                .0,
            "field label not supported: status.phase"
        );
        assert!(FieldSelector::parse("metadata.name", &supported).is_err());
    }
}
