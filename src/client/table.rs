//! Plain text tables for people: left-aligned columns two spaces apart, a
//! header in capitals, `-` for a value that is absent.

use serde_json::Value;

/// A table being built.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Self { headers: headers.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, one line per row, each line ending in a newline.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let last = cells.len() - 1;
            let mut out = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                out.push_str(cell);
                if i < last {
                    out.push_str(&" ".repeat(w - cell.chars().count() + 2));
                }
            }
            out.push('\n');
            out
        };
        let mut out = line(self.headers.clone());
        for row in &self.rows {
            out.push_str(&line(row.iter().map(String::as_str).collect()));
        }
        out
    }
}

/// A JSON value as a cell: strings bare, `null` and absence as `-`, lists
/// joined with commas.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn columns_line_up_under_their_headers() {
        let mut t = Table::new(&["PARTITION", "STATE", "VERSION"]);
        t.row(vec!["dt=2026-08-24".into(), "ready".into(), "2".into()]);
        t.row(vec!["dt=1".into(), "stale_upstream".into(), cell(&json!(null))]);
        assert_eq!(
            t.render(),
            "PARTITION      STATE           VERSION\n\
             dt=2026-08-24  ready           2\n\
             dt=1           stale_upstream  -\n"
        );
    }

    #[test]
    fn cells_read_as_people_would_write_them() {
        assert_eq!(cell(&json!("x")), "x");
        assert_eq!(cell(&json!(["a", "b"])), "a,b");
        assert_eq!(cell(&json!(3)), "3");
        assert_eq!(cell(&json!(true)), "true");
        assert_eq!(cell(&json!([])), "-");
    }
}
