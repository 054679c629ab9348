//! An HTTP/2 request body that ends with an empty DATA frame (END_STREAM on no data, as
//! `curl -T -` and most streaming clients send it) reaches an HTTP/1.1 origin as one chunked
//! body with one terminator, and the pooled origin connection stays in step: the next request on
//! it gets its own answer (cloudflare/pingora#935).

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;

/// POSTs.
const POSTS: usize = 5;

/// Sends `request` with `body` in one DATA frame and then an empty DATA frame with END_STREAM;
/// returns the answer's status and body.
async fn post_split(
    h2: &mut h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    body: &'static [u8],
) -> (u16, String) {
    let (response, mut stream) = h2.send_request(request, false).expect("stream opens");
    stream
        .send_data(Bytes::from_static(body), false)
        .expect("data");
    stream.send_data(Bytes::new(), true).expect("empty end");
    read_answer(response).await
}

async fn read_answer(response: h2::client::ResponseFuture) -> (u16, String) {
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("an answer within 10 s")
        .expect("an answer");
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), body.data())
        .await
        .expect("the body within 10 s")
    {
        let chunk = chunk.expect("body data");
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&text).into_owned())
}

/// What the client saw: for each round, the POST's answer and the GET's after it.
async fn rounds(proxy: SocketAddr) -> Vec<((u16, String), (u16, String))> {
    let tcp = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connect");
    let (mut h2, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
    let driver = tokio::spawn(conn);
    let mut seen = Vec::new();
    for i in 0..POSTS {
        let post = http::Request::post(format!("http://{proxy}/upload?i={i}"))
            .body(())
            .unwrap();
        let posted = post_split(&mut h2, post, b"hello").await;
        // The next request on the same origin connection: it must get its own answer, not a
        // 400 the origin wrote for stray bytes.
        let get = http::Request::get(format!("http://{proxy}/after?i={i}"))
            .body(())
            .unwrap();
        let (response, _) = h2.send_request(get, true).expect("stream opens");
        let got = read_answer(response).await;
        seen.push((posted, got));
    }
    drop(h2);
    driver.abort();
    seen
}

#[test]
fn a_body_ended_by_an_empty_data_frame_reaches_the_origin_once() {
    let origin = RawOrigin::start();
    // One worker thread: one pool of origin connections, so each GET follows its POST on the
    // connection the POST used.
    let v = Setup::new(origin.addr)
        .threads(1)
        .server("h2c = true")
        .upstream_extra("health_check = \"0s\"\n")
        .start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let seen = rt.block_on(rounds(v.proxy));

    for (i, ((post_status, post_body), (get_status, get_body))) in seen.iter().enumerate() {
        assert_eq!(*post_status, 200, "POST {i}: {post_body}");
        assert!(
            post_body.ends_with(&format!(" POST /upload?i={i} 5")),
            "POST {i} was answered with {post_body:?}"
        );
        assert_eq!(*get_status, 200, "GET {i} after the POST: {get_body}");
        assert!(
            get_body.ends_with(&format!(" GET /after?i={i} 0")),
            "GET {i} after the POST was answered with {get_body:?}"
        );
    }
    assert_eq!(
        origin.malformed(),
        0,
        "the origin read stray bytes as a request"
    );
    assert_eq!(origin.requests(), 2 * POSTS as u64);
    // Each POST's body is one chunk and one terminator, and nothing follows it.
    let received = origin.received().concat();
    let terminators = received
        .windows(7)
        .filter(|w| *w == b"\r\n0\r\n\r\n")
        .count();
    assert_eq!(terminators, POSTS, "{}", String::from_utf8_lossy(&received));
    let chunks = received
        .windows(12)
        .filter(|w| *w == b"\r\n5\r\nhello\r\n")
        .count();
    assert_eq!(chunks, POSTS);
    // The connection stayed in step, so it was reused rather than replaced.
    assert_eq!(origin.connections(), 1, "origin connections");
    assert!(!v.log_text().contains("panicked"));
}
