//! A request body read under a cap: a declared length past it is refused before reading, and
//! a body that grows past it while read is refused as soon as it does. The admin listener and
//! the API both read theirs here.

use http::header;
use pingora::protocols::http::ServerSession;

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Longer than the cap (in bytes).
    TooLong(usize),
    /// The connection failed while it was read.
    Unreadable(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLong(cap) => write!(f, "the body is longer than {cap} bytes"),
            BodyError::Unreadable(e) => write!(f, "the body could not be read: {e}"),
        }
    }
}

/// The body of the request of `session`, at most `cap` bytes.
pub(crate) async fn read(session: &mut ServerSession, cap: usize) -> Result<Vec<u8>, BodyError> {
    let declared = session
        .req_header()
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(BodyError::TooLong(cap));
    }
    let mut body = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > cap {
                    return Err(BodyError::TooLong(cap));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(BodyError::Unreadable(e.to_string())),
        }
    }
}
