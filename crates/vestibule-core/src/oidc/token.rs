//! The token request (RFC 6749 §4.1.3, §5, with PKCE, RFC 7636 §4.6): a code, the client's
//! credentials and the PKCE verifier in; an ID token and an access token out.
//!
//! [`read`] parses the form body and the client's credentials (HTTP Basic,
//! `client_secret_basic`, or the body's `client_id` and `client_secret`, `client_secret_post`);
//! [`redeem`] checks them and the code, marks the code used and signs the tokens.

use std::collections::HashMap;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::code::{self, CodeRefusal, Grant};
use super::ID_TOKEN_VALIDITY;
use crate::config::{JwtConfig, OidcClient, OidcConfig};
use crate::keys::KeyRing;
use crate::room::Room;
use crate::time::Timestamp;

/// The most bytes a token request's body may have.
pub const MAX_BODY: usize = 8 * 1024;

/// Why a token request got no tokens: an RFC 6749 §5.2 error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A parameter is missing, repeated or malformed; the text says which.
    InvalidRequest(&'static str),
    /// No client of that id, a wrong secret, or no credentials. `basic`: they came by HTTP
    /// Basic (the answer then asks for it again with `WWW-Authenticate`).
    InvalidClient { basic: bool },
    /// The code is made up, expired, used, another client's or redirect URI's, or the PKCE
    /// verifier does not match it.
    InvalidGrant(&'static str),
    /// A `grant_type` other than `authorization_code`.
    UnsupportedGrantType,
    /// The room or the keys cannot serve now (no JWT key, the room's queue is off).
    ServerError,
}

impl Error {
    /// The `error` code of the answer.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidRequest(_) => "invalid_request",
            Error::InvalidClient { .. } => "invalid_client",
            Error::InvalidGrant(_) => "invalid_grant",
            Error::UnsupportedGrantType => "unsupported_grant_type",
            Error::ServerError => "server_error",
        }
    }

    /// The answer's status.
    pub fn status(&self) -> u16 {
        match self {
            Error::InvalidClient { .. } => 401,
            Error::ServerError => 500,
            _ => 400,
        }
    }

    /// The `error_description` of the answer.
    pub fn description(&self) -> &'static str {
        match self {
            Error::InvalidRequest(why) | Error::InvalidGrant(why) => why,
            Error::InvalidClient { .. } => "client authentication failed",
            Error::UnsupportedGrantType => "only grant_type=authorization_code is supported",
            Error::ServerError => "the provider cannot issue tokens now",
        }
    }
}

/// How the client said who it is.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub id: String,
    secret: String,
    /// By HTTP Basic.
    pub basic: bool,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("id", &self.id)
            .field("basic", &self.basic)
            .finish_non_exhaustive()
    }
}

/// A token request, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRequest {
    pub grant_type: String,
    pub code: String,
    pub redirect_uri: String,
    pub code_verifier: String,
    /// `None` when the client gave none (it is then refused as `invalid_client`).
    pub credentials: Option<Credentials>,
}

/// What a redeemed code gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens {
    pub id_token: String,
    pub access_token: String,
    /// Seconds the access token is valid for.
    pub expires_in: u64,
}

/// The claims of an ID token (OpenID Connect Core §2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdTokenClaims {
    /// `[oidc] issuer`.
    pub iss: String,
    /// The visitor's subject: fresh for each sign-in.
    pub sub: String,
    /// The client.
    pub aud: String,
    pub iat: u64,
    pub exp: u64,
    /// When the room let the visitor in.
    pub auth_time: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

/// Reads a token request: the form `body` (`application/x-www-form-urlencoded`) and the
/// `Authorization` header. Called by the token endpoint on every request; a parameter given
/// twice, or credentials given both ways, is `invalid_request`.
pub fn read(body: &[u8], authorization: Option<&[u8]>) -> Result<TokenRequest, Error> {
    if body.len() > MAX_BODY {
        return Err(Error::InvalidRequest("the body is too long"));
    }
    let mut form: HashMap<String, String> = HashMap::new();
    for (name, value) in form_urlencoded::parse(body) {
        if form.insert(name.into_owned(), value.into_owned()).is_some() {
            return Err(Error::InvalidRequest("a parameter is given twice"));
        }
    }
    let mut take = |name: &str| form.remove(name).filter(|v| !v.is_empty());
    let grant_type = take("grant_type").ok_or(Error::InvalidRequest("grant_type is missing"))?;
    let code = take("code").unwrap_or_default();
    let redirect_uri = take("redirect_uri").unwrap_or_default();
    let code_verifier = take("code_verifier").unwrap_or_default();
    let (post_id, post_secret) = (take("client_id"), take("client_secret"));
    let credentials = match (authorization.map(basic_credentials), post_id, post_secret) {
        (Some(None), _, _) => return Err(Error::InvalidClient { basic: true }),
        (Some(Some(_)), _, Some(_)) => {
            return Err(Error::InvalidRequest("client credentials are given twice"))
        }
        (Some(Some(basic)), Some(id), None) if id != basic.id => {
            return Err(Error::InvalidRequest(
                "client_id differs from the credentials",
            ))
        }
        (Some(Some(basic)), _, None) => Some(basic),
        (None, Some(id), Some(secret)) => Some(Credentials {
            id,
            secret,
            basic: false,
        }),
        (None, _, _) => None,
    };
    Ok(TokenRequest {
        grant_type,
        code,
        redirect_uri,
        code_verifier,
        credentials,
    })
}

/// `Basic base64(urlencode(id):urlencode(secret))` (RFC 6749 §2.3.1); `None` when the header
/// is something else or malformed.
fn basic_credentials(header: &[u8]) -> Option<Credentials> {
    let header = std::str::from_utf8(header).ok()?;
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    let unescape = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .ok()
            .map(|s| s.into_owned())
    };
    Some(Credentials {
        id: unescape(id)?,
        secret: unescape(secret)?,
        basic: true,
    })
}

/// The client `credentials` name, if their secret is its own (compared in constant time).
pub fn authenticate<'c>(
    oidc: &'c OidcConfig,
    credentials: Option<&Credentials>,
) -> Result<&'c OidcClient, Error> {
    let Some(credentials) = credentials else {
        return Err(Error::InvalidClient { basic: false });
    };
    let refused = Error::InvalidClient {
        basic: credentials.basic,
    };
    let client = oidc.client(&credentials.id).ok_or(refused.clone())?;
    use subtle::ConstantTimeEq;
    // Digests, so the comparison takes as long whatever the secrets' lengths.
    let given = Sha256::digest(credentials.secret.as_bytes());
    let known = Sha256::digest(client.secret.as_bytes());
    if bool::from(given.ct_eq(&known)) {
        Ok(client)
    } else {
        Err(refused)
    }
}

/// PKCE S256: `verifier` (43 to 128 unreserved characters) hashes to `challenge`.
pub fn verifier_matches(verifier: &str, challenge: &str) -> bool {
    let shaped = (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    if !shaped {
        return false;
    }
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    use subtle::ConstantTimeEq;
    computed.as_bytes().ct_eq(challenge.as_bytes()).into()
}

/// Trades `request`'s code for tokens at `now`: the client authenticates, the code must be
/// its own, unexpired, for the same redirect URI, match the PKCE verifier, and be unused (its
/// mark is set in `room`'s store here; a second trade is `invalid_grant`). The ID token is
/// signed for the client; the access token is the room's JWT (issuer `[jwt] issuer`, the
/// room's audience and validity), so a gateway that takes the room's JWTs takes it too.
pub fn redeem(
    oidc: &OidcConfig,
    room: &Room,
    ring: &KeyRing,
    jwt: &JwtConfig,
    request: &TokenRequest,
    now: Timestamp,
) -> Result<Tokens, Error> {
    let client = authenticate(oidc, request.credentials.as_ref())?;
    if request.grant_type != "authorization_code" {
        return Err(Error::UnsupportedGrantType);
    }
    if request.code.is_empty() || request.redirect_uri.is_empty() {
        return Err(Error::InvalidRequest("code and redirect_uri are required"));
    }
    let grant = Grant::open(&request.code, ring, now).map_err(|r| match r {
        CodeRefusal::Expired => Error::InvalidGrant("the code has expired"),
        _ => Error::InvalidGrant("not a code of this provider"),
    })?;
    if grant.client_id != client.id {
        return Err(Error::InvalidGrant("the code was issued to another client"));
    }
    if grant.redirect_uri != request.redirect_uri {
        return Err(Error::InvalidGrant("redirect_uri differs from the code's"));
    }
    if !verifier_matches(&request.code_verifier, &grant.code_challenge) {
        return Err(Error::InvalidGrant(
            "code_verifier does not match the challenge",
        ));
    }
    let (Some(queue), false) = (room.numbered(now), ring.jwt().is_empty()) else {
        return Err(Error::ServerError);
    };
    let mark = code::mark(&request.code).ok_or(Error::InvalidGrant("not a code"))?;
    if !queue
        .store()
        .mark(room.name(), mark, code::mark_until(&grant), now)
    {
        return Err(Error::InvalidGrant("the code was used already"));
    }
    let access = crate::api::queue::room_claims(room, queue, &jwt.issuer, &grant.sub, None, now);
    let id_token = IdTokenClaims {
        iss: oidc.issuer.clone(),
        sub: grant.sub.clone(),
        aud: client.id.clone(),
        iat: now.secs(),
        exp: now.secs() + ID_TOKEN_VALIDITY.as_secs(),
        auth_time: grant.issued_at,
        nonce: grant.nonce.clone(),
    };
    Ok(Tokens {
        id_token: ring.jwt().sign(&id_token),
        access_token: ring.jwt().sign(&access),
        expires_in: access.exp - access.iat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oidc::testing::{config, ring};

    /// A verifier and its challenge, computed with Python's hashlib and base64.
    const VERIFIER: &str = "dBjftJeZ4CVP-mJ0kOIQ3aA9mK0DUTxgYn4zG_KQQ2M";
    const CHALLENGE: &str = "GzvTOs9KrAsb2JgyJA1RSaH5OuAKgJJi-K-8XM8CVLo";

    #[test]
    fn pkce_s256_matches_its_challenge_only() {
        assert!(verifier_matches(VERIFIER, CHALLENGE));
        assert!(!verifier_matches(&VERIFIER.replace('d', "e"), CHALLENGE));
        assert!(!verifier_matches("short", CHALLENGE));
        assert!(!verifier_matches(&"a".repeat(129), CHALLENGE));
    }

    #[test]
    fn credentials_come_by_basic_or_in_the_body_never_both() {
        // RFC 6749 §2.3.1: id and secret form-encoded, then Basic.
        let basic = format!("Basic {}", STANDARD.encode("app:s3cret%2Bs3cret+x"));
        let r = read(
            b"grant_type=authorization_code&code=c",
            Some(basic.as_bytes()),
        )
        .unwrap();
        let c = r.credentials.clone().unwrap();
        assert_eq!(
            (c.id.as_str(), c.secret.as_str(), c.basic),
            ("app", "s3cret+s3cret x", true)
        );
        assert!(!format!("{r:?}").contains("s3cret"));
        let post = read(b"grant_type=a&client_id=app&client_secret=s%20t", None).unwrap();
        let c = post.credentials.unwrap();
        assert_eq!((c.secret.as_str(), c.basic), ("s t", false));
        assert_eq!(
            read(b"grant_type=a&client_secret=x", Some(basic.as_bytes())),
            Err(Error::InvalidRequest("client credentials are given twice"))
        );
        assert_eq!(
            read(b"grant_type=a", Some(b"Bearer x")),
            Err(Error::InvalidClient { basic: true })
        );
        assert_eq!(
            read(b"grant_type=a&code=1&code=2", None),
            Err(Error::InvalidRequest("a parameter is given twice"))
        );
        assert!(read(b"code=1", None).is_err());
        assert_eq!(read(b"grant_type=a", None).unwrap().credentials, None);
    }

    #[test]
    fn only_the_right_secret_authenticates() {
        let creds = |secret: &str, basic| Credentials {
            id: "app".into(),
            secret: secret.into(),
            basic,
        };
        let oidc = config();
        assert!(authenticate(&oidc, Some(&creds("s3cret-s3cret-s3cret", true))).is_ok());
        assert_eq!(
            authenticate(&oidc, Some(&creds("wrong", true))),
            Err(Error::InvalidClient { basic: true })
        );
        assert_eq!(
            authenticate(&oidc, None),
            Err(Error::InvalidClient { basic: false })
        );
    }

    /// The `sale` room of [`config`], with the queue API, and the test ring.
    fn room() -> Room {
        let text = "[server]\nlisten = [\"127.0.0.1:1\"]\n[upstream]\npeers = [\"127.0.0.1:2\"]\nhealth_check = \"0s\"\n\
                    [[room]]\nname = \"sale\"\npaths = [\"/\"]\nadmission = \"fifo\"\nnew_users_per_minute = 10\napi = true\njwt = true\n";
        let config = crate::config::Config::parse(
            text,
            std::path::Path::new("/v.toml"),
            &crate::config::testing::Bare,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let store: std::sync::Arc<dyn crate::store::CounterStore> =
            std::sync::Arc::new(crate::store::local::LocalStore::new());
        Room::new(config.rooms[0].clone(), &store)
    }

    fn now() -> Timestamp {
        Timestamp::from_secs(1_800_000_000)
    }

    fn request(code: &str, verifier: &str, secret: &str) -> TokenRequest {
        let body = format!(
            "grant_type=authorization_code&code={code}&redirect_uri=https%3A%2F%2Fapp.example%2Fcb\
             &code_verifier={verifier}&client_id=app&client_secret={secret}"
        );
        read(body.as_bytes(), None).unwrap()
    }

    #[test]
    fn a_code_is_traded_once_for_signed_tokens() {
        let (oidc, ring, room) = (config(), ring(), room());
        let jwt = JwtConfig {
            issuer: "vestibule".into(),
        };
        let grant = Grant::new(
            "app".into(),
            "https://app.example/cb".into(),
            CHALLENGE.into(),
            Some("n1".into()),
            now(),
        );
        let code = grant.seal(&ring);
        let secret = "s3cret-s3cret-s3cret";
        let at = Timestamp::from_secs(now().secs() + 5);
        // A wrong verifier or redirect URI does not use the code up.
        let wrong = request(&code, &VERIFIER.replace('d', "e"), secret);
        assert!(matches!(
            redeem(&oidc, &room, &ring, &jwt, &wrong, at),
            Err(Error::InvalidGrant(_))
        ));
        let mut elsewhere = request(&code, VERIFIER, secret);
        elsewhere.redirect_uri = "https://app.example/cb?x=1".into();
        assert!(matches!(
            redeem(&oidc, &room, &ring, &jwt, &elsewhere, at),
            Err(Error::InvalidGrant(_))
        ));
        let bad_secret = request(&code, VERIFIER, "s3cret-s3cret-s3creT");
        assert_eq!(
            redeem(&oidc, &room, &ring, &jwt, &bad_secret, at),
            Err(Error::InvalidClient { basic: false })
        );

        // Another registered client, with its own secret, cannot trade it.
        let mut stolen = request(&code, VERIFIER, "other-other-other");
        stolen.credentials.as_mut().unwrap().id = "other".into();
        assert_eq!(
            redeem(&oidc, &room, &ring, &jwt, &stolen, at),
            Err(Error::InvalidGrant("the code was issued to another client"))
        );

        let tokens = redeem(
            &oidc,
            &room,
            &ring,
            &jwt,
            &request(&code, VERIFIER, secret),
            at,
        )
        .unwrap();
        let claims = peek::<IdTokenClaims>(&tokens.id_token);
        assert_eq!(claims.iss, oidc.issuer);
        assert_eq!(claims.aud, "app");
        assert_eq!(claims.sub, grant.sub);
        assert_eq!(claims.nonce.as_deref(), Some("n1"));
        assert_eq!((claims.iat, claims.auth_time), (at.secs(), now().secs()));
        assert_eq!(claims.exp - claims.iat, ID_TOKEN_VALIDITY.as_secs());
        let access = peek::<crate::jwt::Claims>(&tokens.access_token);
        assert_eq!(
            (access.iss.as_str(), access.room.as_str()),
            ("vestibule", "sale")
        );
        assert_eq!(access.sub, grant.sub);
        assert_eq!(tokens.expires_in, access.exp - access.iat);

        let again = redeem(
            &oidc,
            &room,
            &ring,
            &jwt,
            &request(&code, VERIFIER, secret),
            at,
        );
        assert_eq!(again, Err(Error::InvalidGrant("the code was used already")));
        // Expired: refused whatever else holds.
        let late = Timestamp::from_secs(now().secs() + 60);
        let fresh = grant.clone().seal(&ring);
        assert_eq!(
            redeem(
                &oidc,
                &room,
                &ring,
                &jwt,
                &request(&fresh, VERIFIER, secret),
                late
            ),
            Err(Error::InvalidGrant("the code has expired"))
        );
        assert_eq!(
            redeem(
                &oidc,
                &room,
                &ring,
                &jwt,
                &TokenRequest {
                    grant_type: "password".into(),
                    ..request(&fresh, VERIFIER, secret)
                },
                at
            ),
            Err(Error::UnsupportedGrantType)
        );
    }

    /// A JWT's claims, verified with the test ring's key.
    fn peek<C: for<'de> Deserialize<'de>>(token: &str) -> C {
        let ring = ring();
        let key = &ring.jwt().keys()[0];
        let jwks: serde_json::Value = serde_json::from_str(&ring.jwt().jwks()).unwrap();
        let jwk = &jwks["keys"][0];
        let decoding = jsonwebtoken::DecodingKey::from_ec_components(
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap(),
        )
        .unwrap();
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        v.validate_exp = false;
        v.validate_aud = false;
        v.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<C>(token, &decoding, &v).unwrap();
        assert_eq!(data.header.kid.as_deref(), Some(key.kid()));
        data.claims
    }
}
