//! Loading, compiling and rendering a page set ([`Pages`]): the template environment, the
//! checks a set must pass at load, and the references to the origin `--check` warns about.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};

use super::cache::{render_hash, RenderKey, RENDERED_CACHE};
use super::{PageContext, PageKind, BASE_FILE, BUILTIN_BASE};
use crate::config::{ConfigError, ConfigErrors};
use crate::i18n::Catalogs;
use crate::thread_cache::PerThreadLru;

/// A compiled page set.
pub struct Pages {
    catalogs: Arc<Catalogs>,
    /// Per thread: a hit touches nothing another thread writes (see [`crate::thread_cache`]).
    rendered: PerThreadLru<u64, (RenderKey, Bytes)>,
    hasher: ahash::RandomState,
    env: Environment<'static>,
    /// Where the set came from; `None` for the built-in set.
    dir: Option<PathBuf>,
    /// Page file name, line and URL of every reference a browser would fetch from the origin.
    origin_refs: Vec<(PathBuf, usize, String)>,
    /// SHA-256 over every source, to tell a reload whether the pages changed.
    fingerprint: [u8; 32],
    /// Pages the folder lacks, served built in.
    missing: Vec<&'static str>,
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pages").field("dir", &self.dir).finish()
    }
}

fn environment(catalogs: Arc<Catalogs>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // `t("id", name=value, …)`: message `id` in the visitor's language; its value is escaped
    // like any other.
    env.add_function(
        "t",
        move |state: &minijinja::State, id: &str, kwargs: minijinja::value::Kwargs| {
            let index = |name: &str| state.lookup(name).and_then(|v| v.as_usize()).unwrap_or(0);
            let mut args = fluent_bundle::FluentArgs::new();
            for name in kwargs.args() {
                let value: minijinja::Value = kwargs.get(name)?;
                args.set(name.to_owned(), crate::i18n::fluent_value(&value));
            }
            Ok::<_, minijinja::Error>(catalogs.message(
                index("lang_index"),
                index("fallback_index"),
                id,
                &args,
            ))
        },
    );
    env
}

/// The message ids a template asks for (`t("id"`).
fn message_ids(text: &str) -> Vec<(usize, String)> {
    static PATTERN: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let Some(re) = PATTERN
        .get_or_init(|| regex::Regex::new(r#"\bt\(\s*"([^"]*)""#).ok())
        .as_ref()
    else {
        return Vec::new();
    };
    text.lines()
        .enumerate()
        .flat_map(|(i, line)| {
            re.captures_iter(line)
                .map(move |c| (i + 1, c[1].to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

impl Pages {
    /// The pages compiled into the binary.
    pub fn builtin() -> Arc<Pages> {
        static BUILTIN: OnceLock<Arc<Pages>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                let sources = PageKind::ALL.map(|k| (k, super::builtin_source(k).to_owned()));
                // The shipped pages are tested (see tests below), so this cannot fail at runtime.
                let pages = Pages::compile(
                    None,
                    "<built-in pages>",
                    BUILTIN_BASE.to_owned(),
                    sources,
                    Catalogs::builtin(),
                )
                .unwrap_or_else(|e| panic!("built-in pages are invalid: {e}"));
                Arc::new(pages)
            })
            .clone()
    }

    /// Reads and compiles the set in `dir`. `key` (e.g. `room[0].pages`) labels errors. A page
    /// the folder lacks is the built-in one ([`Pages::missing`] names them).
    pub fn load(dir: &Path, key: &str) -> Result<Pages, ConfigErrors> {
        let mut errors = Vec::new();
        let mut sources = Vec::new();
        let mut missing = Vec::new();
        for kind in PageKind::ALL {
            let file = dir.join(kind.file_name());
            match std::fs::read_to_string(&file) {
                Ok(text) => sources.push((kind, text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    missing.push(kind.file_name());
                    sources.push((kind, super::builtin_source(kind).to_owned()))
                }
                Err(e) => errors.push(ConfigError::new(
                    &file,
                    Some(key.to_owned()),
                    format!("cannot read page: {e}"),
                )),
            }
        }
        // Pages may extend "base.html": the folder's own, or the built-in one.
        let base = dir.join(BASE_FILE);
        let base = match std::fs::read_to_string(&base) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BUILTIN_BASE.to_owned(),
            Err(e) => {
                errors.push(ConfigError::new(
                    &base,
                    Some(key.to_owned()),
                    format!("cannot read page: {e}"),
                ));
                String::new()
            }
        };
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        let sources: [(PageKind, String); PageKind::ALL.len()] = sources
            .try_into()
            .unwrap_or_else(|_| unreachable!("one source per page kind"));
        let catalogs = Arc::new(Catalogs::load(dir)?);
        let mut pages = Pages::compile(Some(dir.to_path_buf()), key, base, sources, catalogs)?;
        pages.missing = missing;
        Ok(pages)
    }

    /// Compiles `base` (as [`BASE_FILE`]) and the pages, and renders each page once with sample
    /// figures, so that a set that loads also renders.
    fn compile(
        dir: Option<PathBuf>,
        key: &str,
        base: String,
        sources: [(PageKind, String); PageKind::ALL.len()],
        catalogs: Arc<Catalogs>,
    ) -> Result<Pages, ConfigErrors> {
        let mut env = environment(catalogs.clone());
        let mut errors = Vec::new();
        let mut origin_refs = Vec::new();
        let mut digest = <sha2::Sha256 as sha2::Digest>::new();
        for text in std::iter::once(&base).chain(sources.iter().map(|(_, text)| text)) {
            sha2::Digest::update(&mut digest, text.as_bytes());
            sha2::Digest::update(&mut digest, [0u8]);
        }
        let fingerprint = sha2::Digest::finalize(digest).into();
        let path_of = |name: &str| match &dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        };
        let files = std::iter::once((BASE_FILE, base)).chain(
            sources
                .into_iter()
                .map(|(kind, text)| (kind.file_name(), text)),
        );
        for (name, text) in files {
            for (line, url) in origin_references(&text) {
                origin_refs.push((path_of(name), line, url));
            }
            for (line, id) in message_ids(&text) {
                if !catalogs.has(&id) {
                    errors.push(
                        ConfigError::new(
                            &path_of(name),
                            Some(key.to_owned()),
                            format!("no message \"{id}\" in the catalogs (pages/i18n/en.toml lists them)"),
                        )
                        .at_line(Some(line)),
                    );
                }
            }
            if let Err(e) = env.add_template_owned(name, text) {
                errors.push(template_error(&path_of(name), key, &e));
            }
        }
        if errors.is_empty() {
            let sample = PageContext::sample();
            for kind in PageKind::ALL {
                let rendered = env
                    .get_template(kind.file_name())
                    .and_then(|t| t.render(&sample));
                if let Err(e) = rendered {
                    // The error may lie in the base the page extends: name the file it is in.
                    let file = e.name().unwrap_or(kind.file_name());
                    errors.push(template_error(&path_of(file), key, &e));
                }
            }
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok(Pages {
            catalogs,
            rendered: PerThreadLru::new(RENDERED_CACHE),
            hasher: ahash::RandomState::new(),
            env,
            dir,
            origin_refs,
            fingerprint,
            missing: Vec::new(),
        })
    }

    /// Renders a page (or finds it rendered). Rendering was proven at load, so a failure here
    /// can only come from a value; it degrades to a plain message rather than an empty body.
    pub fn render(&self, kind: PageKind, ctx: &PageContext) -> Bytes {
        let hash = render_hash(&self.hasher, kind, ctx);
        let hit = self.rendered.with(|cache| {
            cache
                .get(&hash)
                .filter(|(key, _)| key.matches(kind, ctx))
                .map(|(_, body)| body.clone())
        });
        if let Some(Some(body)) = hit {
            return body;
        }
        let body = self.render_uncached(kind, ctx);
        self.rendered
            .with(|cache| cache.put(hash, (RenderKey::of(kind, ctx), body.clone())));
        body
    }

    fn render_uncached(&self, kind: PageKind, ctx: &PageContext) -> Bytes {
        match self
            .env
            .get_template(kind.file_name())
            .and_then(|t| t.render(ctx))
        {
            Ok(html) => Bytes::from(html),
            Err(e) => {
                log::error!("rendering {}: {e}", kind.file_name());
                Bytes::from_static(
                    b"<!doctype html><title>Please wait</title><p>Please try again shortly.</p>",
                )
            }
        }
    }

    /// References a browser would fetch from the origin (relative URLs in `src`, `href` of
    /// `<link>`, CSS `url()`, `@import`): `--check` warns about them, since a waiting page that
    /// pulls assets from the origin defeats the waiting room.
    pub(crate) fn origin_references(&self) -> &[(PathBuf, usize, String)] {
        &self.origin_refs
    }

    /// The pages the folder lacks, served built in: `--check` warns about them.
    pub fn missing(&self) -> &[&'static str] {
        &self.missing
    }

    /// Equal for page sets with identical sources.
    pub(crate) fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }

    /// The languages this set speaks.
    pub fn catalogs(&self) -> &Catalogs {
        &self.catalogs
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

fn template_error(file: &Path, key: &str, e: &minijinja::Error) -> ConfigError {
    let mut message = format!("template error: {}", e.kind());
    if let Some(detail) = e.detail() {
        message.push_str(": ");
        message.push_str(detail);
    }
    ConfigError::new(file, Some(key.to_owned()), message).at_line(e.line())
}

pub(super) fn origin_references(html: &str) -> Vec<(usize, String)> {
    static PATTERNS: OnceLock<[regex::Regex; 3]> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            regex::Regex::new(
                r#"(?is)<(?:img|script|link|iframe|source|video|audio|embed|object|input|track)\b[^>]*?\b(?:src|href|data|poster)\s*=\s*["']?([^"'\s>]+)"#,
            ),
            regex::Regex::new(r#"(?i)url\(\s*["']?([^"')\s]+)"#),
            regex::Regex::new(r#"(?i)@import\s+["']([^"']+)"#),
        ]
        .map(|r| r.unwrap_or_else(|e| unreachable!("static regex: {e}")))
    });
    let mut found = Vec::new();
    for re in patterns {
        for cap in re.captures_iter(html) {
            let Some(m) = cap.get(1) else { continue };
            let url = m.as_str();
            let lower = url.to_ascii_lowercase();
            let elsewhere = [
                "data:",
                "#",
                "about:",
                "javascript:",
                "http://",
                "https://",
                "//",
                "blob:",
            ]
            .iter()
            .any(|p| lower.starts_with(p));
            if !elsewhere && !url.contains("{{") {
                let line = crate::config::error::line_of(html, m.start());
                found.push((line, url.to_owned()));
            }
        }
    }
    found.sort();
    found
}
