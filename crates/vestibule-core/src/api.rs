//! The API's routes: which endpoint a request for a reserved path names.
//!
//! Everything under `[server] api_prefix` (`/.vestibule` unless set) is the API's, on every
//! proxy listener: the decision answers it [`Answer::Api`](crate::decide::Answer::Api) and it is
//! never forwarded, whatever the endpoint and whether or not one serves it. The JWT keys are
//! also published at the well-known path gateways look for ([`WELL_KNOWN_JWKS`]).

use crate::path::RequestPath;

/// Where gateways look for an issuer's keys (RFC 8615's well-known folder).
pub const WELL_KNOWN_JWKS: &str = "/.well-known/jwks.json";

/// What a request for the API asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `{api_prefix}/jwks.json` or [`WELL_KNOWN_JWKS`]: the public keys of the JWTs
    /// (RFC 7517).
    Jwks,
    /// A path under the prefix that no endpoint serves (answered with a JSON 404).
    Unknown,
}

impl Endpoint {
    /// The `endpoint` label of the API's metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Jwks => "jwks",
            Endpoint::Unknown => "unknown",
        }
    }
}

/// The endpoint `path` names, or `None` when the API has nothing to say about it (the request
/// goes on to the rooms and the origin). `prefix` is `[server] api_prefix`; `jwks` says whether
/// JWT keys are published, and only then is [`WELL_KNOWN_JWKS`] taken from the origin (which
/// may serve its own there).
pub fn route(path: &RequestPath, prefix: &str, jwks: bool) -> Option<Endpoint> {
    if jwks && path.as_str() == WELL_KNOWN_JWKS {
        return Some(Endpoint::Jwks);
    }
    if !path.may_be_in(prefix) {
        return None;
    }
    let rest = path.as_str().get(prefix.len()..).unwrap_or("");
    Some(match rest {
        "/jwks.json" => Endpoint::Jwks,
        _ => Endpoint::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::normalize;

    fn at(path: &str) -> Option<Endpoint> {
        route(&normalize(path).unwrap(), "/.vestibule", true)
    }

    #[test]
    fn the_prefix_is_reserved_whole_and_only_whole() {
        assert_eq!(at("/.vestibule/jwks.json"), Some(Endpoint::Jwks));
        assert_eq!(at("/.well-known/jwks.json"), Some(Endpoint::Jwks));
        assert_eq!(at("/.vestibule"), Some(Endpoint::Unknown));
        assert_eq!(at("/.vestibule/"), Some(Endpoint::Unknown));
        assert_eq!(at("/.vestibule/rooms/sale/queue"), Some(Endpoint::Unknown));
        // Another spelling of the same path is still the API's, never the origin's.
        assert_eq!(at("//.vestibule//jwks.json"), Some(Endpoint::Jwks));
        assert_eq!(at("/.vestibule;x=1/jwks.json"), Some(Endpoint::Jwks));
        assert_eq!(at("/.vestibule%2Fjwks.json").map(|_| ()), Some(()));
        assert_eq!(at("/.vestibulex/jwks.json"), None);
        // An origin that reads paths without regard to case must not get it either.
        assert_eq!(at("/.VESTIBULE/jwks.json"), Some(Endpoint::Jwks));
        assert_eq!(at("/.Vestibule/x"), Some(Endpoint::Unknown));
        assert_eq!(at("/"), None);
        assert_eq!(at("/shop/.vestibule/jwks.json"), None);
        // Without JWT keys the well-known path stays the origin's; the prefix stays ours.
        let without = |p: &str| route(&normalize(p).unwrap(), "/.vestibule", false);
        assert_eq!(without("/.well-known/jwks.json"), None);
        assert_eq!(without("/.vestibule/jwks.json"), Some(Endpoint::Jwks));
    }
}
