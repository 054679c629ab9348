//! "Did you mean": the known key nearest to an unknown one.
//!
//! The known keys come from the schema itself (the field lists serde derives for `file.rs`), so
//! a key added there is suggested without a list to keep in step.

use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::file::{
    CertificateFile, ClusterFile, EventFile, FileConfig, IdentityFile, KeysFile, LogFile,
    RateLimitFile, RoomFile, ServerFile, TlsFile, UpstreamFile,
};

/// Below this Jaro-Winkler similarity a "suggestion" is more likely noise than help (clap, which
/// suggests subcommands the same way, draws the line in the same place).
const SIMILAR: f64 = 0.8;

/// The known key nearest to `unknown` (written at the dotted `path`, e.g.
/// `room[0].new_user_per_minute`), if one is near enough.
pub(crate) fn did_you_mean(path: &str) -> Option<&'static str> {
    let (parent, unknown) = match path.rsplit_once('.') {
        Some((parent, key)) => (parent, key),
        None => ("", path),
    };
    let known = known_keys(&without_indices(parent))?;
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(unknown, k), *k))
        .filter(|(score, _)| *score >= SIMILAR)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// `room[0].event[1]` → `room.event`.
fn without_indices(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut skipping = false;
    for c in path.chars() {
        match c {
            '[' => skipping = true,
            ']' => skipping = false,
            c if !skipping => out.push(c),
            _ => {}
        }
    }
    out
}

/// The keys a table accepts, by its path with indices removed.
fn known_keys(table: &str) -> Option<&'static [&'static str]> {
    Some(match table {
        "" => fields::<FileConfig>(),
        "server" => fields::<ServerFile>(),
        "admin" => fields::<super::file::AdminFile>(),
        "identity" => fields::<IdentityFile>(),
        "upstream" => fields::<UpstreamFile>(),
        "keys" => fields::<KeysFile>(),
        "room" => fields::<RoomFile>(),
        "room.event" => fields::<EventFile>(),
        "rate_limit" => fields::<RateLimitFile>(),
        "log" => fields::<LogFile>(),
        "cluster" => fields::<ClusterFile>(),
        "tls" => fields::<TlsFile>(),
        "tls.certificates" => fields::<CertificateFile>(),
        "jwt" => fields::<super::file::JwtFile>(),
        "oidc" => fields::<super::file::OidcFile>(),
        "oidc.clients" => fields::<super::file::OidcClientFile>(),
        "admin.operators" => fields::<super::file::OperatorFile>(),
        "events" => fields::<super::file::EventsFile>(),
        "events.sink" => fields::<super::file::SinkFile>(),
        _ => return None,
    })
}

/// Every table of the schema (`""` for the top level, `"room.event"`, …) with the keys it accepts,
/// found by walking [`known_keys`] from the top: a key is a table when `known_keys` knows its
/// path. The documentation tests compare this with the configuration reference and the sample.
pub fn schema() -> Vec<(String, &'static [&'static str])> {
    let mut out = Vec::new();
    let mut todo = vec![String::new()];
    while let Some(table) = todo.pop() {
        let keys = known_keys(&table).expect("a table of the schema");
        for key in keys {
            let path = if table.is_empty() {
                (*key).to_owned()
            } else {
                format!("{table}.{key}")
            };
            if known_keys(&path).is_some() {
                todo.push(path);
            }
        }
        out.push((table, keys));
    }
    out.sort();
    out
}

/// The field names `T`'s derived `Deserialize` asks for: it hands them to
/// `deserialize_struct`, which this deserializer records and then refuses.
fn fields<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only the field names are wanted"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            self.deserialize_any(visitor)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut out: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_get_the_key_meant() {
        assert_eq!(
            did_you_mean("room[0].new_user_per_minute"),
            Some("new_users_per_minute")
        );
        assert_eq!(did_you_mean("server.lisen"), Some("listen"));
        assert_eq!(did_you_mean("upstream.healthcheck"), Some("health_check"));
        assert_eq!(did_you_mean("rate_limit[2].windw"), Some("window"));
        assert_eq!(did_you_mean("room[1].event[0].strat"), Some("start"));
        assert_eq!(did_you_mean("tls.certificates[0].cer"), Some("cert"));
        assert_eq!(did_you_mean("rooms"), Some("room"));
    }

    #[test]
    fn far_misses_and_free_form_tables_get_nothing() {
        assert_eq!(did_you_mean("server.zzzz"), None);
        // Lanes are named by the operator: no list to compare with.
        assert_eq!(did_you_mean("room[0].lanes.x.y"), None);
    }

    #[test]
    fn every_table_of_the_schema_has_its_keys() {
        for table in [
            "",
            "server",
            "admin",
            "identity",
            "upstream",
            "keys",
            "room",
            "room.event",
            "rate_limit",
            "log",
            "cluster",
            "tls",
            "tls.certificates",
        ] {
            let keys = known_keys(table).unwrap();
            assert!(!keys.is_empty(), "{table}");
        }
        assert!(known_keys("room").unwrap().contains(&"session_duration"));
    }
}
