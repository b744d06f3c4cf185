//! kubectl's human-readable tables, parsed: for tests that run the real `kubectl` against a server and
//! check what it prints (this crate's kubectl test and the end-to-end suite).

/// A kubectl table: its header cells and rows, cut at the header's column starts (kubectl left-aligns every
/// column and separates them by at least three spaces; an empty cell is blank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The column names.
    pub header: Vec<String>,
    /// The rows' cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Parses kubectl's human-readable table output.
    pub fn parse(text: &str) -> Table {
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        let starts = column_starts(first);
        Table {
            header: cut(first, &starts),
            rows: lines.map(|l| cut(l, &starts)).collect(),
        }
    }

    /// The row with a cell equal to `name` (or `<kind>/name`).
    pub fn row(&self, name: &str) -> Option<&[String]> {
        let qualified = format!("/{name}");
        self.rows
            .iter()
            .find(|r| r.iter().any(|c| c == name || c.ends_with(&qualified)))
            .map(Vec::as_slice)
    }

    /// The cell of `column` in `row`.
    pub fn cell<'a>(&self, row: &'a [String], column: &str) -> Option<&'a str> {
        let i = self.header.iter().position(|h| h == column)?;
        row.get(i).map(String::as_str)
    }
}

fn column_starts(header: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut spaces = 3;
    for (i, c) in header.char_indices() {
        if c == ' ' {
            spaces += 1;
            continue;
        }
        if spaces >= 3 {
            starts.push(i);
        }
        spaces = 0;
    }
    starts
}

fn cut(line: &str, starts: &[usize]) -> Vec<String> {
    starts
        .iter()
        .enumerate()
        .map(|(i, start)| {
            let end = starts
                .get(i + 1)
                .copied()
                .unwrap_or(line.len())
                .min(line.len());
            line.get((*start).min(end)..end)
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_with_blank_cells_and_spaces_inside() {
        let text = "\
NAME     STATUS   ROLES    AGE   OS-IMAGE              EXTERNAL-IP
node-a   Ready    <none>   5s    Debian GNU/Linux 12   203.0.113.7
node-b   Ready             6s    Debian GNU/Linux 12   <none>
";
        let t = Table::parse(text);
        assert_eq!(
            t.header,
            ["NAME", "STATUS", "ROLES", "AGE", "OS-IMAGE", "EXTERNAL-IP"]
        );
        let a = t.row("node-a").unwrap();
        assert_eq!(t.cell(a, "OS-IMAGE"), Some("Debian GNU/Linux 12"));
        assert_eq!(t.cell(a, "EXTERNAL-IP"), Some("203.0.113.7"));
        let b = t.row("node-b").unwrap();
        assert_eq!(t.cell(b, "ROLES"), Some(""));
        assert!(t.row("node-c").is_none());
    }
}
