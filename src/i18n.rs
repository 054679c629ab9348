//! Visitors' languages: message catalogs, `Accept-Language` negotiation, plurals.
//!
//! Pages are templates; their words come from one catalog per language, `i18n/<lang>.toml` in
//! a page folder. Each key is a message id and each value a [Fluent](https://projectfluent.org)
//! pattern, so plurals follow the language's CLDR rules (`{ $n -> [one] … *[other] … }`, chosen
//! by `intl_pluralrules` inside `fluent-bundle`) and translators never meet template syntax.
//! The 17 languages listed in the docs are built in; a folder's catalog for one of them overrides
//! single messages, and a catalog for another language adds it. A message missing from a
//! language falls back to the room's default language, then to English.
//!
//! Negotiation: `accept-language` parses the header and orders its tags by q-value (dropping
//! q=0 and nonsense), then `fluent-langneg` matches them against the catalogs (`de-AT` finds
//! `de`, `zh-HK` the traditional script, `pt` finds `pt-BR`). A hostile header costs bounded
//! time: only its first [`MAX_HEADER`] bytes and [`MAX_TAGS`] tags are read, and results are
//! cached per header value.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use fluent_bundle::concurrent::FluentBundle;
use fluent_bundle::{FluentArgs, FluentResource, FluentValue};
use unic_langid::{CharacterDirection, LanguageIdentifier};

use crate::config::{ConfigError, ConfigErrors};
use crate::thread_cache::PerThreadLru;

/// Bytes of `Accept-Language` read at most.
pub const MAX_HEADER: usize = 512;
/// Language tags read at most.
pub(crate) const MAX_TAGS: usize = 24;
/// Header values whose negotiation is remembered.
const NEGOTIATED_CACHE: usize = 512;

/// The catalogs shipped, in the documented order.
pub(crate) const BUILTIN: [(&str, &str); 17] = [
    ("en", include_str!("../pages/i18n/en.toml")),
    ("es", include_str!("../pages/i18n/es.toml")),
    ("de", include_str!("../pages/i18n/de.toml")),
    ("fr", include_str!("../pages/i18n/fr.toml")),
    ("it", include_str!("../pages/i18n/it.toml")),
    ("ja", include_str!("../pages/i18n/ja.toml")),
    ("ko", include_str!("../pages/i18n/ko.toml")),
    ("pt-BR", include_str!("../pages/i18n/pt-BR.toml")),
    ("zh-CN", include_str!("../pages/i18n/zh-CN.toml")),
    ("zh-TW", include_str!("../pages/i18n/zh-TW.toml")),
    ("nl", include_str!("../pages/i18n/nl.toml")),
    ("pl", include_str!("../pages/i18n/pl.toml")),
    ("id", include_str!("../pages/i18n/id.toml")),
    ("tr", include_str!("../pages/i18n/tr.toml")),
    ("ar", include_str!("../pages/i18n/ar.toml")),
    ("ru", include_str!("../pages/i18n/ru.toml")),
    ("fa", include_str!("../pages/i18n/fa.toml")),
];

/// One language: its tag, writing direction and messages.
pub struct Language {
    pub tag: String,
    pub id: LanguageIdentifier,
    pub rtl: bool,
    bundle: FluentBundle<FluentResource>,
}

impl std::fmt::Debug for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Language").field("tag", &self.tag).finish()
    }
}

/// Every language a page set speaks.
pub struct Catalogs {
    /// Index 0 is English, the last resort for a missing message.
    languages: Vec<Language>,
    ids: Vec<LanguageIdentifier>,
    /// `Accept-Language` values seen -> the language found (`usize::MAX`: none), per thread
    /// (see [`crate::thread_cache`]).
    negotiated: PerThreadLru<Box<str>, usize>,
}

impl std::fmt::Debug for Catalogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.languages.iter().map(|l| &l.tag))
            .finish()
    }
}

/// A catalog file's text as Fluent source: `key = pattern`, continuation lines indented.
fn toml_to_ftl(messages: &BTreeMap<String, String>) -> String {
    let mut ftl = String::new();
    for (id, pattern) in messages {
        ftl.push_str(id);
        ftl.push_str(" =");
        let mut lines = pattern.trim_end().lines();
        if let Some(first) = lines.next() {
            if !first.trim().is_empty() {
                ftl.push(' ');
                ftl.push_str(first);
            }
        }
        for line in lines {
            ftl.push_str("\n    ");
            ftl.push_str(line.trim_start());
        }
        ftl.push('\n');
    }
    ftl
}

/// Parses one catalog: a TOML table of message id → Fluent pattern.
fn parse_catalog(text: &str, file: &Path) -> Result<FluentResource, ConfigError> {
    let messages: BTreeMap<String, String> = toml::from_str(text).map_err(|e| {
        ConfigError::new(
            file,
            None,
            format!("not a message catalog: {}", e.message()),
        )
        .at_line(e.span().map(|s| text[..s.start].lines().count().max(1)))
    })?;
    for id in messages.keys() {
        let valid = id.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(ConfigError::new(
                file,
                Some(id.clone()),
                "a message id is letters, digits, - and _",
            ));
        }
    }
    FluentResource::try_new(toml_to_ftl(&messages)).map_err(|(_, errors)| {
        let first = errors
            .first()
            .map(|e| format!("{:?}", e.kind))
            .unwrap_or_default();
        ConfigError::new(
            file,
            None,
            format!("a message is not valid Fluent: {first}"),
        )
    })
}

/// Whole numbers grouped the language's way (`1.234` in German, `1 234` in Russian), from
/// `num-format`'s CLDR data; made once per language by the bundle's memoizer.
struct Grouping(Option<num_format::Locale>);

impl intl_memoizer::Memoizable for Grouping {
    type Args = ();
    type Error = ();
    fn construct(lang: LanguageIdentifier, _: ()) -> Result<Self, ()> {
        let locale = num_format::Locale::from_name(lang.to_string())
            .or_else(|_| num_format::Locale::from_name(lang.language.as_str()))
            .ok();
        Ok(Grouping(locale))
    }
}

fn format_number(
    value: &FluentValue,
    memoizer: &intl_memoizer::concurrent::IntlLangMemoizer,
) -> Option<String> {
    use num_format::ToFormattedString;
    let FluentValue::Number(n) = value else {
        return None;
    };
    if n.value.fract() != 0.0 || n.value.abs() >= 1e15 {
        return None;
    }
    let whole = n.value as i64;
    memoizer
        .with_try_get::<Grouping, _, _>((), |g| g.0.as_ref().map(|l| whole.to_formatted_string(l)))
        .ok()
        .flatten()
}

fn new_language(tag: &str, file: &Path) -> Result<Language, ConfigError> {
    let id: LanguageIdentifier = tag.parse().map_err(|_| {
        ConfigError::new(
            file,
            None,
            format!("\"{tag}\" is not a language tag (the file name is the language: de.toml, pt-BR.toml)"),
        )
    })?;
    let mut bundle = FluentBundle::new_concurrent(vec![id.clone()]);
    let rtl = id.character_direction() == CharacterDirection::RTL;
    // Bidi isolation marks only where the text runs right to left.
    bundle.set_use_isolating(rtl);
    bundle.set_formatter(Some(format_number));
    Ok(Language {
        tag: id.to_string(),
        id,
        rtl,
        bundle,
    })
}

impl Catalogs {
    /// The shipped languages alone.
    pub fn builtin() -> Arc<Catalogs> {
        static BUILT: OnceLock<Arc<Catalogs>> = OnceLock::new();
        BUILT
            .get_or_init(|| {
                // The shipped catalogs are tested (see tests below), so this cannot fail.
                Arc::new(
                    Catalogs::build(&[])
                        .unwrap_or_else(|e| panic!("built-in catalogs are invalid: {e}")),
                )
            })
            .clone()
    }

    /// The shipped languages, with the catalogs of `dir/i18n` (if any) on top.
    pub fn load(dir: &Path) -> Result<Catalogs, ConfigErrors> {
        let folder = dir.join("i18n");
        let mut extra = Vec::new();
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Catalogs::build(&[]).map_err(|e| ConfigErrors(vec![e]))
            }
            Err(e) => {
                return Err(ConfigErrors(vec![ConfigError::new(
                    &folder,
                    None,
                    format!("cannot read the catalogs: {e}"),
                )]))
            }
        };
        let mut errors = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let tag = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_owned();
            match std::fs::read_to_string(&path) {
                Ok(text) => extra.push((tag, path, text)),
                Err(e) => errors.push(ConfigError::new(&path, None, format!("cannot read: {e}"))),
            }
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        extra.sort();
        Catalogs::build(&extra).map_err(|e| ConfigErrors(vec![e]))
    }

    fn build(extra: &[(String, std::path::PathBuf, String)]) -> Result<Catalogs, ConfigError> {
        let mut languages: Vec<Language> = Vec::new();
        for (tag, text) in BUILTIN {
            let file = Path::new("pages/i18n").join(format!("{tag}.toml"));
            let mut lang = new_language(tag, &file)?;
            let resource = parse_catalog(text, &file)?;
            lang.bundle
                .add_resource(resource)
                .map_err(|e| ConfigError::new(&file, None, format!("{e:?}")))?;
            languages.push(lang);
        }
        for (tag, file, text) in extra {
            let resource = parse_catalog(text, file)?;
            let wanted = new_language(tag, file)?;
            match languages.iter_mut().find(|l| l.id == wanted.id) {
                // An operator's message replaces the shipped one.
                Some(lang) => lang.bundle.add_resource_overriding(resource),
                None => {
                    let mut lang = wanted;
                    lang.bundle.add_resource_overriding(resource);
                    languages.push(lang);
                }
            }
        }
        let ids = languages.iter().map(|l| l.id.clone()).collect();
        Ok(Catalogs {
            languages,
            ids,
            negotiated: PerThreadLru::new(NEGOTIATED_CACHE),
        })
    }

    pub fn languages(&self) -> impl Iterator<Item = &Language> {
        self.languages.iter()
    }

    /// The language `tag` names exactly (case-insensitive), if there is a catalog for it.
    pub fn find(&self, tag: &str) -> Option<usize> {
        let id: LanguageIdentifier = tag.parse().ok()?;
        self.languages.iter().position(|l| l.id == id)
    }

    pub fn get(&self, index: usize) -> &Language {
        self.languages.get(index).unwrap_or(&self.languages[0])
    }

    /// The visitor's language from their `Accept-Language`, else `default`.
    pub fn negotiate(&self, accept_language: Option<&[u8]>, default: usize) -> usize {
        let Some(raw) = accept_language else {
            return default;
        };
        let raw = &raw[..raw.len().min(MAX_HEADER)];
        let Ok(text) = std::str::from_utf8(raw) else {
            return default;
        };
        // Looked up by the borrowed text: a hit allocates nothing.
        if let Some(Some(index)) = self.negotiated.with(|cache| cache.get(text).copied()) {
            return if index == usize::MAX { default } else { index };
        }
        let found = self.negotiate_uncached(text);
        self.negotiated
            .with(|cache| cache.put(text.into(), found.unwrap_or(usize::MAX)));
        found.unwrap_or(default)
    }

    fn negotiate_uncached(&self, text: &str) -> Option<usize> {
        // At most MAX_TAGS tags, by q-value (stable: equal q keeps the header's order); a
        // q-value of 0, above 1 or not a number is not a wish.
        let head: Vec<&str> = text.split(',').take(MAX_TAGS).collect();
        let requested: Vec<LanguageIdentifier> =
            accept_language::parse_with_quality(&head.join(","))
                .into_iter()
                .filter(|(_, q)| q.is_finite() && *q > 0.0 && *q <= 1.0)
                .filter_map(|(tag, _)| tag.parse().ok())
                .collect();
        if requested.is_empty() {
            return None;
        }
        let matched = fluent_langneg::negotiate_languages(
            &requested,
            &self.ids,
            None,
            fluent_langneg::NegotiationStrategy::Lookup,
        );
        let first = matched.first()?;
        self.ids.iter().position(|id| id == *first)
    }

    /// Message `id` in language `lang` (falling back to `fallback`, then English), with `args`.
    /// An unknown id gives the id itself, which `--check` reports before it can be served.
    pub fn message(&self, lang: usize, fallback: usize, id: &str, args: &FluentArgs) -> String {
        for index in [lang, fallback, 0] {
            let language = self.get(index);
            if let Some(pattern) = language.bundle.get_message(id).and_then(|m| m.value()) {
                let mut errors = Vec::new();
                let text = language
                    .bundle
                    .format_pattern(pattern, Some(args), &mut errors);
                return text.into_owned();
            }
        }
        id.to_owned()
    }

    /// Whether English (the last resort) has message `id`.
    pub fn has(&self, id: &str) -> bool {
        self.languages[0].bundle.has_message(id)
    }
}

/// Turns a template value into a Fluent argument: numbers stay numbers (plurals select on them).
pub(crate) fn fluent_value(v: &minijinja::Value) -> FluentValue<'static> {
    match v.as_i64() {
        Some(n) if v.kind() == minijinja::value::ValueKind::Number => FluentValue::from(n),
        _ => match f64::try_from(v.clone()) {
            Ok(f) if v.kind() == minijinja::value::ValueKind::Number => FluentValue::from(f),
            _ => FluentValue::from(v.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, i64)]) -> FluentArgs<'static> {
        let mut a = FluentArgs::new();
        for (k, v) in pairs {
            a.set(k.to_string(), FluentValue::from(*v));
        }
        a
    }

    #[test]
    fn every_shipped_language_has_every_message() {
        let c = Catalogs::builtin();
        let english: BTreeMap<String, String> = toml::from_str(BUILTIN[0].1).unwrap();
        for (tag, text) in BUILTIN {
            let messages: BTreeMap<String, String> = toml::from_str(text).unwrap();
            let missing: Vec<&String> = english
                .keys()
                .filter(|k| !messages.contains_key(*k))
                .collect();
            let extra: Vec<&String> = messages
                .keys()
                .filter(|k| !english.contains_key(*k))
                .collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{tag}: missing {missing:?}, unknown {extra:?}"
            );
        }
        assert_eq!(c.languages().count(), 17);
        let rtl: Vec<&str> = c
            .languages()
            .filter(|l| l.rtl)
            .map(|l| l.tag.as_str())
            .collect();
        assert_eq!(rtl, ["ar", "fa"]);
    }

    #[test]
    fn accept_language_is_negotiated_by_q_value_and_region() {
        let c = Catalogs::builtin();
        let en = c.find("en").unwrap();
        let tag = |h: &str| c.get(c.negotiate(Some(h.as_bytes()), en)).tag.clone();
        assert_eq!(tag("de-AT,de;q=0.9,en;q=0.5"), "de");
        assert_eq!(tag("fr;q=0.4, ja;q=0.8"), "ja");
        assert_eq!(tag("pt"), "pt-BR");
        assert_eq!(tag("pt-PT"), "pt-BR");
        assert_eq!(tag("zh-TW"), "zh-TW");
        // Likely subtags (CLDR): Hong Kong and Macau write the traditional script.
        assert_eq!(tag("zh-HK"), "zh-TW");
        assert_eq!(tag("zh-MO"), "zh-TW");
        assert_eq!(tag("zh-SG"), "zh-CN");
        assert_eq!(tag("zh"), "zh-CN");
        assert_eq!(tag("zh-CN,zh;q=0.9"), "zh-CN");
        assert_eq!(tag("xx, fa;q=0.1"), "fa");
        assert_eq!(tag("sv"), "en", "no catalog: the default");
        assert_eq!(tag("de;q=0, it"), "it", "q=0 is a refusal");
        assert_eq!(c.get(c.negotiate(None, c.find("es").unwrap())).tag, "es");
    }

    #[test]
    fn hostile_headers_fall_back_and_stay_bounded() {
        let c = Catalogs::builtin();
        let en = c.find("en").unwrap();
        let many = "xx-YY;q=0.9,".repeat(5_000) + "de";
        for h in [
            many.as_str(),
            "de;q=1e30",
            "de;q=NaN",
            ";;;,,,==",
            "\u{0}\u{1}",
            "*",
            "en-US-x-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ] {
            let got = c.get(c.negotiate(Some(h.as_bytes()), en)).tag.clone();
            assert!(got == "en", "{h:.40}: {got}");
        }
        assert_eq!(c.negotiate(Some(b"\xff\xfe"), en), en);
    }

    #[test]
    fn plurals_follow_the_language() {
        let c = Catalogs::builtin();
        let msg = |lang: &str, n: i64| {
            let l = c.find(lang).unwrap();
            c.message(l, 0, "ahead", &args(&[("n", n)]))
        };
        assert!(msg("en", 1).contains("1 person is"), "{}", msg("en", 1));
        assert!(msg("en", 3).contains("3 people are"), "{}", msg("en", 3));
        // Russian: one / few / many.
        assert!(msg("ru", 1).contains("1 человек"), "{}", msg("ru", 1));
        assert!(msg("ru", 3).contains("3 человека"), "{}", msg("ru", 3));
        assert!(msg("ru", 5).contains("5 человек."), "{}", msg("ru", 5));
        assert!(msg("ru", 21).contains("21 человек."), "{}", msg("ru", 21));
        // Polish: few for 2-4 (but not 12-14).
        assert!(msg("pl", 3).contains("3 osoby"), "{}", msg("pl", 3));
        assert!(msg("pl", 13).contains("13 osób"), "{}", msg("pl", 13));
        // Japanese has no plural forms.
        assert!(msg("ja", 5).contains('5'), "{}", msg("ja", 5));
        // Numbers are grouped the language's way.
        assert!(
            msg("de", 1234).contains("1.234 Personen"),
            "{}",
            msg("de", 1234)
        );
        assert!(
            msg("en", 1234).contains("1,234 people"),
            "{}",
            msg("en", 1234)
        );
        assert!(
            msg("ru", 1234).contains("1\u{a0}234"),
            "{}",
            msg("ru", 1234)
        );
        // Zero is its own message where the language says so.
        assert!(!msg("en", 0).contains('0'), "{}", msg("en", 0));
    }

    #[test]
    fn operators_override_single_messages_and_add_languages() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("i18n")).unwrap();
        std::fs::write(
            dir.path().join("i18n/de.toml"),
            "wait-soon = \"Gleich geht's los.\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("i18n/sv.toml"),
            "wait-soon = \"Snart din tur.\"\n",
        )
        .unwrap();
        let c = Catalogs::load(dir.path()).unwrap();
        let de = c.find("de").unwrap();
        let sv = c.find("sv").unwrap();
        let none = FluentArgs::new();
        assert_eq!(c.message(de, 0, "wait-soon", &none), "Gleich geht's los.");
        // The rest of German is still the shipped German.
        assert!(c.message(de, 0, "no-jump", &none).contains("Seite"));
        assert_eq!(c.message(sv, 0, "wait-soon", &none), "Snart din tur.");
        // Swedish has no other message: English fills in.
        assert!(c.message(sv, 0, "no-jump", &none).contains("Refreshing"));
        assert_eq!(c.get(c.negotiate(Some(b"sv-SE"), 0)).tag, "sv");

        std::fs::write(
            dir.path().join("i18n/fr.toml"),
            "wait-soon = \"{ $n -> \"\n",
        )
        .unwrap();
        let e = Catalogs::load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("fr.toml") && e.contains("not valid Fluent"),
            "{e}"
        );
        std::fs::write(dir.path().join("i18n/fr.toml"), "wait-soon = 3\n").unwrap();
        let e = Catalogs::load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("fr.toml") && e.contains("not a message catalog"),
            "{e}"
        );
    }
}
