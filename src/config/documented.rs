//! The documentation holds every key, and only keys that exist.
//!
//! The schema's keys come from [`super::suggest::schema`] (the field lists serde derives for the
//! file's structs, the same lists "did you mean" uses), so a key added to a struct and not to the
//! docs fails here. Two documents are compared with it:
//! - the book's configuration reference (`docs/src/reference/configuration.md`): each table is a
//!   heading naming it (`` ## `[server]` ``, `` ### `[[room.event]]` ``), and each key the first
//!   cell of a row under it (`` | `listen` | … ``). The two must hold the same keys, table by table;
//! - the sample config (`conf/vestibule.toml`): every key is written in its table, set or
//!   commented out (`# key = …`), keys of a nested table (`tls.certificates`) in it or its parent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::schema;

/// The repository's root: the nearest folder above this crate's that holds the book.
fn root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    loop {
        if dir.join("docs/src/SUMMARY.md").is_file() {
            return dir;
        }
        assert!(dir.pop(), "no docs/src/SUMMARY.md above the crate");
    }
}

fn read(path: &str) -> String {
    let path = root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `` `[server]` `` or `` `[[room.event]]` `` in a heading → `server`, `room.event`.
fn table_in_heading(line: &str) -> Option<String> {
    let start = line.find("`[")? + 2;
    let rest = &line[start..];
    let end = rest.find("]`")?;
    Some(rest[..end].trim_matches(['[', ']']).to_owned())
}

/// Table → the keys the reference documents for it.
fn documented(reference: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut table: Option<String> = None;
    let mut fenced = false;
    for line in reference.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        if line.starts_with('#') {
            if let Some(t) = table_in_heading(line) {
                out.entry(t.clone()).or_default();
                table = Some(t);
            } else if line.starts_with("## ") {
                // A second-level heading without a table ends the one before.
                table = None;
            }
            continue;
        }
        let (Some(t), Some(row)) = (&table, line.strip_prefix('|')) else {
            continue;
        };
        let first = row.split('|').next().unwrap_or("");
        // Every `name` in the first cell: rows may name several keys.
        for (i, part) in first.split('`').enumerate() {
            if i % 2 == 1
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
            {
                out.get_mut(t).unwrap().insert(part.to_owned());
            }
        }
    }
    out
}

/// Table → the keys the sample config writes in it, set or commented out.
fn in_sample(sample: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut table = String::new();
    for line in sample.lines() {
        let line = line.trim_start_matches(['#', ' ']);
        if line.starts_with('[') && !line.starts_with("[\"") {
            let end = line.find(']').unwrap_or(line.len());
            table = line[..end].trim_matches('[').to_owned();
            out.entry(table.clone()).or_default();
            continue;
        }
        // `key = …`, and the keys of inline tables on the line (`{ cert = …, key = … }`).
        let code = line.split(" #").next().unwrap_or("");
        for piece in code.split(['{', ',']) {
            if let Some((key, _)) = piece.split_once('=') {
                let key = key.trim();
                let name = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
                if !key.is_empty() && key.chars().all(name) {
                    out.entry(table.clone()).or_default().insert(key.to_owned());
                }
            }
        }
    }
    out
}

/// The keys of `table` that are tables of their own, as (their path, the key).
fn nested<'a>(
    table: &'a str,
    keys: &'a [&'static str],
) -> impl Iterator<Item = (String, String)> + 'a {
    let tables: BTreeSet<String> = schema().into_iter().map(|(t, _)| t).collect();
    keys.iter()
        .map(move |k| (format!("{table}.{k}"), (*k).to_owned()))
        .filter(move |(path, _)| tables.contains(path))
}

#[test]
fn every_top_level_key_is_a_table() {
    let tables: BTreeSet<String> = schema().into_iter().map(|(t, _)| t).collect();
    for (table, keys) in schema() {
        if table.is_empty() {
            for key in keys {
                assert!(
                    tables.contains(*key),
                    "`{key}` is a top-level key but no table the suggester knows: add it to \
                     known_keys in crates/vestibule-core/src/config/suggest.rs"
                );
            }
        }
    }
}

#[test]
fn the_configuration_reference_documents_exactly_the_accepted_keys() {
    let docs = documented(&read("docs/src/reference/configuration.md"));
    let mut problems = Vec::new();
    for (table, keys) in schema() {
        if table.is_empty() {
            for key in keys {
                if !docs.contains_key(*key) {
                    problems.push(format!("table [{key}] has no heading in the reference"));
                }
            }
            continue;
        }
        let mut written = docs.get(&table).cloned().unwrap_or_default();
        // A key that is a table of its own is documented by its heading.
        written.extend(
            nested(&table, keys)
                .filter(|t| docs.contains_key(&t.0))
                .map(|t| t.1),
        );
        for key in keys {
            if !written.contains(*key) {
                problems.push(format!("{table}.{key} is accepted but not documented"));
            }
        }
        for key in &written {
            if !keys.contains(&key.as_str()) {
                problems.push(format!("{table}.{key} is documented but not accepted"));
            }
        }
    }
    let tables: BTreeSet<String> = schema().into_iter().map(|(t, _)| t).collect();
    for table in docs.keys() {
        if !tables.contains(table) {
            problems.push(format!(
                "[{table}] is documented but is no table of the config"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_sample_config_writes_every_accepted_key() {
    let sample = in_sample(&read("conf/vestibule.toml"));
    let mut problems = Vec::new();
    for (table, keys) in schema() {
        if table.is_empty() {
            continue;
        }
        let parent = table.rsplit_once('.').map(|(p, _)| p.to_owned());
        let mut written = sample.get(&table).cloned().unwrap_or_default();
        if let Some(parent) = parent.and_then(|p| sample.get(&p)) {
            written.extend(parent.iter().cloned());
        }
        written.extend(
            nested(&table, keys)
                .filter(|t| sample.contains_key(&t.0))
                .map(|t| t.1),
        );
        for key in keys {
            if !written.contains(*key) {
                problems.push(format!("{table}.{key} is not in conf/vestibule.toml"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readers_see_what_is_written() {
    let docs = documented(
        "## `[server]`\n| key | default |\n| --- | --- |\n| `listen` | x |\n\
         ### `[[room.event]]`\n| `name`, `start` | required |\n```\n| `nope` |\n```\n\
         ## Other\n| `free` | text |\n",
    );
    assert_eq!(docs["server"], BTreeSet::from(["listen".to_owned()]));
    assert_eq!(
        docs["room.event"],
        BTreeSet::from(["name".to_owned(), "start".to_owned()])
    );
    assert_eq!(docs.len(), 2);
    let sample = in_sample(
        "[server]\nlisten = [\"a\"] # note = 1\n# [tls]\n# certificates = [{ cert = \"c\", key = \"k\" }]\n",
    );
    assert_eq!(sample["server"], BTreeSet::from(["listen".to_owned()]));
    assert_eq!(
        sample["tls"],
        BTreeSet::from(["certificates".into(), "cert".into(), "key".into()])
    );
}

/// The ```toml blocks of a page that are whole files (they have an `[upstream]` table).
fn whole_files(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in page.lines() {
        match &mut block {
            None if line.trim_start().starts_with("```toml") => block = Some(String::new()),
            Some(text) if line.trim_start().starts_with("```") => {
                if text.contains("[upstream]") {
                    out.push(std::mem::take(text));
                }
                block = None;
            }
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn the_whole_configs_of_the_readme_and_the_book_are_valid() {
    let mut checked = 0;
    for page in [
        "README.md",
        "docs/src/getting-started.md",
        "docs/src/reference/configuration.md",
    ] {
        for text in whole_files(&read(page)) {
            let path = Path::new("/etc/vestibule/vestibule.toml");
            if let Err(e) = super::parse_offline(&text, path) {
                panic!("{page}: a config that does not load:\n{text}\n{e}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 3, "only {checked} whole configs found");
}
