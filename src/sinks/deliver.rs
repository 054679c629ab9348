//! The three destinations: a signed webhook, a JSON-lines file, a Redis stream. Each attempt
//! costs bounded time and memory, and says whether to move on or try again.
//!
//! The webhook client is reqwest (on the hyper and rustls already in the tree through Pingora):
//! connect and total timeouts, no redirects followed, and the answer's body never read, so a
//! slow, silent, redirecting or flooding receiver costs at most [`TOTAL_TIMEOUT`] and no
//! memory per attempt.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::sinks::{Destination, SinkConfig};
use crate::config::ClusterConfig;

/// The most an attempt waits for a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most an attempt takes in all, the answer's head included.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(10);

/// How an attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Refused for good (a 4xx but 408 and 429): the event is dropped, the sink moves on.
    Rejected(String),
    /// Worth another attempt, after a backoff.
    Retry(String),
}

/// A sink's destination, ready to send to.
pub enum Deliver {
    Webhook(Webhook),
    File(JsonLines),
    Redis(RedisStream),
}

impl Deliver {
    /// The destination of `sink`; `None` (logged) when it cannot be built.
    pub fn new(sink: &SinkConfig, cluster: &ClusterConfig) -> Option<Deliver> {
        let built = match &sink.destination {
            Destination::Webhook { url, secret, .. } => {
                Webhook::new(url, secret.0.clone()).map(Deliver::Webhook)
            }
            Destination::File {
                path,
                max_file_bytes,
            } => Ok(Deliver::File(JsonLines::new(path.clone(), *max_file_bytes))),
            Destination::RedisStream {
                stream,
                max_len,
                redis,
            } => {
                let urls = match redis {
                    Some(url) => vec![url.clone()],
                    None => cluster.redis.clone(),
                };
                RedisStream::new(&urls, stream, *max_len).map(Deliver::Redis)
            }
        };
        match built {
            Ok(d) => Some(d),
            Err(e) => {
                log::error!(
                    "events sink {}: cannot be used: {e}; its events stay in the spool",
                    sink.name
                );
                None
            }
        }
    }

    /// One attempt at delivering the event `id` of type `kind` (`vestibule.…`), whose JSON is
    /// `body`.
    pub async fn send(&mut self, id: &str, kind: &str, body: &[u8]) -> Outcome {
        match self {
            Deliver::Webhook(w) => w.send(body).await,
            Deliver::File(f) => f.send(body),
            Deliver::Redis(r) => r.send(id, kind, body).await,
        }
    }
}

/// `Vestibule-Signature`'s value for `body` sent at Unix second `t`: `t=<t>,v1=<hex of
/// HMAC-SHA256(secret, "<t>." + body)>`.
pub fn signature(secret: &[u8], t: u64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("any length"));
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// POSTs each event, signed afresh at each attempt.
pub struct Webhook {
    client: reqwest::Client,
    url: String,
    secret: Vec<u8>,
}

impl Webhook {
    fn new(url: &str, secret: Vec<u8>) -> Result<Webhook, String> {
        Webhook::with_timeouts(url, secret, CONNECT_TIMEOUT, TOTAL_TIMEOUT)
    }

    fn with_timeouts(
        url: &str,
        secret: Vec<u8>,
        connect: Duration,
        total: Duration,
    ) -> Result<Webhook, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect)
            .timeout(total)
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(1)
            .user_agent(concat!("vestibule/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.without_url().to_string())?;
        Ok(Webhook {
            client,
            url: url.to_owned(),
            secret,
        })
    }

    async fn send(&self, body: &[u8]) -> Outcome {
        let t = crate::time::now().secs();
        let sent = self
            .client
            .post(&self.url)
            .header("content-type", "application/cloudevents+json")
            .header("vestibule-signature", signature(&self.secret, t, body))
            .body(body.to_vec())
            .send()
            .await;
        match sent {
            // The body is never read: dropping the answer closes its connection.
            Ok(answer) => classify(answer.status().as_u16()),
            // Without the URL: it may hold credentials.
            Err(e) => Outcome::Retry(describe(&e)),
        }
    }
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "cannot connect".into()
    } else {
        let mut text = String::from("request failed");
        let mut source = std::error::Error::source(e);
        // The innermost cause says most (a reset, a bad certificate), and never the URL.
        while let Some(s) = source {
            text = s.to_string();
            source = s.source();
        }
        text
    }
}

/// What a receiver's status means: 2xx delivered; 408, 429 and 5xx worth a retry; a redirect
/// (never followed) retried too, so that events wait in the spool while the URL is fixed;
/// any other status a rejection.
pub fn classify(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        408 | 429 | 500..=599 => Outcome::Retry(format!("the receiver answered {status}")),
        300..=399 => Outcome::Retry(format!(
            "the receiver answered {status}, a redirect, which is not followed"
        )),
        _ => Outcome::Rejected(format!("the receiver answered {status}")),
    }
}

/// Appends each event as one line to a file, renamed to `<path>.1` beyond its size.
pub struct JsonLines {
    path: PathBuf,
    max_bytes: u64,
    /// The file and its size, while open.
    open: Option<(File, u64)>,
}

impl JsonLines {
    fn new(path: PathBuf, max_bytes: u64) -> JsonLines {
        JsonLines {
            path,
            max_bytes,
            open: None,
        }
    }

    fn send(&mut self, body: &[u8]) -> Outcome {
        match self.append(body) {
            Ok(()) => Outcome::Delivered,
            Err(e) => {
                self.open = None;
                Outcome::Retry(format!("{}: {e}", self.path.display()))
            }
        }
    }

    fn append(&mut self, body: &[u8]) -> std::io::Result<()> {
        let line = body.len() as u64 + 1;
        if let Some((_, size)) = &self.open {
            if *size > 0 && size + line > self.max_bytes {
                self.open = None;
                let mut rotated = self.path.clone().into_os_string();
                rotated.push(".1");
                std::fs::rename(&self.path, rotated)?;
            }
        }
        if self.open.is_none() {
            if let Some(parent) = self.path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            let size = file.metadata()?.len();
            self.open = Some((file, size));
            // A file already past its size (after a restart) is rotated before this line.
            if size > 0 && size + line > self.max_bytes {
                return self.append(body);
            }
        }
        let (file, size) = self.open.as_mut().expect("opened above");
        let mut buf = Vec::with_capacity(body.len() + 1);
        buf.extend_from_slice(body);
        buf.push(b'\n');
        write_or_cut(file, &mut &*file, *size, &buf)?;
        *size += line;
        Ok(())
    }
}

/// Writes `buf` whole to `out` (which writes to `file`), or, when that fails part way (a full
/// disk takes half a line), cuts `file` back to `size`, its last whole line, as the spool does:
/// the file stays JSON lines and the retry writes the line again after it.
fn write_or_cut(file: &File, out: &mut impl Write, size: u64, buf: &[u8]) -> std::io::Result<()> {
    out.write_all(buf).inspect_err(|_| {
        let _ = file.set_len(size);
    })
}

/// XADDs each event to a stream, trimmed with `MAXLEN ~`.
pub struct RedisStream {
    client: RedisClient,
    conn: Option<RedisConn>,
    stream: String,
    max_len: u64,
}

enum RedisClient {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

enum RedisConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// The most one XADD (connecting included) may take.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

impl RedisStream {
    fn new(urls: &[String], stream: &str, max_len: u64) -> Result<RedisStream, String> {
        let client = match urls {
            [] => return Err("no Redis URL".into()),
            [url] => {
                RedisClient::Single(redis::Client::open(url.as_str()).map_err(|e| e.to_string())?)
            }
            _ => RedisClient::Cluster(Box::new(
                redis::cluster::ClusterClient::new(urls.iter().map(String::as_str))
                    .map_err(|e| e.to_string())?,
            )),
        };
        Ok(RedisStream {
            client,
            conn: None,
            stream: stream.to_owned(),
            max_len,
        })
    }

    async fn send(&mut self, id: &str, kind: &str, body: &[u8]) -> Outcome {
        match tokio::time::timeout(REDIS_TIMEOUT, self.xadd(id, kind, body)).await {
            Ok(Ok(())) => Outcome::Delivered,
            Ok(Err(e)) => {
                self.conn = None;
                Outcome::Retry(crate::config::redact_url(&e.to_string()))
            }
            Err(_) => {
                self.conn = None;
                Outcome::Retry("timed out".into())
            }
        }
    }

    async fn xadd(&mut self, id: &str, kind: &str, body: &[u8]) -> redis::RedisResult<()> {
        if self.conn.is_none() {
            self.conn = Some(match &self.client {
                RedisClient::Single(c) => {
                    RedisConn::Single(c.get_multiplexed_async_connection().await?)
                }
                RedisClient::Cluster(c) => RedisConn::Cluster(c.get_async_connection().await?),
            });
        }
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.stream)
            .arg("MAXLEN")
            .arg("~")
            .arg(self.max_len)
            .arg("*")
            .arg("id")
            .arg(id)
            .arg("type")
            .arg(kind)
            .arg("event")
            .arg(body);
        let _: String = match self.conn.as_mut().expect("connected above") {
            RedisConn::Single(c) => cmd.query_async(c).await?,
            RedisConn::Cluster(c) => cmd.query_async(c).await?,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_delivered_rejected_or_retried() {
        assert_eq!(classify(200), Outcome::Delivered);
        assert_eq!(classify(204), Outcome::Delivered);
        for s in [408, 429, 500, 502, 503, 301, 307] {
            assert!(matches!(classify(s), Outcome::Retry(_)), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 413, 422] {
            assert!(matches!(classify(s), Outcome::Rejected(_)), "{s}");
        }
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_t_dot_body() {
        // Python: hmac.new(b"secret-secret-16", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
        assert_eq!(
            signature(b"secret-secret-16", 1_700_000_000, br#"{"a":1}"#),
            "t=1700000000,v1=df6c7ddb48f79237fc23533418747c32f1beedf8c52f397e7fef6ac321de837c"
        );
    }

    /// A receiver on loopback that answers each connection with `answer` (after `delay`), then
    /// keeps writing `trailer` for a while; how many connections it took.
    fn receiver(
        answer: &'static [u8],
        delay: Duration,
        trailer: Option<&'static [u8]>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = taken.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf);
                    std::thread::sleep(delay);
                    let _ = stream.write_all(answer);
                    if let Some(t) = trailer {
                        for _ in 0..20_000 {
                            if stream.write_all(t).is_err() {
                                return;
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_secs(5));
                });
            }
        });
        (url, taken)
    }

    fn hook(url: &str) -> Webhook {
        Webhook::with_timeouts(
            url,
            b"secret-secret-16".to_vec(),
            Duration::from_millis(300),
            Duration::from_millis(500),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn bad_receivers_cost_bounded_time() {
        let started = std::time::Instant::now();
        // Never answers.
        let (silent, _) = receiver(b"", Duration::from_secs(30), None);
        assert_eq!(
            hook(&silent).send(b"{}").await,
            Outcome::Retry("timed out".into())
        );
        // Answers, but only after the total timeout.
        let (slow, _) = receiver(
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            Duration::from_secs(2),
            None,
        );
        assert_eq!(
            hook(&slow).send(b"{}").await,
            Outcome::Retry("timed out".into())
        );
        // Nobody listens.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/hook", l.local_addr().unwrap())
        };
        assert!(matches!(hook(&closed).send(b"{}").await, Outcome::Retry(_)));
        // Generous for a loaded machine: unbounded would be the silent receiver's 30 s.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_huge_answer_is_never_read_and_a_redirect_never_followed() {
        // 200 with a body of a gigabyte, streamed: delivered at once, the body left unread.
        let (huge, _) = receiver(
            b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n",
            Duration::ZERO,
            Some(&[b'x'; 4096]),
        );
        let started = std::time::Instant::now();
        assert_eq!(hook(&huge).send(b"{}").await, Outcome::Delivered);
        // Bounded, not fast: reading the body would take far longer than this.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // A redirect elsewhere: retried, and the target never hears of it.
        let (target, reached) = receiver(
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            Duration::ZERO,
            None,
        );
        let answer: &'static [u8] = Box::leak(
            format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\n\r\n")
                .into_bytes()
                .into_boxed_slice(),
        );
        let (redirecting, _) = receiver(answer, Duration::ZERO, None);
        assert!(matches!(
            hook(&redirecting).send(b"{}").await,
            Outcome::Retry(_)
        ));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(reached.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    /// Takes `room` bytes into its file, then answers every write as a full disk does.
    struct NearlyFull<'a> {
        file: &'a File,
        room: usize,
    }

    impl Write for NearlyFull<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.file.write(&buf[..n])
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_the_disk_cuts_short_is_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        write_or_cut(&file, &mut &file, 0, b"{\"n\":1}\n").unwrap();
        let mut full = NearlyFull {
            file: &file,
            room: 4,
        };
        assert!(write_or_cut(&file, &mut full, 8, b"{\"n\":2}\n").is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"n\":1}\n");
        // And the next line follows the last whole one.
        write_or_cut(&file, &mut &file, 8, b"{\"n\":3}\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"n\":1}\n{\"n\":3}\n"
        );
    }

    #[test]
    fn json_lines_rotate_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out/events.jsonl");
        let mut f = JsonLines::new(path.clone(), 100);
        for i in 0..10 {
            let body = format!("{{\"n\":{i},\"pad\":\"0123456789012345678901234567890\"}}");
            assert_eq!(f.send(body.as_bytes()), Outcome::Delivered);
        }
        let now = std::fs::read_to_string(&path).unwrap();
        let before = std::fs::read_to_string(dir.path().join("out/events.jsonl.1")).unwrap();
        assert!(now.len() <= 100 && before.len() <= 100);
        assert!(now.ends_with("\"n\":9,\"pad\":\"0123456789012345678901234567890\"}\n"));
        assert_eq!(now.lines().count() + before.lines().count(), 4);
    }
}
