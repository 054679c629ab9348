//! Finds the line of a key path (`room[1].allow_percentage`) in a TOML text, so validation errors
//! found after parsing can point at a line as precisely as syntax errors do.

use toml_edit::{ImDocument, Item};

use super::error::line_of;

/// The 1-based line where `path` is written, or where its nearest written parent is.
pub fn line_of_key(text: &str, path: &str) -> Option<usize> {
    Locator::new(text).line(path)
}

/// A text parsed once, to locate many keys in it (a file with many problems is not parsed once
/// per problem).
pub struct Locator<'a> {
    text: &'a str,
    doc: Option<ImDocument<&'a str>>,
}

impl<'a> Locator<'a> {
    pub fn new(text: &'a str) -> Locator<'a> {
        Locator {
            text,
            doc: ImDocument::parse(text).ok(),
        }
    }

    /// The 1-based line where `path` is written, or where its nearest written parent is.
    pub fn line(&self, path: &str) -> Option<usize> {
        let doc = self.doc.as_ref()?;
        locate(doc.as_item(), path).map(|offset| line_of(self.text, offset))
    }
}

fn locate(root: &Item, path: &str) -> Option<usize> {
    let mut item: &Item = root;
    let mut best: Option<usize> = None;
    for segment in segments(path) {
        let next = match segment {
            Segment::Key(k) => {
                if let Some(table) = item.as_table_like() {
                    if let Some(key_span) = key_span(item, k) {
                        best = Some(key_span);
                    }
                    table.get(k)
                } else {
                    None
                }
            }
            Segment::Index(i) => item.get(i),
        };
        match next {
            Some(found) => {
                item = found;
                if let Some(span) = found.span() {
                    best = Some(span.start);
                }
            }
            None => break,
        }
    }
    best
}

fn key_span(item: &Item, key: &str) -> Option<usize> {
    let span = match item {
        Item::Table(t) => t.key(key)?.span(),
        Item::Value(toml_edit::Value::InlineTable(t)) => t.key(key)?.span(),
        _ => None,
    };
    span.map(|s| s.start)
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        if let Some(open) = rest.find('[') {
            out.push(Segment::Key(&rest[..open]));
            rest = &rest[open..];
            while let Some(stripped) = rest.strip_prefix('[') {
                let close = stripped.find(']').unwrap_or(stripped.len());
                if let Ok(i) = stripped[..close].parse() {
                    out.push(Segment::Index(i));
                }
                rest = stripped.get(close + 1..).unwrap_or("");
            }
        } else {
            out.push(Segment::Key(rest));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"[server]
listen = ["0.0.0.0:8080",
  "bad"]

[[room]]
name = "a"

[[room]]
name = "b"
allow_percentage = 150
"#;

    #[test]
    fn finds_nested_keys() {
        assert_eq!(line_of_key(DOC, "server.listen"), Some(2));
        assert_eq!(line_of_key(DOC, "server.listen[1]"), Some(3));
        assert_eq!(line_of_key(DOC, "room[1].allow_percentage"), Some(10));
        assert_eq!(line_of_key(DOC, "room[1].name"), Some(9));
        // A key that is not written points at its table.
        assert_eq!(line_of_key(DOC, "room[0].paths"), Some(5));
        assert_eq!(line_of_key("x = [", "x"), None);
    }
}
