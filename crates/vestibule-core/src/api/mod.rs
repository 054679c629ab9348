//! The API's routes: which endpoint a request for a reserved path names.
//!
//! Everything under `[server] api_prefix` (`/.vestibule` unless set) is the API's, on every
//! proxy listener: the decision answers it [`Answer::Api`](crate::decide::Answer::Api) and it is
//! never forwarded, whatever the endpoint and whether or not one serves it. The JWT keys are
//! also published at the well-known path gateways look for ([`WELL_KNOWN_JWKS`]).

pub mod queue;

use crate::path::RequestPath;

/// Where gateways look for an issuer's keys (RFC 8615's well-known folder).
pub const WELL_KNOWN_JWKS: &str = "/.well-known/jwks.json";

/// What a request for the API asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `{api_prefix}/jwks.json` or [`WELL_KNOWN_JWKS`]: the public keys of the JWTs
    /// (RFC 7517).
    Jwks,
    /// `{api_prefix}/rooms/<room>/...`: one room's queue.
    Room(String, RoomEndpoint),
    /// `{api_prefix}/oidc/...`: the OpenID Provider (`[oidc]`, see [`crate::oidc`]).
    Oidc(OidcEndpoint),
    /// A path under the prefix that no endpoint serves (answered with a JSON 404).
    Unknown,
}

/// What a request asks of one room's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoomEndpoint {
    /// `queue`: get in line (POST).
    Queue,
    /// `queue/<request_id>`: where a request stands (GET).
    Request(String),
    /// `serving`: the serving counter (GET).
    Serving,
    /// `waiting`: how many wait (GET).
    Waiting,
    /// `token`: a request's JWT (POST).
    Token,
    /// `draws/<event>`: an event's verifiable draw (GET); served whether or not the room has
    /// the queue API.
    Draw(String),
    /// `stream`: a waiting visitor's server-sent events, `estimate` updates and their `turn`
    /// (GET); served whether or not the room has the queue API.
    Stream,
}

/// What a request asks of the OpenID Provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OidcEndpoint {
    /// `.well-known/openid-configuration`: the discovery document (GET).
    Discovery,
    /// `authorize`: sign in, that is wait in the room (GET).
    Authorize,
    /// `token`: a code traded for tokens (POST).
    Token,
    /// `jwks`: the public keys of the tokens (GET).
    Jwks,
}

impl OidcEndpoint {
    /// The endpoint `rest` (what follows `/oidc/`) names.
    fn at(rest: &str) -> Option<OidcEndpoint> {
        Some(match rest {
            ".well-known/openid-configuration" => OidcEndpoint::Discovery,
            "authorize" => OidcEndpoint::Authorize,
            "token" => OidcEndpoint::Token,
            "jwks" => OidcEndpoint::Jwks,
            _ => return None,
        })
    }
}

impl Endpoint {
    /// The `endpoint` label of the API's metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Endpoint::Jwks => "jwks",
            Endpoint::Room(_, RoomEndpoint::Queue) => "queue",
            Endpoint::Room(_, RoomEndpoint::Request(_)) => "queue_status",
            Endpoint::Room(_, RoomEndpoint::Serving) => "serving",
            Endpoint::Room(_, RoomEndpoint::Waiting) => "waiting",
            Endpoint::Room(_, RoomEndpoint::Token) => "token",
            Endpoint::Room(_, RoomEndpoint::Draw(_)) => "draw",
            Endpoint::Room(_, RoomEndpoint::Stream) => "stream",
            Endpoint::Oidc(_) => "oidc",
            Endpoint::Unknown => "unknown",
        }
    }

    /// The room it names, if any.
    pub fn room(&self) -> Option<&str> {
        match self {
            Endpoint::Room(room, _) => Some(room),
            _ => None,
        }
    }
}

/// The room endpoint `rest` (what follows `/rooms/`) names.
fn room_endpoint(rest: &str) -> Option<Endpoint> {
    let (room, what) = rest.split_once('/')?;
    if room.is_empty() || room.len() > 64 {
        return None;
    }
    let what = match what {
        "queue" => RoomEndpoint::Queue,
        "serving" => RoomEndpoint::Serving,
        "waiting" => RoomEndpoint::Waiting,
        "token" => RoomEndpoint::Token,
        "stream" => RoomEndpoint::Stream,
        _ => match (what.strip_prefix("queue/"), what.strip_prefix("draws/")) {
            (Some(id), _) if !id.is_empty() && id.len() <= 200 && !id.contains('/') => {
                RoomEndpoint::Request(id.to_owned())
            }
            (_, Some(event)) if !event.is_empty() && event.len() <= 64 && !event.contains('/') => {
                RoomEndpoint::Draw(event.to_owned())
            }
            _ => return None,
        },
    };
    Some(Endpoint::Room(room.to_owned(), what))
}

/// The `request_id` a stream's query names (`stream?request_id=<id>`): an API client's request
/// rather than a browser's cookie. Request ids need no escaping: a value with `%` is none of
/// ours, and neither is an empty or overlong one.
pub fn stream_request_id(query: &str) -> Option<&str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("request_id="))
        .filter(|v| !v.is_empty() && v.len() <= 200 && !v.contains('%'))
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
        _ => match rest.strip_prefix("/oidc/") {
            Some(oidc) => OidcEndpoint::at(oidc).map_or(Endpoint::Unknown, Endpoint::Oidc),
            None => rest
                .strip_prefix("/rooms/")
                .and_then(room_endpoint)
                .unwrap_or(Endpoint::Unknown),
        },
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
    fn a_stream_names_its_request_id_plainly() {
        assert_eq!(
            at("/.vestibule/rooms/sale/stream"),
            Some(Endpoint::Room("sale".into(), RoomEndpoint::Stream))
        );
        assert_eq!(stream_request_id("request_id=r.1-A_b"), Some("r.1-A_b"));
        assert_eq!(stream_request_id("x=1&request_id=abc&y"), Some("abc"));
        for none in [
            "",
            "request_id=",
            "request_id=a%2Fb",
            "id=1",
            "xrequest_id=1",
        ] {
            assert_eq!(stream_request_id(none), None, "{none}");
        }
        assert_eq!(
            stream_request_id(&format!("request_id={}", "a".repeat(201))),
            None
        );
    }

    #[test]
    fn room_endpoints_name_their_room_and_request() {
        let room = |what| Some(Endpoint::Room("sale".into(), what));
        assert_eq!(
            at("/.vestibule/rooms/sale/queue"),
            room(RoomEndpoint::Queue)
        );
        assert_eq!(
            at("/.vestibule/rooms/sale/serving"),
            room(RoomEndpoint::Serving)
        );
        assert_eq!(
            at("/.vestibule/rooms/sale/waiting"),
            room(RoomEndpoint::Waiting)
        );
        assert_eq!(
            at("/.vestibule/rooms/sale/token"),
            room(RoomEndpoint::Token)
        );
        assert_eq!(
            at("/.vestibule/rooms/sale/queue/1.2.ab"),
            room(RoomEndpoint::Request("1.2.ab".into()))
        );
        assert_eq!(at("/.vestibule/rooms/sale/queue/"), Some(Endpoint::Unknown));
        assert_eq!(
            at("/.vestibule/rooms/sale/queue/a/b"),
            Some(Endpoint::Unknown)
        );
        assert_eq!(at("/.vestibule/rooms//queue"), Some(Endpoint::Unknown));
        assert_eq!(
            at("/.vestibule/rooms/sale/queue/1.2.ab").unwrap().as_str(),
            "queue_status"
        );
    }

    #[test]
    fn oidc_endpoints_sit_under_the_prefix() {
        let oidc = |e| Some(Endpoint::Oidc(e));
        assert_eq!(
            at("/.vestibule/oidc/.well-known/openid-configuration"),
            oidc(OidcEndpoint::Discovery)
        );
        assert_eq!(
            at("/.vestibule/oidc/authorize"),
            oidc(OidcEndpoint::Authorize)
        );
        assert_eq!(at("/.vestibule/oidc/token"), oidc(OidcEndpoint::Token));
        assert_eq!(at("/.vestibule/oidc/jwks"), oidc(OidcEndpoint::Jwks));
        assert_eq!(at("/.vestibule/oidc/other"), Some(Endpoint::Unknown));
        assert_eq!(at("/.vestibule/oidc"), Some(Endpoint::Unknown));
        assert_eq!(at("/.vestibule/oidc/token").unwrap().as_str(), "oidc");
    }

    #[test]
    fn the_prefix_is_reserved_whole_and_only_whole() {
        assert_eq!(at("/.vestibule/jwks.json"), Some(Endpoint::Jwks));
        assert_eq!(at("/.well-known/jwks.json"), Some(Endpoint::Jwks));
        assert_eq!(at("/.vestibule"), Some(Endpoint::Unknown));
        assert_eq!(at("/.vestibule/"), Some(Endpoint::Unknown));
        assert_eq!(at("/.vestibule/rooms/sale"), Some(Endpoint::Unknown));
        assert_eq!(at("/.vestibule/rooms/sale/other"), Some(Endpoint::Unknown));
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
