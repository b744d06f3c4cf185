//! The YAML reader of providers' cloud-configs (the fake and DigitalOcean providers use it): one document,
//! strict YAML 1.2 scalars, errors that name the field and never quote the file (it may hold credentials).
//!
//! The field path of an error is found from the error's position: the document is walked once more,
//! event by event, to the deepest node whose source range holds that position. The deserialization itself
//! stays the parser's own (no wrapper per deserialized type), so the code it takes does not grow with
//! every provider's configuration types.

use granit_parser::{Event, Parser, Span};

/// Deserializes a one-document YAML cloud-config. The error is one line: the path of the field (none at
/// the top level), then the parser's message and position, e.g. ``instances[0].state: unknown variant
/// `sleeping`, expected one of running, stopped, terminated at line 3, column 12``; the file itself is
/// never quoted (no source snippet). As in YAML 1.2, `yes`/`on`/... are not booleans, and `<<` is an
/// ordinary key (no merge), hence an unknown field.
pub fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let options = serde_saphyr::options! {
        with_snippet: false,
        strict_booleans: true,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
    };
    serde_saphyr::from_slice_with_options(bytes, options).map_err(|error| {
        let message = error.render_with_formatter(&serde_saphyr::UserMessageFormatter);
        let path = match (error.location(), std::str::from_utf8(bytes)) {
            (Some(at), Ok(text)) => path_at(text, Position::of(at.line(), at.column())),
            _ => String::new(),
        };
        if path.is_empty() {
            message
        } else {
            format!("{path}: {message}")
        }
    })
}

/// A place in the text: 1-based line, 0-based column (the parser's markers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    line: usize,
    column: usize,
}

impl Position {
    /// After any text.
    const END: Position = Position {
        line: usize::MAX,
        column: usize::MAX,
    };

    /// From an error's 1-based line and column.
    fn of(line: u64, column: u64) -> Self {
        Position {
            line: usize::try_from(line).unwrap_or(usize::MAX),
            column: usize::try_from(column.saturating_sub(1)).unwrap_or(usize::MAX),
        }
    }

    fn start_of(span: &Span) -> Self {
        Position {
            line: span.start.line(),
            column: span.start.col(),
        }
    }

    fn end_of(span: &Span) -> Self {
        Position {
            line: span.end.line(),
            column: span.end.col(),
        }
    }
}

/// An open collection of the walk.
enum Collection {
    /// A mapping at `path`, and the key whose value comes next (`None`: a key comes next).
    Mapping {
        path: String,
        start: Position,
        key: Option<String>,
    },
    /// A sequence at `path`, and the index of its next item.
    Sequence {
        path: String,
        start: Position,
        next: usize,
    },
}

impl Collection {
    fn path(&self) -> &str {
        match self {
            Collection::Mapping { path, .. } | Collection::Sequence { path, .. } => path,
        }
    }

    fn start(&self) -> Position {
        match self {
            Collection::Mapping { start, .. } | Collection::Sequence { start, .. } => *start,
        }
    }
}

/// `instances[0].addresses[1]`: the path of the deepest node of the first document whose range holds
/// `at`. A key names its mapping (an unknown or duplicate key is reported at the key, and the message
/// names it); a collection the parser could not read to its end holds everything after its start; a
/// position after the first document has no path.
fn path_at(text: &str, at: Position) -> String {
    let mut open: Vec<Collection> = Vec::new();
    // The deepest node found so far holding `at`: how many collections hold it, and its path.
    let mut deepest: Option<(usize, String)> = None;
    let mut hold = |depth: usize, path: &str, start: Position, end: Position| {
        if start <= at && at <= end && deepest.as_ref().is_none_or(|(d, _)| depth >= *d) {
            deepest = Some((depth, path.to_string()));
        }
    };
    let mut parser = Parser::new_from_str(text);
    while let Some(Ok((event, span))) = parser.next_event() {
        let start = Position::start_of(&span);
        match event {
            Event::Scalar(value, ..) => {
                let path = node_path(&mut open, Some(&value));
                hold(open.len(), &path, start, Position::end_of(&span));
            }
            Event::Alias(_) => {
                let path = node_path(&mut open, None);
                hold(open.len(), &path, start, Position::end_of(&span));
            }
            Event::MappingStart(..) => {
                let path = node_path(&mut open, None);
                open.push(Collection::Mapping {
                    path,
                    start,
                    key: None,
                });
            }
            Event::SequenceStart(..) => {
                let path = node_path(&mut open, None);
                open.push(Collection::Sequence {
                    path,
                    start,
                    next: 0,
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                if let Some(closed) = open.pop() {
                    hold(
                        open.len(),
                        closed.path(),
                        closed.start(),
                        Position::end_of(&span),
                    );
                }
            }
            Event::DocumentEnd => break,
            _ => {}
        }
    }
    // Collections left open where the parser could read no further hold everything after their start.
    for (depth, unclosed) in open.iter().enumerate() {
        hold(depth, unclosed.path(), unclosed.start(), Position::END);
    }
    deepest.map(|(_, path)| path).unwrap_or_default()
}

/// The path of the node the parser reports next inside `open`'s innermost collection, which moves on past
/// it: a key (its scalar `key`, `?` for another node) names its mapping; a value is its key's or index's.
fn node_path(open: &mut [Collection], key: Option<&str>) -> String {
    match open.last_mut() {
        None => String::new(),
        Some(Collection::Mapping {
            path,
            key: next @ None,
            ..
        }) => {
            *next = Some(key.unwrap_or("?").to_string());
            path.clone()
        }
        Some(Collection::Mapping {
            path, key: next, ..
        }) => {
            let key = next.take().unwrap_or_default();
            if path.is_empty() {
                key
            } else {
                format!("{path}.{key}")
            }
        }
        Some(Collection::Sequence { path, next, .. }) => {
            let item = format!("{path}[{next}]");
            *next += 1;
            item
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, line: u64, column: u64) -> String {
        path_at(text, Position::of(line, column))
    }

    #[test]
    fn a_value_is_named_by_its_keys_and_indexes() {
        let text = "a:\n  b:\n    - x\n    - {c: 1, d: [2, 3]}\n";
        assert_eq!(at(text, 3, 7), "a.b[0]");
        assert_eq!(at(text, 4, 12), "a.b[1].c");
        assert_eq!(at(text, 4, 22), "a.b[1].d[1]");
    }

    #[test]
    fn a_key_names_its_mapping() {
        let text = "a:\n  b: 1\n  c: 2\n";
        assert_eq!(at(text, 3, 3), "a");
        assert_eq!(at(text, 1, 1), "");
    }

    #[test]
    fn a_position_outside_the_first_document_has_no_path() {
        assert_eq!(at("a: 1\n---\nb: 2\n", 3, 1), "");
    }

    #[test]
    fn an_unfinished_collection_holds_the_rest() {
        assert_eq!(at("a: 1\nb: [x\n", 2, 4), "b");
    }
}
