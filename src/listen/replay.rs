//! A connection with bytes already read put back in front: what the edge uses to hand a TLS
//! connection to Pingora's HTTP/2 loop after reading the client's preface itself (within
//! `header_timeout`, which the HTTP/2 handshake alone does not bound).

use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use bytes::{Buf, Bytes};
use pingora::protocols::{Peek, Shutdown, Stream, IO};
use tokio::io::{AsyncRead, ReadBuf};

/// `inner`, read as `early` followed by whatever `inner` reads next.
#[derive(Debug)]
pub struct Replay {
    early: Bytes,
    inner: Stream,
}

impl Replay {
    pub fn new(inner: Stream, early: Bytes) -> Replay {
        Replay { early, inner }
    }

    fn io(&self) -> &dyn IO {
        &*self.inner
    }

    fn io_mut(&mut self) -> &mut dyn IO {
        &mut *self.inner
    }
}

impl AsyncRead for Replay {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.early.is_empty() {
            let n = self.early.len().min(buf.remaining());
            buf.put_slice(&self.early[..n]);
            self.early.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

forward_async_write!(Replay, inner);

#[async_trait]
impl Shutdown for Replay {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

forward_digests!(Replay, io, io_mut);

#[async_trait]
impl Peek for Replay {}
