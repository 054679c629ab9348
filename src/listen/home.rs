//! A client connection as the edge serves it: accepted by the worker thread that serves it
//! ([`super::threads`]), so its socket is registered with that thread's reactor, behind a write
//! buffer of its own.
//!
//! An `L4Stream` built from a socket has no write buffer: Pingora sizes a listener's buffer only
//! inside its own crate. So [`Homed`] puts one in front, of the listener's size, and a
//! response's head and body still leave in one `write`.

use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{Peek, Shutdown};
use tokio::io::{AsyncRead, AsyncWriteExt, BufWriter, ReadBuf};

/// A TCP connection registered with this thread's reactor, behind a write buffer that
/// [`flush`](AsyncWriteExt::flush) empties (Pingora flushes after each response head and body).
#[derive(Debug)]
pub struct Homed {
    inner: BufWriter<L4Stream>,
}

impl Homed {
    /// `stream` behind a write buffer of `write_buffer` bytes.
    pub fn new(stream: L4Stream, write_buffer: usize) -> Homed {
        Homed {
            inner: BufWriter::with_capacity(write_buffer, stream),
        }
    }

    fn io(&self) -> &L4Stream {
        self.inner.get_ref()
    }

    fn io_mut(&mut self) -> &mut L4Stream {
        self.inner.get_mut()
    }

    /// Puts `data` back in front of what the connection reads next.
    pub(crate) fn rewind(&mut self, data: &[u8]) {
        self.inner.get_mut().rewind(data);
    }
}

impl AsyncRead for Homed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // BufWriter reads straight from the stream under it.
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

forward_async_write!(Homed, inner);

#[async_trait]
impl Shutdown for Homed {
    async fn shutdown(&mut self) {
        if let Err(e) = AsyncWriteExt::shutdown(&mut self.inner).await {
            log::debug!("shutting a client connection down: {e}");
        }
    }
}

forward_digests!(Homed, io, io_mut);

#[async_trait]
impl Peek for Homed {
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        self.inner.get_mut().try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pingora::protocols::Stream;
    use std::io::Read;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn a_head_and_body_leave_together_at_the_flush() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let _enter = rt.enter();
        let tcp = tokio::net::TcpStream::from_std(server).unwrap();
        let mut stream: Stream = Box::new(Homed::new(L4Stream::from(tcp), 8192));
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        rt.block_on(async {
            stream.write_all(head).await.unwrap();
            stream.write_all(b"hello").await.unwrap();
        });
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 256];
        assert!(
            client.read(&mut buf).is_err(),
            "nothing is sent before the flush"
        );
        rt.block_on(stream.flush()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let n = client.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[&head[..], b"hello"].concat()[..]);
    }
}
