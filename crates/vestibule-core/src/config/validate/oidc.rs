//! `[oidc]`: the issuer, the room and the relying parties.

use std::collections::HashSet;

use super::super::file::{OidcClientFile, OidcFile};
use super::{OidcClient, OidcConfig, RoomConfig, Validator};

/// The fewest characters a client secret may have.
const MIN_SECRET: usize = 16;
/// The most characters a client id, a secret or a redirect URI may have.
const MAX_ID: usize = 128;
const MAX_SECRET: usize = 256;
const MAX_URI: usize = 2048;

impl Validator<'_> {
    /// `[oidc]`: `None` unless enabled (its other keys are then only checked for what they
    /// are, not used).
    pub(super) fn oidc(
        &mut self,
        o: &OidcFile,
        api_prefix: &str,
        rooms: &[RoomConfig],
    ) -> Option<OidcConfig> {
        if !o.enabled {
            return None;
        }
        let issuer = self.oidc_issuer(o.issuer.as_deref(), api_prefix);
        let room = self.oidc_room(o.room.as_deref(), rooms);
        let clients = self.oidc_clients(&o.clients);
        Some(OidcConfig {
            issuer: issuer?,
            room: room?,
            clients,
        })
    }

    /// `oidc.issuer`: an https URL (http for a loopback host) ending in `{api_prefix}/oidc`.
    fn oidc_issuer(&mut self, issuer: Option<&str>, api_prefix: &str) -> Option<String> {
        let key = "oidc.issuer";
        let Some(issuer) = issuer else {
            self.err(
                key,
                format!(
                    "is required with enabled = true: the public URL of {api_prefix}/oidc, \
                     e.g. \"https://queue.example.com{api_prefix}/oidc\""
                ),
            );
            return None;
        };
        let suffix = format!("{api_prefix}/oidc");
        let Some((scheme, host)) = url_parts(issuer) else {
            self.err(key, format!("\"{issuer}\" is not an absolute https URL"));
            return None;
        };
        let ok_scheme = scheme == "https" || (scheme == "http" && is_loopback(host));
        if !ok_scheme {
            self.err(
                key,
                "must be an https URL (http only for a loopback host such as 127.0.0.1)",
            );
            return None;
        }
        if issuer.contains(['?', '#']) || !issuer.ends_with(&suffix) {
            self.err(
                key,
                format!("must end with {suffix} (the path vestibule answers), without a query"),
            );
            return None;
        }
        Some(issuer.to_owned())
    }

    /// `oidc.room`: the name of an `api = true` room.
    fn oidc_room(&mut self, room: Option<&str>, rooms: &[RoomConfig]) -> Option<String> {
        let key = "oidc.room";
        let Some(name) = room else {
            self.err(
                key,
                "is required with enabled = true: the room visitors wait in",
            );
            return None;
        };
        match rooms.iter().find(|r| r.name == name) {
            Some(r) if r.api.is_some() => Some(name.to_owned()),
            Some(_) => {
                self.err(key, format!("room \"{name}\" needs api = true"));
                None
            }
            None => {
                self.err(key, format!("no [[room]] is named \"{name}\""));
                None
            }
        }
    }

    /// `oidc.clients`: unique ids, long secrets, registered redirect URIs.
    fn oidc_clients(&mut self, clients: &[OidcClientFile]) -> Vec<OidcClient> {
        if clients.is_empty() {
            self.err(
                "oidc.clients",
                "needs at least one client with enabled = true",
            );
        }
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(clients.len());
        for (i, c) in clients.iter().enumerate() {
            let k = |field: &str| format!("oidc.clients[{i}].{field}");
            let printable = |s: &str| s.chars().all(|ch| ch.is_ascii_graphic());
            if c.id.is_empty() || c.id.len() > MAX_ID || !printable(&c.id) {
                self.err(
                    k("id"),
                    "must be 1 to 128 printable ASCII characters, no spaces",
                );
            } else if !seen.insert(c.id.as_str()) {
                self.err(k("id"), format!("\"{}\" is the id of another client", c.id));
            }
            let secret_chars = c.secret.chars().count();
            if !(MIN_SECRET..=MAX_SECRET).contains(&secret_chars) || !printable(&c.secret) {
                // The value is a secret: never quoted.
                self.err(
                    k("secret"),
                    "must be 16 to 256 printable ASCII characters, no spaces \
                     (e.g. `openssl rand -hex 32`)",
                );
            }
            if c.redirect_uris.is_empty() {
                self.err(k("redirect_uris"), "needs at least one URI");
            }
            for (j, uri) in c.redirect_uris.iter().enumerate() {
                if !is_redirect_uri(uri) {
                    self.err(
                        format!("oidc.clients[{i}].redirect_uris[{j}]"),
                        format!(
                            "\"{uri}\" is not an absolute URL without a fragment, like \
                             \"https://app.example/oauth2/callback\""
                        ),
                    );
                }
            }
            out.push(OidcClient {
                id: c.id.clone(),
                secret: c.secret.clone(),
                redirect_uris: c.redirect_uris.clone(),
            });
        }
        out
    }
}

/// The scheme and host of an absolute `scheme://host[:port]/...` URL.
fn url_parts(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.0,
        None => host.split(':').next().unwrap_or(""),
    };
    (scheme_ok && !host.is_empty()).then_some((scheme, host))
}

/// A host that only this machine reaches.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An absolute URL with a host, without a fragment or any space or control character.
fn is_redirect_uri(uri: &str) -> bool {
    uri.len() <= MAX_URI
        && !uri.contains('#')
        && uri.chars().all(|c| c.is_ascii_graphic())
        && url_parts(uri).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_for_their_scheme_and_host() {
        assert_eq!(
            url_parts("https://q.example:8443/x"),
            Some(("https", "q.example"))
        );
        assert_eq!(url_parts("http://[::1]:80/a"), Some(("http", "::1")));
        assert_eq!(
            url_parts("http://u@127.0.0.1/a"),
            Some(("http", "127.0.0.1"))
        );
        assert_eq!(url_parts("/relative"), None);
        assert_eq!(url_parts("https:///nohost"), None);
        assert!(is_loopback("127.0.0.1") && is_loopback("::1") && is_loopback("localhost"));
        assert!(!is_loopback("example.com"));
        assert!(is_redirect_uri("https://app.example/cb?x=1"));
        assert!(!is_redirect_uri("https://app.example/cb#frag"));
        assert!(!is_redirect_uri("app.example/cb"));
    }

    const ROOMS: &str = "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nadmission = \"fifo\"\nnew_users_per_minute = 10\napi = true\n\
                         [[room]]\nname = \"plain\"\npaths = [\"/p\"]\ncookie_name = \"p\"\n";
    const CLIENT: &str = "clients = [{ id = \"app\", secret = \"0123456789abcdef\", redirect_uris = [\"https://app.example/cb\"] }]\n";

    fn parse(oidc: &str) -> Result<crate::config::Config, String> {
        let text = format!(
            "[upstream]\npeers = [\"127.0.0.1:2\"]\nhealth_check = \"0s\"\n{ROOMS}[oidc]\n{oidc}"
        );
        crate::config::Config::parse(
            &text,
            std::path::Path::new("/etc/v/vestibule.toml"),
            &crate::config::testing::Bare,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn an_enabled_provider_names_its_issuer_room_and_clients() {
        let ok = parse(&format!(
            "enabled = true\nissuer = \"https://q.example/.vestibule/oidc\"\nroom = \"sale\"\n{CLIENT}"
        ))
        .unwrap();
        let oidc = ok.oidc.unwrap();
        assert_eq!(oidc.room, "sale");
        assert_eq!(oidc.client("app").unwrap().redirect_uris.len(), 1);
        assert!(!format!("{oidc:?}").contains("0123456789abcdef"));
        // Off unless enabled, whatever else is written.
        assert_eq!(parse("room = \"nope\"\n").unwrap().oidc, None);
    }

    #[test]
    fn each_mistake_names_its_key() {
        let with = |issuer: &str, room: &str, clients: &str| {
            parse(&format!(
                "enabled = true\nissuer = \"{issuer}\"\nroom = \"{room}\"\n{clients}"
            ))
            .unwrap_err()
        };
        let good = "https://q.example/.vestibule/oidc";
        let e = with("http://q.example/.vestibule/oidc", "sale", CLIENT);
        assert!(e.contains("oidc.issuer") && e.contains("https"), "{e}");
        let e = with("https://q.example/oidc", "sale", CLIENT);
        assert!(e.contains("must end with /.vestibule/oidc"), "{e}");
        assert!(parse(&format!(
            "enabled = true\nissuer = \"http://127.0.0.1:8080/.vestibule/oidc\"\nroom = \"sale\"\n{CLIENT}"
        ))
        .is_ok());
        let e = with(good, "plain", CLIENT);
        assert!(e.contains("oidc.room") && e.contains("api = true"), "{e}");
        let e = with(good, "gone", CLIENT);
        assert!(e.contains("no [[room]] is named"), "{e}");
        let short = CLIENT.replace("0123456789abcdef", "short");
        let e = with(good, "sale", &short);
        assert!(
            e.contains("oidc.clients[0].secret") && !e.contains("short\""),
            "{e}"
        );
        let twice = "clients = [{ id = \"a\", secret = \"0123456789abcdef\", redirect_uris = [\"https://a/cb\"] }, { id = \"a\", secret = \"0123456789abcdef\", redirect_uris = [\"https://a/cb#x\"] }]\n";
        let e = with(good, "sale", twice);
        assert!(e.contains("oidc.clients[1].id"), "{e}");
        assert!(e.contains("oidc.clients[1].redirect_uris[0]"), "{e}");
        let e = parse("enabled = true\n").unwrap_err();
        assert!(
            e.contains("oidc.issuer") && e.contains("oidc.room") && e.contains("oidc.clients"),
            "{e}"
        );
    }
}
