//! The YAML reader of providers' cloud-configs (the fake and DigitalOcean providers use it): one document,
//! strict YAML 1.2 scalars, errors that name the field and never quote the file (it may hold credentials).

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
    let mut path = None;
    serde_saphyr::with_deserializer_from_slice_with_options(bytes, options, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().clone());
            e.into_inner()
        })
    })
    .map_err(|e| {
        let message = e.render_with_formatter(&serde_saphyr::UserMessageFormatter);
        match path.map(|path| field_path(&path, &e)) {
            Some(path) if !path.is_empty() => format!("{path}: {message}"),
            _ => message,
        }
    })
}

/// `instances[0].addresses[1]`: where the parser stopped, without a trailing key it could not read (a
/// duplicate) or the unknown field the message names.
fn field_path(path: &serde_path_to_error::Path, error: &serde_saphyr::Error) -> String {
    use serde_path_to_error::Segment;
    let mut segments: Vec<&Segment> = path.iter().collect();
    while matches!(segments.last(), Some(Segment::Unknown)) {
        segments.pop();
    }
    if let serde_saphyr::Error::SerdeUnknownField { field, .. } = error.without_snippet()
        && matches!(segments.last(), Some(Segment::Map { key }) if key == field)
    {
        segments.pop();
    }
    let mut text = String::new();
    for segment in segments {
        match segment {
            Segment::Seq { index } => text.push_str(&format!("[{index}]")),
            Segment::Map { key: name } | Segment::Enum { variant: name } => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(name);
            }
            Segment::Unknown => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push('?');
            }
        }
    }
    text
}
