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
pub(crate) struct Locator<'a> {
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

/// The dotted key path (`room[0].session_duration`) whose value is written at byte `offset`: the
/// innermost one, so a parser error that only knows where it stopped can name the key.
pub(crate) fn key_at(text: &str, offset: usize) -> Option<String> {
    let doc = ImDocument::parse(text).ok()?;
    let mut path = String::new();
    find_key(doc.as_item(), offset, &mut path).then_some(path)
}

fn contains(span: Option<std::ops::Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|s| s.start <= offset && offset < s.end.max(s.start + 1))
}

/// Appends to `path` the keys down to the innermost value holding `offset`; false if none does.
fn find_key(item: &Item, offset: usize, path: &mut String) -> bool {
    let base = path.len();
    let enter = |path: &mut String, segment: &str, index: bool| {
        if !index && !path.is_empty() {
            path.push('.');
        }
        path.push_str(segment);
    };
    if let Some(table) = item.as_table_like() {
        for (key, child) in table.iter() {
            enter(path, key, false);
            let direct = match child {
                Item::Value(v) => contains(v.span(), offset),
                _ => false,
            };
            if find_key(child, offset, path) || direct {
                return true;
            }
            path.truncate(base);
        }
        return false;
    }
    match item {
        Item::ArrayOfTables(tables) => {
            for (i, t) in tables.iter().enumerate() {
                enter(path, &format!("[{i}]"), true);
                if find_key(&Item::Table(t.clone()), offset, path) {
                    return true;
                }
                path.truncate(base);
            }
            false
        }
        Item::Value(toml_edit::Value::Array(values)) => {
            for (i, v) in values.iter().enumerate() {
                if contains(v.span(), offset) {
                    enter(path, &format!("[{i}]"), true);
                    find_key(&Item::Value(v.clone()), offset, path);
                    return true;
                }
            }
            false
        }
        _ => false,
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

    #[test]
    fn names_the_key_written_at_an_offset() {
        let at = |needle: &str| key_at(DOC, DOC.find(needle).unwrap());
        assert_eq!(at("150").as_deref(), Some("room[1].allow_percentage"));
        assert_eq!(at("\"bad\"").as_deref(), Some("server.listen[1]"));
        assert_eq!(at("\"b\"").as_deref(), Some("room[1].name"));
        assert_eq!(
            key_at("a = { b = { c = 1 } }", 16).as_deref(),
            Some("a.b.c")
        );
        assert_eq!(key_at(DOC, 0), None);
        assert_eq!(key_at("x = [", 4), None);
    }
}
