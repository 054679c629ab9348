//! The proxy's unit tests: resets, the context's size, forwarded headers.

use super::*;

#[test]
fn only_a_clients_reset_counts_as_one() {
    let closed = || Error::explain(ErrorType::H2Error, "Client closed H2, reason: CANCEL");
    // As Pingora reports it: the idle watch's error, wrapped in the origin peer's context.
    let wrapped = Error::because(ErrorType::H2Error, "Peer: addr: 127.0.0.1:1", closed());
    assert!(reset_by_client(&wrapped.into_down()));
    assert!(reset_by_client(&closed().into_down()));
    // The origin's side of things is never the client's reset.
    assert!(!reset_by_client(&closed().into_up()));
    // A lost connection: an I/O error under the idle watch's, or a read error.
    let idle = Error::because(
        ErrorType::H2Error,
        "downstream error while idling",
        std::io::Error::from(std::io::ErrorKind::BrokenPipe),
    );
    assert!(!reset_by_client(&idle.into_down()));
    let read = Error::because(
        ErrorType::ReadError,
        "while reading downstream request body",
        std::io::Error::from(std::io::ErrorKind::ConnectionReset),
    );
    assert!(!reset_by_client(&read.into_down()));
    assert!(!reset_by_client(
        &Error::explain(ErrorType::ConnectionClosed, "downstream closed").into_down()
    ));
    // An h2 error that is the server's own (not a reset the client sent).
    let local = Error::because(
        ErrorType::H2Error,
        "write",
        h2::Error::from(h2::Reason::ENHANCE_YOUR_CALM),
    );
    assert!(!reset_by_client(&local.into_down()));
}

/// Pingora keeps three copies of the context in the per-request future it boxes (and so
/// copies) for every request: the context must stay one pointer there, however
/// `RequestCtx` grows.
#[test]
fn the_request_context_is_one_pointer_in_pingoras_future() {
    assert_eq!(
        std::mem::size_of::<<Proxy as ProxyHttp>::CTX>(),
        std::mem::size_of::<usize>()
    );
}

#[test]
fn forwarded_for_trust() {
    let mut req = RequestHeader::build("GET", b"/", None).unwrap();
    req.append_header("x-forwarded-for", "6.6.6.6").unwrap();
    req.append_header("x-forwarded-for", "7.7.7.7").unwrap();
    let peer: IpAddr = "10.0.0.1".parse().unwrap();
    let mut trusted = req.clone();
    set_forwarded_for(&mut trusted, peer, true).unwrap();
    assert_eq!(
        trusted
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .collect::<Vec<_>>(),
        ["6.6.6.6, 7.7.7.7, 10.0.0.1"]
    );
    set_forwarded_for(&mut req, peer, false).unwrap();
    assert_eq!(
        req.headers
            .get_all("x-forwarded-for")
            .iter()
            .collect::<Vec<_>>(),
        ["10.0.0.1"]
    );
}

#[test]
fn internal_headers_are_stripped() {
    let mut req = RequestHeader::build("GET", b"/", None).unwrap();
    req.append_header("Vestibule-Command", "revoke").unwrap();
    req.append_header("vestibule-decision", "allow").unwrap();
    req.append_header("Vestibule_X", "1").unwrap();
    req.append_header("vestibule_command", "revoke").unwrap();
    req.append_header("x-keep", "1").unwrap();
    req.append_header("vestibulex", "1").unwrap();
    strip_internal_headers(&mut req);
    assert_eq!(req.headers.len(), 2);
    assert!(req.headers.contains_key("x-keep"));
    assert!(req.headers.contains_key("vestibulex"));
}

#[test]
fn content_length_becomes_one_value() {
    let mut req = RequestHeader::build("POST", b"/", None).unwrap();
    req.append_header("content-length", "3, 3").unwrap();
    single_content_length(&mut req).unwrap();
    assert_eq!(req.headers.get_all("content-length").iter().count(), 1);
    assert_eq!(req.headers["content-length"], "3");
    req.append_header("content-length", "3").unwrap();
    single_content_length(&mut req).unwrap();
    assert_eq!(req.headers["content-length"], "3");
    req.append_header("content-length", "4").unwrap();
    assert!(single_content_length(&mut req).is_err());
}
