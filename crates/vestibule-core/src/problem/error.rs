//! Configuration errors that tell a person where to look: file, key, and line when known.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in one file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    /// Dotted key path such as `room[0].allow_percentage`; `None` for whole-file problems.
    pub key: Option<String>,
    /// 1-based line, when the parser or the locator knows it.
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    pub fn new(file: &Path, key: impl Into<Option<String>>, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            key: key.into(),
            line: None,
            message: message.into(),
        }
    }

    pub fn at_line(mut self, line: Option<usize>) -> Self {
        if self.line.is_none() {
            self.line = line;
        }
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in one load: `--check` prints them all, a reload logs them all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn one(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }

    /// The first problem, for one-line summaries (`/status`).
    pub fn first(&self) -> Option<&ConfigError> {
        self.0.first()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors::one(e)
    }
}

/// Converts a TOML parse error. `redact` hides quoted values from the message, for files that
/// hold secrets: the line number is enough to find the problem.
pub(crate) fn from_toml(
    file: &Path,
    text: &str,
    err: &toml::de::Error,
    redact: bool,
) -> ConfigError {
    let line = err.span().map(|span| line_of(text, span.start));
    let mut message = err.message().trim().replace('\n', "; ");
    if redact {
        message = redact_quoted(&message);
    }
    // serde's type errors ("invalid type: integer `60`, expected a duration") name no key, but
    // the span points at the value, and the value's place names it.
    let key = key_from_message(&message).or_else(|| {
        err.span()
            .and_then(|span| super::locate::key_at(text, span.start))
    });
    ConfigError {
        file: file.to_path_buf(),
        key,
        line,
        message,
    }
}

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// serde names the offending field in backquotes ("unknown field `lisen`"); surface it as the
/// key so every error reads the same way.
fn key_from_message(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("missing field `"))?;
    rest.split('`').next().map(str::to_owned)
}

fn redact_quoted(message: &str) -> String {
    if !(message.starts_with("invalid type") || message.starts_with("invalid value")) {
        return message.to_owned();
    }
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    for c in message.chars() {
        if c == '`' {
            if !inside {
                out.push_str("`<hidden>");
            } else {
                out.push('`');
            }
            inside = !inside;
        } else if !inside {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_forms() {
        let e = ConfigError::new(
            Path::new("conf/x.toml"),
            Some("server.listen".into()),
            "bad",
        )
        .at_line(Some(3));
        assert_eq!(e.to_string(), "conf/x.toml:3: server.listen: bad");
        let e = ConfigError::new(Path::new("conf/x.toml"), None, "cannot read");
        assert_eq!(e.to_string(), "conf/x.toml: cannot read");
    }

    #[test]
    fn lines() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact_quoted("invalid type: string `s3cret`, expected u8"),
            "invalid type: string `<hidden>`, expected u8"
        );
        assert_eq!(redact_quoted("unknown field `x`"), "unknown field `x`");
    }
}
