//! One listening socket and one accept loop per worker thread: a connection is accepted, served
//! and finished on one thread.
//!
//! Without work stealing, Pingora 0.9.1 runs a listening service on a pool of single-threaded
//! runtimes. It accepts each listener's connections on one of them and spawns every connection
//! onto a random one (`pingora_runtime::current_handle()`). The same call places the task that
//! watches an idle origin connection in the pool, so that task too runs on a random thread. The
//! next request that reuses the connection hands it back through that task: it wakes it, then
//! waits for it to let go. For (N − 1)/N of the requests at N threads, that is two wake-ups
//! across threads, as well as the hop from the accepting thread.
//!
//! Without work stealing, vestibule runs one service of one thread per worker instead
//! ([`ThreadService`]). Each service has its own socket per listen address, bound with
//! `SO_REUSEPORT`, so the kernel spreads new connections over the threads. Each accepts on its
//! own thread and serves the connection there: the socket is registered with that thread's
//! reactor from the start. `current_handle()` of a pool of one thread is that thread, so
//! whatever Pingora spawns for the connection stays there too. With work stealing, one service
//! on a runtime of all the worker threads accepts on one socket per address.
//!
//! [`Sockets`] binds the sockets of a listener kind (plain or TLS) once, for every thread, and
//! names them in Pingora's table of listening sockets (`<address>#<index>`), so an upgrade
//! passes them to the new process like any other.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, SocketDigest, Stream};
use pingora::server::{ListenFds, ShutdownWatch};
use pingora::services::Service;
use socket2::{Domain, Socket, Type};
use tokio::sync::Mutex;

use super::home::Homed;
use crate::config::MAX_THREADS;

/// Pingora's listen backlog (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 65535;
/// As Pingora does, a port still in use (a process that held it is exiting) is tried again
/// every second, this many times in all.
const BIND_TRIES: u32 = 30;

/// A listening socket and the address it listens on.
type Listening = (SocketAddr, std::net::TcpListener);

/// The listening sockets of one kind of listener, for every worker thread: bound once, by
/// whichever thread's service starts first, and handed out by thread.
pub(crate) struct Sockets {
    addrs: Vec<SocketAddr>,
    threads: usize,
    /// How many times a port in use is tried.
    tries: u32,
    /// Per thread, its sockets (address, listener); `None` until bound.
    bound: Mutex<Option<Vec<Vec<Listening>>>>,
}

impl Sockets {
    pub fn new(addrs: Vec<SocketAddr>, threads: usize) -> Arc<Sockets> {
        Arc::new(Sockets {
            addrs,
            threads: threads.max(1),
            tries: BIND_TRIES,
            bound: Mutex::new(None),
        })
    }

    /// Thread `index`'s sockets, bound for every thread on the first call.
    async fn take(&self, index: usize, fds: Option<&ListenFds>) -> std::io::Result<Vec<Listening>> {
        let mut bound = self.bound.lock().await;
        if bound.is_none() {
            let mut per_thread: Vec<Vec<_>> = (0..self.threads).map(|_| Vec::new()).collect();
            for addr in &self.addrs {
                let sockets = self.bind_all(*addr, fds).await.map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))
                })?;
                for (socket, listener) in sockets.into_iter().enumerate() {
                    per_thread[owner(socket, self.threads)].push((*addr, listener));
                }
            }
            *bound = Some(per_thread);
        }
        let all = bound.as_mut().expect("bound above");
        Ok(std::mem::take(&mut all[index]))
    }

    /// Every socket of `addr`: those the process this one upgrades passed on (all of them, even
    /// past this process's thread count, so none is left with connections nobody accepts), then
    /// new ones up to one per thread. New ones join the table for the next upgrade.
    async fn bind_all(
        &self,
        addr: SocketAddr,
        fds: Option<&ListenFds>,
    ) -> std::io::Result<Vec<std::net::TcpListener>> {
        let mut sockets = Vec::new();
        if let Some(fds) = fds {
            let table = fds.lock();
            while let Some(fd) = table.get(&socket_name(addr, sockets.len())) {
                // SAFETY: the table holds the descriptors passed on by the old process; this
                // process takes ownership of each once (one `Sockets` per kind of listener, and
                // each name belongs to one address).
                sockets.push(unsafe { std::net::TcpListener::from_raw_fd(*fd) });
            }
        }
        if sockets.is_empty() {
            // Nothing inherited: the port must be free. Sockets of another process that bound it
            // with SO_REUSEPORT as the same user would otherwise share its connections silently.
            let mut tried = 1;
            while let Err(e) = exclusive_probe(addr) {
                if e.kind() != std::io::ErrorKind::AddrInUse || tried >= self.tries {
                    return Err(e);
                }
                log::warn!("{addr} is in use, will try again");
                tried += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        while sockets.len() < self.threads {
            let listener = bind(addr)?;
            if let Some(fds) = fds {
                fds.lock()
                    .add(socket_name(addr, sockets.len()), listener.as_raw_fd());
            }
            sockets.push(listener);
        }
        Ok(sockets)
    }
}

/// The thread that accepts on socket `socket` of an address: its own index, and the sockets
/// an upgraded-from process had beyond this one's thread count go round the threads.
fn owner(socket: usize, threads: usize) -> usize {
    socket % threads
}

/// The name of socket `index` of `addr` in Pingora's table of listening sockets.
fn socket_name(addr: SocketAddr, index: usize) -> String {
    format!("{addr}#{index}")
}

/// Binds `addr` without `SO_REUSEPORT` for a moment: fails as another socket listens on the
/// port. It does not listen itself, so nothing connects to it: a client that found the port
/// open in between would be refused once it closes.
fn exclusive_probe(addr: SocketAddr) -> std::io::Result<()> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    Ok(())
}

/// A listening socket on `addr` in the `SO_REUSEPORT` group of this process's others.
fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    // SAFETY: the descriptor is handed over from `socket`, which gives it up.
    Ok(unsafe { std::net::TcpListener::from_raw_fd(socket.into_raw_fd()) })
}

/// A listening service: accepts on its sockets and serves each connection with `app` on the
/// runtime that accepted it.
pub(crate) struct ThreadService<A> {
    name: String,
    /// Which share of the [`Sockets`] this service accepts on.
    index: usize,
    /// The threads of its runtime.
    threads: usize,
    sockets: Arc<Sockets>,
    app: Arc<A>,
    /// A connection's write buffer (a head and body leave in one `write`).
    write_buffer: usize,
}

impl<A> ThreadService<A> {
    /// The services of `addrs` for `threads` worker threads: one of one thread per worker
    /// without work stealing; with it, one on a runtime of `threads`, whose threads take work
    /// from each other anyway. Either takes over the sockets of a process it upgrades, whatever
    /// that one's threads were.
    pub fn all(
        name: &str,
        addrs: &[SocketAddr],
        threads: usize,
        work_stealing: bool,
        app: Arc<A>,
        write_buffer: usize,
    ) -> Vec<ThreadService<A>> {
        let services = if work_stealing { 1 } else { threads.max(1) };
        let sockets = Sockets::new(addrs.to_vec(), services);
        (0..services)
            .map(|index| ThreadService {
                name: if services > 1 {
                    format!("{name} {index}")
                } else {
                    name.to_owned()
                },
                index,
                threads: if work_stealing { threads } else { 1 },
                sockets: sockets.clone(),
                app: app.clone(),
                write_buffer,
            })
            .collect()
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> Service for ThreadService<A> {
    async fn start_service(
        &mut self,
        fds: Option<ListenFds>,
        shutdown: ShutdownWatch,
        _listeners_per_fd: usize,
    ) {
        let sockets = match self.sockets.take(self.index, fds.as_ref()).await {
            Ok(sockets) => sockets,
            Err(e) => {
                // As Pingora does when a listener cannot be built: the server cannot serve.
                log::error!("server.listen: {e}");
                std::process::exit(1);
            }
        };
        let loops: Vec<_> = sockets
            .into_iter()
            .map(|(addr, listener)| {
                let app = self.app.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(accept_loop(
                    addr,
                    listener,
                    app,
                    shutdown,
                    self.write_buffer,
                ))
            })
            .collect();
        for l in loops {
            let _ = l.await;
        }
        self.app.cleanup().await;
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn threads(&self) -> Option<usize> {
        Some(self.threads)
    }

    /// The names of every socket an upgraded-from process may pass on for these addresses (it
    /// had at most [`MAX_THREADS`] threads), given by the first service of the group. Pingora
    /// closes the inherited sockets that no service names, such as those of an address no longer
    /// listened on.
    fn listen_addresses(&self) -> Option<Vec<String>> {
        if self.index > 0 {
            return Some(Vec::new());
        }
        Some(
            self.sockets
                .addrs
                .iter()
                .flat_map(|a| (0..MAX_THREADS).map(|i| socket_name(*a, i)))
                .collect(),
        )
    }
}

/// Accepts on `listener` until shutdown; each connection is served by a task on this runtime.
pub(crate) async fn accept_loop<A: ServerApp + Send + Sync + 'static>(
    addr: SocketAddr,
    listener: std::net::TcpListener,
    app: Arc<A>,
    mut shutdown: ShutdownWatch,
    write_buffer: usize,
) {
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            log::error!("server.listen: cannot listen on {addr}: {e}");
            return;
        }
    };
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|down| *down) => break,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let Some(stream) = connection(tcp, peer, write_buffer) else {
                    continue;
                };
                let app = app.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    let mut next = app.process_new(stream, &shutdown).await;
                    while let Some(stream) = next {
                        next = app.process_new(stream, &shutdown).await;
                    }
                });
            }
            Err(e) => {
                log::error!("accept() on {addr} failed: {e}");
                // Out of descriptors: accept() fails at once until some are freed.
                if e.raw_os_error() == Some(24) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

/// An accepted connection as Pingora's listener makes one: no delay, and the peer's address in
/// the socket digest. It has no read buffer: the HTTP/1 parser and rustls read into their own,
/// and an idle connection then holds none (Pingora's default puts 64 KiB in front of every
/// socket). Its write buffer has `write_buffer` bytes.
fn connection(tcp: tokio::net::TcpStream, peer: SocketAddr, write_buffer: usize) -> Option<Stream> {
    if let Err(e) = tcp.set_nodelay(true) {
        log::debug!("TCP_NODELAY on a client socket: {e}");
        return None;
    }
    let mut l4 = L4Stream::from(tcp);
    let digest = SocketDigest::from_raw_fd(l4.as_raw_fd());
    let _ = digest.peer_addr.set(Some(PeerAddr::Inet(peer)));
    l4.set_socket_digest(digest);
    Some(Box::new(Homed::new(l4, write_buffer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::thread::ThreadId;

    use pingora::server::Fds;

    fn free_port() -> SocketAddr {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    fn table() -> ListenFds {
        Arc::new(Fds::new().into())
    }

    fn port_of(l: &std::net::TcpListener) -> u16 {
        l.local_addr().unwrap().port()
    }

    /// Thread `index`'s sockets of `sockets`, as its service takes them.
    fn take(
        sockets: &Sockets,
        index: usize,
        fds: Option<&ListenFds>,
    ) -> std::io::Result<Vec<Listening>> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(sockets.take(index, fds))
    }

    #[test]
    fn every_thread_gets_its_own_socket_on_the_address_and_the_table_names_them() {
        let addr = free_port();
        let fds = table();
        let sockets = Sockets::new(vec![addr], 2);
        let (a, b) = (
            take(&sockets, 0, Some(&fds)).unwrap(),
            take(&sockets, 1, Some(&fds)).unwrap(),
        );
        assert_eq!((a.len(), b.len()), (1, 1));
        assert_eq!(
            (port_of(&a[0].1), port_of(&b[0].1)),
            (addr.port(), addr.port())
        );
        assert_ne!(a[0].1.as_raw_fd(), b[0].1.as_raw_fd());
        let t = fds.lock();
        assert_eq!(t.get(&format!("{addr}#0")), Some(&a[0].1.as_raw_fd()));
        assert_eq!(t.get(&format!("{addr}#1")), Some(&b[0].1.as_raw_fd()));
        assert_eq!(t.get(&format!("{addr}#2")), None);
    }

    #[test]
    fn an_upgrade_takes_over_every_passed_socket_even_past_its_thread_count() {
        let addr = free_port();
        let fds = table();
        // The old process, with 3 threads, passes its sockets on (and so no longer closes them).
        let old = Sockets::new(vec![addr], 3);
        let passed: Vec<i32> = (0..3)
            .flat_map(|i| take(&old, i, Some(&fds)).unwrap())
            .map(|(_, l)| l.into_raw_fd())
            .collect();
        // The new one has 2: thread 0 accepts on sockets 0 and 2, thread 1 on socket 1.
        let new = Sockets::new(vec![addr], 2);
        let fd_of = |v: Vec<Listening>| {
            v.into_iter()
                .map(|(_, l)| l.into_raw_fd())
                .collect::<Vec<_>>()
        };
        let (a, b) = (
            fd_of(take(&new, 0, Some(&fds)).unwrap()),
            fd_of(take(&new, 1, Some(&fds)).unwrap()),
        );
        assert_eq!(a, [passed[0], passed[2]]);
        assert_eq!(b, [passed[1]]);
        for fd in passed {
            // SAFETY: the test owns these descriptors (taken out of both groups above).
            drop(unsafe { std::net::TcpListener::from_raw_fd(fd) });
        }
    }

    #[test]
    fn a_port_another_process_listens_on_is_refused_even_with_so_reuseport() {
        let addr = free_port();
        // Another process's socket in the SO_REUSEPORT group: a plain bind is what tells.
        let once = || Sockets {
            addrs: vec![addr],
            threads: 2,
            tries: 1,
            bound: Mutex::new(None),
        };
        let other = bind(addr).unwrap();
        let e = take(&once(), 0, None).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
        drop(other);
        let plain = TcpListener::bind(addr).unwrap();
        let e = take(&once(), 0, None).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        // Freed while it is being tried again, the port is taken.
        let freed = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            drop(plain);
        });
        let twice = Sockets { tries: 5, ..once() };
        assert_eq!(take(&twice, 0, None).unwrap().len(), 1);
        freed.join().unwrap();
    }

    /// Answers every connection with the thread that served it and the peer its digest names.
    struct WhoServed;

    #[async_trait]
    impl ServerApp for WhoServed {
        async fn process_new(
            self: &Arc<Self>,
            mut stream: Stream,
            _shutdown: &ShutdownWatch,
        ) -> Option<Stream> {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await.ok()?;
            let peer = stream
                .get_socket_digest()
                .and_then(|d| d.peer_addr().cloned())
                .map(|p| p.to_string())
                .unwrap_or_default();
            let answer = format!("{:?} {peer}\n", std::thread::current().id());
            // Two writes, one flush: both leave together through the write buffer.
            stream.write_all(answer.as_bytes()).await.ok()?;
            stream.write_all(b"end\n").await.ok()?;
            stream.flush().await.ok()?;
            None
        }
    }

    #[test]
    fn the_kernel_spreads_connections_over_the_threads_and_each_is_served_where_accepted() {
        let addr = free_port();
        let sockets = Sockets::new(vec![addr], 2);
        let (down_tx, down_rx) = tokio::sync::watch::channel(false);
        let (ids_tx, ids_rx) = mpsc::channel::<ThreadId>();
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let mine = take(&sockets, i, None).unwrap();
                let down = down_rx.clone();
                let ids = ids_tx.clone();
                std::thread::spawn(move || {
                    ids.send(std::thread::current().id()).unwrap();
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let (addr, listener) = mine.into_iter().next().unwrap();
                    rt.block_on(accept_loop(addr, listener, Arc::new(WhoServed), down, 4096));
                })
            })
            .collect();
        let workers: HashSet<String> = (0..2)
            .map(|_| format!("{:?}", ids_rx.recv().unwrap()))
            .collect();
        let mut served: HashSet<String> = HashSet::new();
        for _ in 0..64 {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(b"x").unwrap();
            let mut text = String::new();
            c.read_to_string(&mut text).unwrap();
            let (thread, rest) = text.split_once(' ').expect("an answer");
            assert_eq!(rest, format!("{}\nend\n", c.local_addr().unwrap()));
            assert!(workers.contains(thread), "{thread} is not a worker");
            served.insert(thread.to_owned());
        }
        // 64 connections all hashed to one of two sockets: 1 in 2^63.
        assert_eq!(served, workers, "both threads accept");
        down_tx.send(true).unwrap();
        for t in threads {
            t.join().unwrap();
        }
        // The sockets are closed with their loops.
        assert!(std::net::TcpStream::connect(addr).is_err());
    }
}
