//! OpenID Connect: vestibule as an OpenID Provider whose only sign-in is a wait in one room.
//!
//! A site behind any relying party that speaks OIDC (oauth2-proxy, Apache mod_auth_openidc, an
//! nginx OIDC module) sends its visitors to the authorization endpoint; the decision makes them
//! wait in `[oidc] room` like any visitor of that room, and once the room lets them in the edge
//! sends them back with a code ([`code::Grant`]). The relying party trades the code at the token
//! endpoint ([`token`]) for an ID token and an access token signed by the ring's first
//! `[[jwt_key]]`.
//!
//! This module owns the protocol's rules and nothing else: the authorization request's checks
//! ([`authorize`]), the codes, the token request, the tokens and the discovery document. It reads
//! no clock (`now` is an argument), no socket and no config file.
//!
//! Codes are stateless, MACed by the key ring. A code is single use through a store mark named
//! by its MAC: on one node a replay is always refused; in a cluster, marks reach the other nodes
//! at each sync, so a replay at another node within one `sync_interval` is not caught (the code
//! still needs the client's secret and the PKCE verifier).

pub mod authorize;
pub mod code;
pub mod token;

use std::time::Duration;

use crate::config::OidcConfig;
use crate::keys::KeyRing;

/// How long a code may be traded for tokens after it was issued.
pub const CODE_LIFETIME: Duration = Duration::from_secs(60);
/// `exp - iat` of an ID token.
pub const ID_TOKEN_VALIDITY: Duration = Duration::from_secs(300);

/// The authorization endpoint of `oidc`'s issuer.
pub fn authorization_endpoint(oidc: &OidcConfig) -> String {
    format!("{}/authorize", oidc.issuer)
}

/// The discovery document (OpenID Connect Discovery 1.0 §3), served at
/// `{issuer}/.well-known/openid-configuration`: where the endpoints are and what they support.
/// `ring`'s JWT keys give the signing algorithms.
pub fn discovery(oidc: &OidcConfig, ring: &KeyRing) -> serde_json::Value {
    let mut algorithms: Vec<&str> = Vec::new();
    for key in ring.jwt().keys() {
        let name = key.algorithm().as_str();
        if !algorithms.contains(&name) {
            algorithms.push(name);
        }
    }
    let issuer = &oidc.issuer;
    serde_json::json!({
        "issuer": issuer,
        "authorization_endpoint": authorization_endpoint(oidc),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/jwks"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": algorithms,
        "scopes_supported": ["openid"],
        "claims_supported": ["iss", "sub", "aud", "iat", "exp", "auth_time", "nonce"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
    })
}

#[cfg(test)]
pub(crate) mod testing {
    use crate::config::{OidcClient, OidcConfig};
    use crate::keys::KeyRing;

    /// Two clients: `app`, with secret `s3cret-s3cret-s3cret` and two redirect URIs, and
    /// `other`, with secret `other-other-other` and the first of them.
    pub fn config() -> OidcConfig {
        OidcConfig {
            issuer: "https://q.example/.vestibule/oidc".into(),
            room: "sale".into(),
            clients: vec![
                OidcClient {
                    id: "app".into(),
                    secret: "s3cret-s3cret-s3cret".into(),
                    redirect_uris: vec![
                        "https://app.example/cb".into(),
                        "https://app.example/cb?x=1".into(),
                    ],
                },
                OidcClient {
                    id: "other".into(),
                    secret: "other-other-other".into(),
                    redirect_uris: vec!["https://app.example/cb".into()],
                },
            ],
        }
    }

    /// The test ring with an ES256 `[[jwt_key]]` `k1`.
    pub fn ring() -> KeyRing {
        KeyRing::parse_with(
            &format!(
                "active = \"key1\"\n[ring]\nkey1 = \"{}\"\n[[jwt_key]]\nkid = \"k1\"\nalgorithm = \"ES256\"\nprivate_key = \"k1.pem\"\n",
                crate::keys::testing::KEY1
            ),
            std::path::Path::new("keys.toml"),
            &|_| Ok(crate::jwt::testing::ES256_PEM.to_owned()),
        )
        .unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_names_every_endpoint_under_the_issuer() {
        let d = discovery(&testing::config(), &testing::ring());
        let issuer = "https://q.example/.vestibule/oidc";
        assert_eq!(d["issuer"], issuer);
        assert_eq!(d["authorization_endpoint"], format!("{issuer}/authorize"));
        assert_eq!(d["token_endpoint"], format!("{issuer}/token"));
        assert_eq!(d["jwks_uri"], format!("{issuer}/jwks"));
        assert_eq!(d["id_token_signing_alg_values_supported"][0], "ES256");
        assert_eq!(d["code_challenge_methods_supported"][0], "S256");
    }
}
