//! Loopback ports no two tests share, waiting for a port, and raw exchanges on a socket.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A loopback listener on a port never handed out before in this test process.
///
/// Ports from [`free_port`] are released before the process that will listen on them starts,
/// and the kernel may give such a port to the next `bind(0)`. With every port recorded, two
/// tests running at once are never handed the same one, so one test's requests cannot reach
/// another's proxy or origin.
pub fn bind_loopback() -> TcpListener {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        if !given.contains(&port) {
            given.push(port);
            return listener;
        }
    }
    panic!("no loopback port left that this test process has not used already");
}

/// A loopback port nobody listens on right now, and never handed out before in this test
/// process (see [`bind_loopback`]).
pub fn free_port() -> u16 {
    bind_loopback().local_addr().expect("its address").port()
}

pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Waits until something accepts connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// Sends `request` as written on a fresh connection and returns everything the server answered
/// until it closed the connection (or 10 s passed).
pub fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    use std::io::Write;
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}
