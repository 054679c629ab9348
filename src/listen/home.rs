//! A client connection registered with the reactor of the worker thread that serves it.
//!
//! Without work stealing, each worker thread is a tokio runtime of its own, with its own
//! reactor. Pingora accepts on one of them and hands each connection to a random one, but the
//! socket stays registered with the acceptor's reactor. So for every read and write readiness of
//! that connection, the accepting thread wakes up, then wakes the serving thread: two threads and
//! a cross-thread wake-up per readiness, for (N − 1)/N of the connections at N threads.
//!
//! [`rehome`] duplicates the socket, registers the duplicate with the serving thread's reactor,
//! and closes the original. Dropping the original deregisters it from the acceptor's epoll
//! before closing, so the acceptor hears nothing more of the connection. That costs four system
//! calls once per connection (`dup`, `epoll_ctl` twice, `close`), not per request, and tokio
//! does not take the new registration for readable until its reactor says so. The edge
//! therefore re-registers a plain connection only when it comes back for a second request.
//!
//! An `L4Stream` built from a socket has no write buffer. Pingora sizes a listener's buffer
//! only inside its own crate. So [`Homed`] puts one in front, of the listener's size:
//! a response's head and body still leave in one `write`.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, Peek, Shutdown, SocketDigest, Stream};
use tokio::io::{AsyncRead, AsyncWriteExt, BufWriter, ReadBuf};

/// A TCP connection registered with this thread's reactor, behind a write buffer that
/// [`flush`](AsyncWriteExt::flush) empties (Pingora flushes after each response head and body).
#[derive(Debug)]
pub struct Homed {
    inner: BufWriter<L4Stream>,
}

impl Homed {
    fn io(&self) -> &L4Stream {
        self.inner.get_ref()
    }

    fn io_mut(&mut self) -> &mut L4Stream {
        self.inner.get_mut()
    }

    /// Puts `data` back in front of what the connection reads next.
    pub fn rewind(&mut self, data: &[u8]) {
        self.inner.get_mut().rewind(data);
    }
}

/// `stream`, registered with the reactor of the thread this runs on. Anything but a plain TCP
/// connection (a Unix socket, a stream already wrapped) comes back as it was. `None` when the
/// socket cannot be duplicated or registered: the connection is then closed.
pub fn rehome(stream: Stream, write_buffer: usize) -> Option<Stream> {
    let digest = stream
        .get_socket_digest()
        .filter(|d| matches!(d.peer_addr(), Some(PeerAddr::Inet(_))));
    let Some(digest) = digest.filter(|_| stream.as_any().is::<L4Stream>()) else {
        return Some(stream);
    };
    let old = stream.into_any().downcast::<L4Stream>().ok()?;
    // SAFETY: `old` owns this descriptor and stays alive until the duplicate exists.
    let fd = unsafe { BorrowedFd::borrow_raw(old.as_raw_fd()) };
    let dup = match fd.try_clone_to_owned() {
        Ok(dup) => dup,
        Err(e) => {
            log::warn!("duplicating a client socket: {e}");
            return None;
        }
    };
    // The duplicate shares the open file, and with it O_NONBLOCK and every socket option the
    // listener set (TCP keepalive, no delay).
    let tcp = match tokio::net::TcpStream::from_std(std::net::TcpStream::from(dup)) {
        Ok(tcp) => tcp,
        Err(e) => {
            log::warn!("registering a client socket: {e}");
            return None;
        }
    };
    let established = old.established_ts;
    // Deregisters from the accepting reactor, then closes the original descriptor.
    drop(old);
    let mut new = L4Stream::from(tcp);
    new.established_ts = established;
    // The addresses the digest already holds stay: they are the same socket's.
    new.set_socket_digest(rebound(&digest, new.as_raw_fd()));
    Some(Box::new(Homed {
        inner: BufWriter::with_capacity(write_buffer, new),
    }))
}

/// A copy of `digest` for the descriptor `fd`, with the addresses it had already looked up.
fn rebound(digest: &SocketDigest, fd: std::os::fd::RawFd) -> SocketDigest {
    let new = SocketDigest::from_raw_fd(fd);
    if let Some(peer) = digest.peer_addr.get() {
        let _ = new.peer_addr.set(peer.clone());
    }
    if let Some(local) = digest.local_addr.get() {
        let _ = new.local_addr.set(local.clone());
    }
    new
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
    use std::io::{Read, Write};
    use std::sync::mpsc;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    /// A client socket and the server side of it as Pingora's listener hands it over: an L4
    /// stream with a socket digest, registered with the reactor of a runtime on another
    /// thread. That thread then stops driving its reactor until `release` is sent.
    fn accepted_elsewhere() -> (std::net::TcpStream, Stream, mpsc::Sender<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let (tx, rx) = mpsc::channel();
        let (release, held) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let stream: Stream = rt.block_on(async {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let (tcp, _) = listener.accept().await.unwrap();
                let mut l4 = L4Stream::from(tcp);
                let digest = SocketDigest::from_raw_fd(l4.as_raw_fd());
                l4.set_socket_digest(digest);
                Box::new(l4)
            });
            tx.send(stream).unwrap();
            // The runtime stays alive, its reactor unpolled, like a busy accepting thread.
            let _ = held.recv_timeout(Duration::from_secs(30));
            drop(rt);
        });
        let client = std::net::TcpStream::connect(addr).unwrap();
        let stream = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        (client, stream, release)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Reads what the client sent within `wait`: `None` if nothing was read in time.
    fn read_within(
        rt: &tokio::runtime::Runtime,
        stream: &mut Stream,
        wait: Duration,
    ) -> Option<Vec<u8>> {
        rt.block_on(async {
            let mut buf = vec![0u8; 64];
            let n = tokio::time::timeout(wait, stream.read(&mut buf))
                .await
                .ok()?
                .ok()?;
            buf.truncate(n);
            Some(buf)
        })
    }

    /// The client sends two requests, one after the other has been read: what the server reads
    /// of each. Tokio takes a just-accepted socket for readable, so the first read tries the
    /// socket whichever reactor it is registered with; the second, like every later request
    /// on a kept-alive connection, waits for that reactor to report the bytes.
    fn two_requests(
        rt: &tokio::runtime::Runtime,
        client: &mut std::net::TcpStream,
        stream: &mut Stream,
        wait: Duration,
    ) -> [Option<Vec<u8>>; 2] {
        client.write_all(b"GET /1 HTTP/1.1\r\n").unwrap();
        let first = read_within(rt, stream, Duration::from_secs(10));
        client.write_all(b"GET /2 HTTP/1.1\r\n").unwrap();
        [first, read_within(rt, stream, wait)]
    }

    #[test]
    fn a_rehomed_connection_is_read_on_the_thread_that_serves_it() {
        let rt = runtime();
        let (mut client, stream, release) = accepted_elsewhere();
        let _enter = rt.enter();
        let mut stream = rehome(stream, 8192).expect("a TCP stream is re-registered");
        assert!(stream.as_any().is::<Homed>());
        let [first, second] = two_requests(&rt, &mut client, &mut stream, Duration::from_secs(10));
        assert_eq!(first.as_deref(), Some(&b"GET /1 HTTP/1.1\r\n"[..]));
        assert_eq!(second.as_deref(), Some(&b"GET /2 HTTP/1.1\r\n"[..]));
        // The peer's address is still known, for identity and X-Forwarded-For.
        let peer = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().cloned());
        assert_eq!(
            peer.and_then(|p| p.as_inet().copied()),
            Some(client.local_addr().unwrap())
        );
        let _ = release.send(());
    }

    #[test]
    fn left_where_it_was_accepted_a_read_waits_for_the_other_thread() {
        // The control of the test above: without re-registration the second read depends on
        // the accepting thread's reactor, and stalls while that thread does not poll it.
        let rt = runtime();
        let (mut client, mut stream, release) = accepted_elsewhere();
        let [first, second] =
            two_requests(&rt, &mut client, &mut stream, Duration::from_millis(300));
        assert_eq!(first.as_deref(), Some(&b"GET /1 HTTP/1.1\r\n"[..]));
        assert_eq!(second, None);
        let _ = release.send(());
    }

    #[test]
    fn a_head_and_body_leave_together_at_the_flush() {
        let rt = runtime();
        let (mut client, stream, release) = accepted_elsewhere();
        let _enter = rt.enter();
        let mut stream = rehome(stream, 8192).unwrap();
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
        let _ = release.send(());
    }

    #[test]
    fn a_unix_or_wrapped_stream_is_left_as_it_was() {
        let rt = runtime();
        let _enter = rt.enter();
        let (a, _b) = tokio::net::UnixStream::pair().unwrap();
        let unix: Stream = Box::new(L4Stream::from(a));
        let back = rehome(unix, 8192).unwrap();
        assert!(back.as_any().is::<L4Stream>());
    }
}
