//! `aws_cloud_config`: arbitrary bytes as the AWS provider's INI (gcfg) cloud-config.
//!
//! Contract: no panic; the INI reader's result, written back as INI (every value quoted and escaped), reads
//! back to the same sections and entries; the whole cloud-config parse is deterministic, and a file it
//! accepts is still accepted when written back that way.

use provider_aws::CloudConfig;
use provider_aws::ini::{self, Section};

/// Runs the AWS cloud-config readers over one input.
pub fn check(data: &[u8]) {
    let parsed = CloudConfig::parse(data);
    assert_eq!(
        format!("{parsed:?}"),
        format!("{:?}", CloudConfig::parse(data)),
        "cloud-config parse is not deterministic"
    );
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(parsed.is_err(), "non-UTF-8 cloud-config accepted");
        return;
    };
    let Ok(sections) = ini::parse(text) else {
        assert!(
            parsed.is_err(),
            "a cloud-config with INI syntax errors accepted"
        );
        return;
    };
    let written = render(&sections);
    let again = ini::parse(&written)
        .unwrap_or_else(|e| panic!("written-back INI refused ({e}):\n{written}"));
    assert_eq!(
        shape(&again),
        shape(&sections),
        "INI does not round-trip:\n{written}"
    );
    if parsed.is_ok() {
        let reparsed = CloudConfig::parse(written.as_bytes());
        assert!(
            reparsed.is_ok(),
            "written-back cloud-config refused: {reparsed:?}\n{written}"
        );
    }
}

/// The sections without line numbers: name, subsection, and (key, value) entries.
type Shape = Vec<(String, Option<String>, Vec<(String, Option<String>)>)>;

fn shape(sections: &[Section]) -> Shape {
    sections
        .iter()
        .map(|s| {
            let entries = s
                .entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect();
            (s.name.clone(), s.subsection.clone(), entries)
        })
        .collect()
}

/// Writes sections back as INI: subsection names and values quoted, with gcfg's escapes.
pub fn render(sections: &[Section]) -> String {
    let mut out = String::new();
    for section in sections {
        match &section.subsection {
            Some(sub) => {
                let escaped = sub.replace('\\', "\\\\").replace('"', "\\\"");
                out.push_str(&format!("[{} \"{escaped}\"]\n", section.name));
            }
            None => out.push_str(&format!("[{}]\n", section.name)),
        }
        for entry in &section.entries {
            match &entry.value {
                Some(value) => out.push_str(&format!("{} = \"{}\"\n", entry.key, escape(value))),
                None => out.push_str(&format!("{}\n", entry.key)),
            }
        }
    }
    out
}

fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}
