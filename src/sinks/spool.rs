//! A sink's spool: a bounded, append-only log of events on disk, read in order by the sink's
//! sender and acknowledged as they are delivered.
//!
//! **Layout.** A folder of segment files named by the sequence number of their first record
//! (`00000000000000000001.seg`), and a `cursor` file: the sequence number of the last record
//! delivered (or given up). A record is
//!
//! ```text
//! len: u32 LE | crc32: u32 LE | seq: u64 LE | spooled_ms: u64 LE | payload: len bytes
//! ```
//!
//! where the CRC-32 (IEEE, `crc32fast`) covers `seq`, `spooled_ms` and the payload. Records of a
//! segment have consecutive sequence numbers.
//!
//! **Durability.** Appends reach the file with one `write` per batch, so a crash of the process
//! (even `SIGKILL`) loses nothing appended: the kernel holds it. The writer fsyncs the segment
//! every [`super::FSYNC_EVERY`]; a crash of the machine (power, kernel) may lose what was
//! appended since the last fsync. The cursor is written (to a temporary file, fsynced, then
//! renamed) at most every [`super::CURSOR_EVERY`] by the sender, so after any crash the records
//! delivered since then are delivered again: delivery is at least once, and receivers
//! de-duplicate by the event's `id`.
//!
//! **Recovery.** Opening a spool reads every segment: a record cut short or failing its CRC ends
//! that segment (what follows it is counted as lost and, in the last segment, cut off so that new
//! records follow good ones).
//!
//! **One process at a time.** Opening takes an exclusive `flock` on `lock` in the folder, held
//! until the spool is dropped (or the process ends): during an upgrade the new process waits
//! for the old one to finish with it rather than append beside it.
//!
//! **Bound.** Past `max_bytes` the oldest segment is deleted, and its records not yet delivered
//! are counted as dropped. A write that fails (a full disk) is undone (the segment is cut back
//! to its length before it) and reported; the caller counts and logs it.
//!
//! Not a queue crate (sled, yaque, …): none of the maintained ones offers the bounded size with
//! drop-oldest, the CRC'd torn-tail recovery and the explicit fsync policy together, and this is
//! a few hundred lines whose every failure is documented above.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes before a record's payload.
pub const HEADER: usize = 24;
/// The largest payload a record may hold; an event is far smaller.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// The largest sequence number (a segment's first, a record's, the cursor's) a spool takes as
/// its own: beyond it a file is crafted or corrupt. Far past anything appended in earnest, and
/// far enough below `u64::MAX` that counting on from any accepted number never overflows.
const MAX_SEQ: u64 = 1 << 62;

/// One record read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    /// When it was spooled, Unix milliseconds.
    pub spooled_ms: u64,
    pub payload: Vec<u8>,
}

/// What [`parse`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole record, `len` bytes long in all.
    Record {
        seq: u64,
        spooled_ms: u64,
        payload: &'a [u8],
        len: usize,
    },
    /// The buffer ends within a record (a torn write, or simply the end).
    Incomplete,
    /// Not a record: a length beyond [`MAX_PAYLOAD`] or a CRC that does not match.
    Corrupt,
}

/// Reads the record at the start of `buf`. Never panics, whatever `buf` holds.
pub fn parse(buf: &[u8]) -> Parsed<'_> {
    let Some(header) = buf.get(..HEADER) else {
        return Parsed::Incomplete;
    };
    let word = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let long = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let len = word(0) as usize;
    if len > MAX_PAYLOAD {
        return Parsed::Corrupt;
    }
    let Some(payload) = buf.get(HEADER..HEADER + len) else {
        return Parsed::Incomplete;
    };
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header[8..HEADER]);
    crc.update(payload);
    if crc.finalize() != word(4) {
        return Parsed::Corrupt;
    }
    Parsed::Record {
        seq: long(8),
        spooled_ms: long(16),
        payload,
        len: HEADER + len,
    }
}

/// Appends the record `(seq, spooled_ms, payload)` to `out`.
pub fn encode(seq: u64, spooled_ms: u64, payload: &[u8], out: &mut Vec<u8>) {
    let mut tail = Vec::with_capacity(16);
    tail.extend_from_slice(&seq.to_le_bytes());
    tail.extend_from_slice(&spooled_ms.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&tail);
    crc.update(payload);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&tail);
    out.extend_from_slice(payload);
}

/// The good records at the start of a segment's bytes, and how many bytes they take; what
/// follows is torn or corrupt.
pub fn scan(buf: &[u8]) -> (Vec<(u64, u64)>, usize) {
    let mut records: Vec<(u64, u64)> = Vec::new();
    let mut at = 0;
    while let Parsed::Record {
        seq,
        spooled_ms,
        len,
        ..
    } = parse(&buf[at..])
    {
        // Sequence numbers within a segment follow one another; anything else is not ours.
        if seq > MAX_SEQ
            || records
                .last()
                .is_some_and(|&(prev, _)| prev.checked_add(1) != Some(seq))
        {
            break;
        }
        records.push((seq, spooled_ms));
        at += len;
    }
    (records, at)
}

/// One segment file.
#[derive(Debug)]
struct Segment {
    path: PathBuf,
    /// Sequence number of its first record.
    first: u64,
    /// Of its last record; `first - 1` while empty.
    last: u64,
    bytes: u64,
}

/// What opening a spool found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Records waiting for delivery.
    pub pending: u64,
    /// Bytes cut off: torn or corrupt tails.
    pub torn_bytes: u64,
}

/// What an append did besides appending.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Appended {
    /// Undelivered records dropped to stay within the bound.
    pub dropped: u64,
}

struct Inner {
    /// Holds the folder's `flock` while open.
    _lock: File,
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    segments: VecDeque<Segment>,
    /// The last segment's, opened for appending.
    active: Option<File>,
    next_seq: u64,
    /// Every record up to this one is delivered or given up.
    acked: u64,
    /// `acked` as the cursor file holds it.
    acked_on_disk: u64,
    /// Where the next record to deliver is read: (segment's first seq, offset, open file).
    reader: Option<(u64, u64, File)>,
    /// Appends since the last fsync.
    dirty: bool,
}

/// A sink's spool; shared by the writer thread (appends) and the sender (reads, acks).
pub struct Spool {
    inner: Mutex<Inner>,
    /// Held while the cursor file is written, one writer at a time, apart from `inner`: an
    /// fsync never holds up the writer thread's appends.
    cursor: Mutex<()>,
}

const CURSOR: &str = "cursor";

fn segment_name(first: u64) -> String {
    format!("{first:020}.seg")
}

impl Spool {
    /// Opens (creating it if need be) the spool in `dir`, bounded to `max_bytes`, and recovers
    /// what a crash left.
    /// Fails with [`io::ErrorKind::WouldBlock`] while another process (or another `Spool`)
    /// has it open.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<(Spool, Recovery)> {
        fs::create_dir_all(dir)?;
        let lock = lock_folder(dir)?;
        let acked = read_cursor(&dir.join(CURSOR));
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let first = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|&first| first > 0 && first <= MAX_SEQ);
            if let Some(first) = first {
                found.push((first, path));
            }
        }
        found.sort();
        let mut recovery = Recovery::default();
        let mut segments = VecDeque::new();
        let count = found.len();
        for (i, (first, path)) in found.into_iter().enumerate() {
            // As long as the file says it is, no more (a device or a growing file is not read
            // without end).
            let mut bytes = Vec::new();
            let file = File::open(&path)?;
            let len = file.metadata()?.len();
            file.take(len).read_to_end(&mut bytes)?;
            let (records, good) = scan(&bytes);
            let torn = (bytes.len() - good) as u64;
            recovery.torn_bytes += torn;
            if torn > 0 && i + 1 == count {
                // New records must follow good ones.
                OpenOptions::new()
                    .write(true)
                    .open(&path)?
                    .set_len(good as u64)?;
            }
            let wrong_start = records.first().is_some_and(|&(seq, _)| seq != first);
            // An empty segment is kept only last (appends go on there).
            if wrong_start || (records.is_empty() && i + 1 < count) {
                fs::remove_file(&path)?;
                continue;
            }
            let last = records.last().map_or(first - 1, |&(seq, _)| seq);
            segments.push_back(Segment {
                path,
                first,
                last,
                bytes: good as u64,
            });
        }
        let next_seq = segments
            .back()
            .map_or(acked + 1, |s| s.last + 1)
            .max(acked + 1);
        let segment_bytes = (max_bytes / 8).clamp(16 << 10, 16 << 20);
        let mut inner = Inner {
            _lock: lock,
            dir: dir.to_path_buf(),
            max_bytes,
            segment_bytes,
            segments,
            active: None,
            next_seq,
            acked,
            acked_on_disk: acked,
            reader: None,
            dirty: false,
        };
        inner.drop_delivered()?;
        recovery.pending = inner.pending();
        Ok((
            Spool {
                inner: Mutex::new(inner),
                cursor: Mutex::new(()),
            },
            recovery,
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `payloads`, spooled at `now_ms`, with one write. On an error (a full disk)
    /// nothing of the batch stays in the spool.
    pub fn append(&self, payloads: &[Vec<u8>], now_ms: u64) -> io::Result<Appended> {
        let mut inner = self.lock();
        inner.append(payloads, now_ms)
    }

    /// Fsyncs what was appended since the last call. The fsync runs on a handle of its own,
    /// outside the lock, so appends and acks go on meanwhile (a segment closed meanwhile was
    /// fsynced as it closed).
    pub fn sync(&self) -> io::Result<()> {
        let file = {
            let mut inner = self.lock();
            if !inner.dirty {
                return Ok(());
            }
            let file = inner.active.as_ref().map(File::try_clone).transpose()?;
            inner.dirty = false;
            file
        };
        if let Some(file) = file {
            if let Err(e) = file.sync_data() {
                self.lock().dirty = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The oldest record not yet delivered.
    pub fn peek(&self) -> io::Result<Option<Record>> {
        self.lock().peek()
    }

    /// Marks every record up to `seq` delivered (or given up). Segments wholly delivered are
    /// deleted.
    pub fn ack(&self, seq: u64) -> io::Result<()> {
        let mut inner = self.lock();
        if seq > inner.acked {
            inner.acked = seq;
        }
        inner.drop_delivered()
    }

    /// Writes the cursor if it moved since it was last written.
    /// The file is written and fsynced outside the spool's lock: appends go on meanwhile.
    pub fn persist_cursor(&self) -> io::Result<()> {
        let _one_writer = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let (path, acked) = {
            let inner = self.lock();
            if inner.acked == inner.acked_on_disk {
                return Ok(());
            }
            (inner.dir.join(CURSOR), inner.acked)
        };
        write_cursor(&path, acked)?;
        let mut inner = self.lock();
        inner.acked_on_disk = inner.acked_on_disk.max(acked);
        Ok(())
    }

    /// Records waiting for delivery.
    pub fn pending(&self) -> u64 {
        self.lock().pending()
    }

    /// Bytes of segment files.
    pub fn bytes(&self) -> u64 {
        self.lock().segments.iter().map(|s| s.bytes).sum()
    }
}

impl Inner {
    fn pending(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.last.saturating_sub(self.acked.max(s.first - 1)))
            .sum()
    }

    fn append(&mut self, payloads: &[Vec<u8>], now_ms: u64) -> io::Result<Appended> {
        if payloads.is_empty() {
            return Ok(Appended::default());
        }
        let mut buf = Vec::new();
        let mut seq = self.next_seq;
        for p in payloads {
            if p.len() > MAX_PAYLOAD {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "event too large",
                ));
            }
            encode(seq, now_ms, p, &mut buf);
            seq += 1;
        }
        // A segment's records follow one another: after a gap (a cursor that outlived the
        // records it passed, in a power loss) a new segment begins.
        let needs_new = match self.segments.back() {
            None => true,
            Some(s) => {
                s.last + 1 != self.next_seq
                    || (s.bytes > 0 && s.bytes + buf.len() as u64 > self.segment_bytes)
            }
        };
        if needs_new || self.active.is_none() {
            self.start_segment(needs_new)?;
        }
        let segment = self
            .segments
            .back_mut()
            .expect("a segment was just started");
        let file = self.active.as_mut().expect("the active segment is open");
        if let Err(e) = file.write_all(&buf) {
            // Undo a partial write, so the next record follows a good one; if even that
            // fails, the next append starts a new segment.
            if file.set_len(segment.bytes).is_err() {
                self.active = None;
            }
            return Err(e);
        }
        segment.bytes += buf.len() as u64;
        segment.last = seq - 1;
        self.next_seq = seq;
        self.dirty = true;
        self.enforce_bound()
    }

    /// Opens the last segment for appending, or (`fresh`) a new one after it.
    fn start_segment(&mut self, fresh: bool) -> io::Result<()> {
        if !fresh {
            if let Some(s) = self.segments.back() {
                // Created again if a failed write left no file behind.
                let file = OpenOptions::new().create(true).append(true).open(&s.path)?;
                // Whatever a failed write left beyond the good records goes.
                if file.metadata()?.len() != s.bytes {
                    file.set_len(s.bytes)?;
                }
                self.active = Some(file);
                return Ok(());
            }
        }
        if let Some(file) = self.active.take() {
            // The segment now closed is made durable before the next one opens.
            let _ = file.sync_data();
        }
        // An empty last segment gives way (its name would not match its first record).
        if self.segments.back().is_some_and(|s| s.bytes == 0) {
            let s = self.segments.pop_back().expect("a last segment");
            if self.reader.as_ref().is_some_and(|r| r.0 == s.first) {
                self.reader = None;
            }
            match fs::remove_file(&s.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let path = self.dir.join(segment_name(self.next_seq));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        // The new name itself must survive a power loss, not only what is written to it.
        sync_folder(&self.dir);
        self.segments.push_back(Segment {
            path,
            first: self.next_seq,
            last: self.next_seq - 1,
            bytes: 0,
        });
        self.active = Some(file);
        Ok(())
    }

    /// Deletes the oldest segments while the spool is over its bound (the active one stays).
    fn enforce_bound(&mut self) -> io::Result<Appended> {
        let mut out = Appended::default();
        let mut total: u64 = self.segments.iter().map(|s| s.bytes).sum();
        while total > self.max_bytes && self.segments.len() > 1 {
            let s = self.segments.pop_front().expect("more than one segment");
            out.dropped += s.last.saturating_sub(self.acked.max(s.first - 1));
            self.acked = self.acked.max(s.last);
            total -= s.bytes;
            if self.reader.as_ref().is_some_and(|r| r.0 == s.first) {
                self.reader = None;
            }
            fs::remove_file(&s.path)?;
        }
        Ok(out)
    }

    /// Deletes the segments wholly delivered, but the last (appends go on there).
    fn drop_delivered(&mut self) -> io::Result<()> {
        while self.segments.len() > 1 && self.segments[0].last <= self.acked {
            let s = self.segments.pop_front().expect("more than one segment");
            if self.reader.as_ref().is_some_and(|r| r.0 == s.first) {
                self.reader = None;
            }
            fs::remove_file(&s.path)?;
        }
        Ok(())
    }

    fn peek(&mut self) -> io::Result<Option<Record>> {
        loop {
            let Some(index) = self.segments.iter().position(|s| s.last > self.acked) else {
                return Ok(None);
            };
            let (first, last, path) = {
                let s = &self.segments[index];
                (s.first, s.last, s.path.clone())
            };
            if self.reader.as_ref().is_none_or(|r| r.0 != first) {
                self.reader = Some((first, 0, File::open(&path)?));
            }
            let (_, offset, file) = self.reader.as_mut().expect("just opened");
            match read_record(file, *offset)? {
                // A record past the segment's last is not one it was found holding.
                Some(record) if record.seq <= last => {
                    *offset += (HEADER + record.payload.len()) as u64;
                    if record.seq <= self.acked {
                        continue;
                    }
                    // Read again from here next time, unless it is acked first.
                    *offset -= (HEADER + record.payload.len()) as u64;
                    return Ok(Some(record));
                }
                _ => {
                    // The segment's records end before `last`: what is missing cannot be
                    // read (it was never written whole); it is given up.
                    log::warn!(
                        "spool {}: records {}..={last} of {} cannot be read; skipped",
                        self.dir.display(),
                        self.acked.max(first - 1) + 1,
                        path.display()
                    );
                    self.acked = self.acked.max(last);
                    self.reader = None;
                }
            }
        }
    }
}

/// `dir/lock`, opened and locked exclusively (`flock`, released when the file is closed).
fn lock_folder(dir: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))?;
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if taken != 0 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "another process has this spool open",
                )
            } else {
                e
            });
        }
    }
    Ok(file)
}

/// The record at `offset` of `file`, if a good one is there.
fn read_record(file: &mut File, offset: u64) -> io::Result<Option<Record>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut header = [0u8; HEADER];
    if let Err(e) = file.read_exact(&mut header) {
        return if e.kind() == io::ErrorKind::UnexpectedEof {
            Ok(None)
        } else {
            Err(e)
        };
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > MAX_PAYLOAD {
        return Ok(None);
    }
    let mut buf = header.to_vec();
    buf.resize(HEADER + len, 0);
    if let Err(e) = file.read_exact(&mut buf[HEADER..]) {
        return if e.kind() == io::ErrorKind::UnexpectedEof {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(match parse(&buf) {
        Parsed::Record {
            seq,
            spooled_ms,
            payload,
            ..
        } => Some(Record {
            seq,
            spooled_ms,
            payload: payload.to_vec(),
        }),
        _ => None,
    })
}

/// The cursor: 8 bytes of sequence number and their CRC-32. Missing or damaged: 0 (everything
/// spooled is delivered again).
fn read_cursor(path: &Path) -> u64 {
    let Ok(bytes) = fs::read(path) else { return 0 };
    if bytes.len() != 12 {
        return 0;
    }
    let crc = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if crc32fast::hash(&bytes[..8]) != crc {
        return 0;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    // Beyond any real count: corrupt, so everything spooled is delivered again.
    Some(u64::from_le_bytes(b))
        .filter(|&acked| acked <= MAX_SEQ)
        .unwrap_or(0)
}

fn write_cursor(path: &Path, acked: u64) -> io::Result<()> {
    let mut bytes = acked.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&bytes).to_le_bytes());
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_data()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        sync_folder(dir);
    }
    Ok(())
}

/// Fsyncs a folder's entries (a new or renamed file). Best effort: where folders cannot be
/// opened for it, the file's own fsync is what there is.
fn sync_folder(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payloads(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
        range.map(|i| format!("event {i}").into_bytes()).collect()
    }

    fn drain(spool: &Spool) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(r) = spool.peek().unwrap() {
            out.push(String::from_utf8(r.payload).unwrap());
            spool.ack(r.seq).unwrap();
        }
        out
    }

    #[test]
    fn records_round_trip_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec, Recovery::default());
        spool.append(&payloads(0..3), 1000).unwrap();
        let first = spool.peek().unwrap().unwrap();
        assert_eq!((first.seq, first.spooled_ms), (1, 1000));
        assert_eq!(
            spool.peek().unwrap().unwrap(),
            first,
            "peek does not consume"
        );
        spool.ack(1).unwrap();
        spool.persist_cursor().unwrap();
        spool.sync().unwrap();
        drop(spool);
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec.pending, 2);
        spool.append(&payloads(3..4), 2000).unwrap();
        assert_eq!(drain(&spool), ["event 1", "event 2", "event 3"]);
        assert_eq!(spool.pending(), 0);
    }

    #[test]
    fn an_unwritten_cursor_delivers_again() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        spool.append(&payloads(0..2), 1).unwrap();
        spool.ack(1).unwrap();
        drop(spool);
        let (spool, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(drain(&spool), ["event 0", "event 1"]);
    }

    #[test]
    fn a_torn_tail_is_cut_off_and_appends_follow_good_records() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        spool.append(&payloads(0..3), 1).unwrap();
        drop(spool);
        let seg = dir.path().join(segment_name(1));
        let len = fs::metadata(&seg).unwrap().len();
        // A write cut short by a crash: half of a fourth record.
        let mut extra = Vec::new();
        encode(4, 1, b"torn event", &mut extra);
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(&extra[..extra.len() / 2]).unwrap();
        drop(f);
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec.pending, 3);
        assert_eq!(rec.torn_bytes, (extra.len() / 2) as u64);
        assert_eq!(fs::metadata(&seg).unwrap().len(), len);
        spool.append(&payloads(3..4), 1).unwrap();
        assert_eq!(drain(&spool), ["event 0", "event 1", "event 2", "event 3"]);
    }

    #[test]
    fn a_corrupt_record_ends_its_segment() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        spool.append(&payloads(0..3), 1).unwrap();
        drop(spool);
        let seg = dir.path().join(segment_name(1));
        let mut bytes = fs::read(&seg).unwrap();
        let second = HEADER + b"event 0".len();
        bytes[second + HEADER] ^= 0xff;
        fs::write(&seg, bytes).unwrap();
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec.pending, 1);
        assert_eq!(drain(&spool), ["event 0"]);
    }

    #[test]
    fn past_the_bound_the_oldest_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 64 << 10).unwrap();
        let big = vec![b'x'; 1000];
        let mut dropped = 0;
        for _ in 0..200 {
            dropped += spool.append(std::slice::from_ref(&big), 1).unwrap().dropped;
        }
        assert!(spool.bytes() <= 64 << 10, "{}", spool.bytes());
        assert!(dropped > 100, "{dropped}");
        assert_eq!(spool.pending() + dropped, 200);
        // What is left is the newest, in order.
        let first = spool.peek().unwrap().unwrap().seq;
        assert_eq!(first, dropped + 1);
        let mut n = 0;
        while let Some(r) = spool.peek().unwrap() {
            assert_eq!(r.seq, first + n);
            spool.ack(r.seq).unwrap();
            n += 1;
        }
        assert_eq!(n + dropped, 200);
    }

    #[test]
    fn delivered_segments_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 64 << 10).unwrap();
        for _ in 0..40 {
            spool.append(&[vec![b'y'; 1000]], 1).unwrap();
        }
        let segments = || {
            fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "seg")
                })
                .count()
        };
        assert!(segments() > 1);
        drain(&spool);
        assert_eq!(segments(), 1);
        spool.persist_cursor().unwrap();
        drop(spool);
        let (spool, rec) = Spool::open(dir.path(), 64 << 10).unwrap();
        assert_eq!(rec.pending, 0);
        spool.append(&payloads(0..1), 1).unwrap();
        assert_eq!(spool.peek().unwrap().unwrap().seq, 41);
    }

    #[test]
    fn a_cursor_ahead_of_the_records_after_a_power_loss_loses_nothing_new() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        spool.append(&payloads(0..3), 1).unwrap();
        spool.ack(3).unwrap();
        spool.persist_cursor().unwrap();
        drop(spool);
        // The power went: the cursor (fsynced) survived, the last two records did not.
        let seg = dir.path().join(segment_name(1));
        let one = (HEADER + b"event 0".len()) as u64;
        OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(one)
            .unwrap();
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec.pending, 0);
        spool.append(&payloads(3..5), 1).unwrap();
        drop(spool);
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(
            rec,
            Recovery {
                pending: 2,
                torn_bytes: 0
            }
        );
        assert_eq!(drain(&spool), ["event 3", "event 4"]);
    }

    /// The writer appends while the sender acks and persists its cursor and a third party
    /// fsyncs (each fsync outside the lock): nothing is lost or delivered twice after a reopen.
    #[test]
    fn appends_go_on_while_the_cursor_and_the_segment_are_fsynced() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        let spool = std::sync::Arc::new(spool);
        let writer = {
            let spool = spool.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    spool.append(&payloads(i..i + 1), 1).unwrap();
                }
            })
        };
        let syncer = {
            let spool = spool.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    spool.sync().unwrap();
                }
            })
        };
        let mut delivered = 0;
        while delivered < 100 {
            if let Some(r) = spool.peek().unwrap() {
                spool.ack(r.seq).unwrap();
                spool.persist_cursor().unwrap();
                delivered += 1;
            }
        }
        writer.join().unwrap();
        syncer.join().unwrap();
        spool.sync().unwrap();
        drop(spool);
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec.pending, 100);
        let rest = drain(&spool);
        assert_eq!(rest.first().map(String::as_str), Some("event 100"));
        assert_eq!(rest.len(), 100);
    }

    /// Sequence numbers at the end of `u64` (a crafted or corrupt folder): taken as corruption,
    /// never an overflow.
    #[test]
    fn sequence_numbers_at_the_end_of_u64_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        // A segment named for the last number, holding a record of it, and one of MAX_SEQ + 1.
        let mut bytes = Vec::new();
        encode(u64::MAX, 1, b"crafted", &mut bytes);
        fs::write(dir.path().join(segment_name(u64::MAX)), &bytes).unwrap();
        let mut bytes = Vec::new();
        encode(MAX_SEQ + 1, 1, b"crafted", &mut bytes);
        fs::write(dir.path().join(segment_name(MAX_SEQ + 1)), &bytes).unwrap();
        // A record of the last number after a good one, in a good segment.
        let mut bytes = Vec::new();
        encode(1, 1, b"event 0", &mut bytes);
        encode(u64::MAX, 1, b"crafted", &mut bytes);
        fs::write(dir.path().join(segment_name(1)), &bytes).unwrap();
        assert_eq!(scan(&bytes).0.len(), 1);
        // A cursor at the last number.
        let mut cursor = u64::MAX.to_le_bytes().to_vec();
        cursor.extend_from_slice(&crc32fast::hash(&cursor).to_le_bytes());
        fs::write(dir.path().join(CURSOR), cursor).unwrap();
        let (spool, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec.pending, 1);
        spool.append(&payloads(1..2), 1).unwrap();
        assert_eq!(drain(&spool), ["event 0", "event 1"]);
    }

    /// `/dev/full` answers every write with ENOSPC: a full disk, without filling one.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_is_an_error_and_the_spool_carries_on_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        let segment = dir.path().join(segment_name(1));
        std::os::unix::fs::symlink("/dev/full", &segment).unwrap();
        for _ in 0..3 {
            let e = spool.append(&payloads(0..2), 1).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(28), "{e}");
        }
        assert_eq!(spool.pending(), 0);
        assert_eq!(spool.peek().unwrap(), None);
        // Space again.
        fs::remove_file(&segment).unwrap();
        spool.append(&payloads(2..4), 1).unwrap();
        assert_eq!(drain(&spool), ["event 2", "event 3"]);
    }

    #[test]
    fn one_spool_at_a_time_per_folder() {
        let dir = tempfile::tempdir().unwrap();
        let (first, _) = Spool::open(dir.path(), 1 << 20).unwrap();
        first.append(&payloads(0..1), 1).unwrap();
        let Err(e) = Spool::open(dir.path(), 1 << 20) else {
            panic!("opened twice");
        };
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(first);
        let (second, rec) = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(rec.pending, 1);
        assert_eq!(drain(&second), ["event 0"]);
    }

    #[test]
    fn the_fuzz_seeds_are_records() {
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/spool");
        let whole = fs::read(seeds.join("two_records")).unwrap();
        let (records, good) = scan(&whole);
        assert_eq!((records.len(), good), (2, whole.len()));
        let torn = fs::read(seeds.join("torn_tail")).unwrap();
        assert_eq!(scan(&torn).0.len(), 1);
    }

    #[test]
    fn the_parser_refuses_garbage() {
        assert_eq!(parse(b""), Parsed::Incomplete);
        assert_eq!(parse(&[0xff; 64]), Parsed::Corrupt);
        let mut rec = Vec::new();
        encode(7, 9, b"{}", &mut rec);
        assert!(matches!(
            parse(&rec),
            Parsed::Record {
                seq: 7,
                spooled_ms: 9,
                len: 26,
                ..
            }
        ));
        assert_eq!(parse(&rec[..rec.len() - 1]), Parsed::Incomplete);
        rec[20] ^= 1;
        assert_eq!(parse(&rec), Parsed::Corrupt);
    }
}
