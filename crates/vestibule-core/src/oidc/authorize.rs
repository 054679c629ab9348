//! The authorization request (RFC 6749 §4.1.1, with PKCE, RFC 7636): its checks, before and
//! after the room.
//!
//! The client and its redirect URI are checked before the room sees the request: an unknown
//! client or a redirect URI it did not register is answered `400` here and never redirected
//! anywhere ([`Refusal::Unregistered`]), so nobody can use vestibule to send visitors to a site
//! of their choosing. Every other mistake is sent back to the registered redirect URI with an
//! `error` and the `state` ([`Refusal::Redirect`], RFC 6749 §4.1.2.1).

use std::collections::HashMap;

use crate::config::OidcConfig;

/// The most characters `state` and `nonce` may have.
pub const MAX_STATE_LEN: usize = 1024;

/// An authorization request that may go on to the room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub client_id: String,
    /// Exactly as registered.
    pub redirect_uri: String,
    /// Echoed on the way back.
    pub state: Option<String>,
    /// Echoed in the ID token.
    pub nonce: Option<String>,
    /// PKCE S256 challenge: 43 base64url characters.
    pub code_challenge: String,
}

/// Why an authorization request gets no code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No client of that id, or a redirect URI it did not register (or none): a `400` page,
    /// never a redirect. The text says which.
    Unregistered(&'static str),
    /// Any other mistake: back to the client's `redirect_uri` with `error` and `state`.
    Redirect {
        redirect_uri: String,
        error: &'static str,
        description: &'static str,
        state: Option<String>,
    },
}

impl Refusal {
    /// Where a redirected refusal sends the visitor: the redirect URI with `error`,
    /// `error_description` and `state`.
    pub fn location(&self) -> Option<String> {
        match self {
            Refusal::Unregistered(_) => None,
            Refusal::Redirect {
                redirect_uri,
                error,
                description,
                state,
            } => {
                let mut params = vec![("error", *error), ("error_description", *description)];
                if let Some(state) = state {
                    params.push(("state", state));
                }
                Some(with_query(redirect_uri, &params))
            }
        }
    }
}

/// Checks the authorization request in `query` (the request's query string) against `oidc`.
/// Called by the decision before the room sees the request, and by the edge again to write the
/// answer.
pub fn check(query: Option<&str>, oidc: &OidcConfig) -> Result<Request, Refusal> {
    let params = Params::read(query.unwrap_or(""));
    let client_id = params
        .single("client_id")
        .ok_or(Refusal::Unregistered("client_id is missing or given twice"))?;
    let client = oidc
        .client(client_id)
        .ok_or(Refusal::Unregistered("no client has this client_id"))?;
    let redirect_uri = params.single("redirect_uri").ok_or(Refusal::Unregistered(
        "redirect_uri is missing or given twice",
    ))?;
    if !client.redirect_uris.iter().any(|u| u == redirect_uri) {
        return Err(Refusal::Unregistered(
            "redirect_uri is not one this client registered",
        ));
    }
    let state = params.single("state").map(str::to_owned);
    let refuse = |error, description| Refusal::Redirect {
        redirect_uri: redirect_uri.to_owned(),
        error,
        description,
        state: state.clone(),
    };
    if params.repeated() {
        return Err(refuse("invalid_request", "a parameter is given twice"));
    }
    match params.single("response_type") {
        Some("code") => {}
        Some(_) => {
            return Err(refuse(
                "unsupported_response_type",
                "only response_type=code is supported",
            ))
        }
        None => return Err(refuse("invalid_request", "response_type is missing")),
    }
    let scope = params.single("scope").unwrap_or("");
    if !scope.split(' ').any(|s| s == "openid") {
        return Err(refuse("invalid_scope", "scope must include openid"));
    }
    if params.single("code_challenge_method") != Some("S256") {
        return Err(refuse(
            "invalid_request",
            "PKCE is required: code_challenge_method=S256",
        ));
    }
    let challenge = params.single("code_challenge").unwrap_or("");
    if !is_s256_challenge(challenge) {
        return Err(refuse(
            "invalid_request",
            "code_challenge must be 43 base64url characters",
        ));
    }
    let nonce = params.single("nonce").map(str::to_owned);
    let too_long = |v: &Option<String>| v.as_ref().is_some_and(|v| v.len() > MAX_STATE_LEN);
    if too_long(&state) || too_long(&nonce) {
        return Err(refuse("invalid_request", "state or nonce is too long"));
    }
    Ok(Request {
        client_id: client_id.to_owned(),
        redirect_uri: redirect_uri.to_owned(),
        state,
        nonce,
        code_challenge: challenge.to_owned(),
    })
}

/// Where a granted request sends the visitor: the redirect URI with `code` and `state`.
pub fn success_location(request: &Request, code: &str) -> String {
    let mut params = vec![("code", code)];
    if let Some(state) = &request.state {
        params.push(("state", state));
    }
    with_query(&request.redirect_uri, &params)
}

/// `uri` with `params` form-encoded onto its query (`&` when it has one already).
fn with_query(uri: &str, params: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in params {
        query.append_pair(name, value);
    }
    let sep = match uri.contains('?') {
        true if uri.ends_with('?') || uri.ends_with('&') => "",
        true => "&",
        false => "?",
    };
    format!("{uri}{sep}{}", query.finish())
}

/// A PKCE S256 challenge: base64url of a SHA-256 digest, without padding.
fn is_s256_challenge(s: &str) -> bool {
    s.len() == 43
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A query's parameters, decoded; names given more than once are remembered as such.
struct Params {
    values: HashMap<String, Option<String>>,
}

impl Params {
    fn read(query: &str) -> Params {
        let mut values: HashMap<String, Option<String>> = HashMap::new();
        for (name, value) in form_urlencoded::parse(query.as_bytes()).take(64) {
            values
                .entry(name.into_owned())
                .and_modify(|v| *v = None)
                .or_insert_with(|| Some(value.into_owned()));
        }
        Params { values }
    }

    /// The value of `name` when it is given once (and not empty).
    fn single(&self, name: &str) -> Option<&str> {
        self.values.get(name)?.as_deref().filter(|v| !v.is_empty())
    }

    /// Some parameter is given more than once.
    fn repeated(&self) -> bool {
        self.values.values().any(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oidc::testing::config;

    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    fn query(extra: &str) -> String {
        format!(
            "response_type=code&client_id=app&redirect_uri=https%3A%2F%2Fapp.example%2Fcb\
             &scope=openid%20profile&state=st%26x&nonce=n1&code_challenge={CHALLENGE}\
             &code_challenge_method=S256{extra}"
        )
    }

    #[test]
    fn a_good_request_goes_on_and_comes_back_with_its_code_and_state() {
        let r = check(Some(&query("")), &config()).unwrap();
        assert_eq!(r.redirect_uri, "https://app.example/cb");
        assert_eq!(r.state.as_deref(), Some("st&x"));
        assert_eq!(r.nonce.as_deref(), Some("n1"));
        assert_eq!(
            success_location(&r, "c.d.e"),
            "https://app.example/cb?code=c.d.e&state=st%26x"
        );
        let q = query("").replace("cb&", "cb%3Fx%3D1&");
        let r = check(Some(&q), &config()).unwrap();
        assert_eq!(
            success_location(&r, "c"),
            "https://app.example/cb?x=1&code=c&state=st%26x"
        );
    }

    #[test]
    fn an_unknown_client_or_redirect_uri_is_never_redirected() {
        let cases = [
            query("").replace("client_id=app", "client_id=stranger"),
            query("").replace("client_id=app&", ""),
            query("").replace("app.example%2Fcb", "evil.example%2Fcb"),
            query("").replace("app.example%2Fcb", "app.example%2Fcb%2Fmore"),
            query("&redirect_uri=https%3A%2F%2Fapp.example%2Fcb"),
            String::new(),
        ];
        for q in cases {
            let refusal = check(Some(&q), &config()).unwrap_err();
            assert!(matches!(refusal, Refusal::Unregistered(_)), "{q}");
            assert_eq!(refusal.location(), None);
        }
    }

    #[test]
    fn other_mistakes_go_back_to_the_client_with_an_error_and_the_state() {
        let cases = [
            (
                "response_type=code",
                "response_type=token",
                "unsupported_response_type",
            ),
            ("response_type=code&", "", "invalid_request"),
            ("scope=openid%20profile", "scope=profile", "invalid_scope"),
            (
                "code_challenge_method=S256",
                "code_challenge_method=plain",
                "invalid_request",
            ),
            ("&code_challenge_method=S256", "", "invalid_request"),
            (CHALLENGE, "short", "invalid_request"),
            ("nonce=n1", "nonce=n1&nonce=n2", "invalid_request"),
        ];
        for (from, to, error) in cases {
            let q = query("").replace(from, to);
            let refusal = check(Some(&q), &config()).unwrap_err();
            let location = refusal.location().unwrap_or_else(|| panic!("{q}"));
            assert!(
                location.starts_with(&format!("https://app.example/cb?error={error}&")),
                "{q}: {location}"
            );
            assert!(location.ends_with("&state=st%26x"), "{location}");
        }
    }
}
