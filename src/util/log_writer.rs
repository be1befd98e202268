//! Where log lines go: into memory first, then to stderr in batches written by one thread.
//!
//! With a line per response, the log is on every request's path. Writing each line with its own
//! system call, or handing each to a writer thread that must be woken for it, costs a context
//! switch per request on a busy machine. Here a line is appended to a buffer under a short lock;
//! the thread is woken only when the buffer goes from empty to not empty, waits a few milliseconds
//! for more lines to gather, and writes them all at once. Idle, it sleeps on a condition variable.
//! No line is ever dropped: past `HIGH_WATER` bytes the logging task writes the batch itself.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the writer thread lets lines gather before it writes them.
const BATCH_WINDOW: Duration = Duration::from_millis(20);

/// Buffered bytes past which the logging task writes the batch itself instead of leaving it to the
/// thread (backpressure: memory stays bounded when the output is slower than the lines).
const HIGH_WATER: usize = 1 << 20;

/// The `MakeWriter` for `tracing_subscriber::fmt`: every event becomes one append to the buffer.
#[derive(Clone)]
pub struct BatchedWriter {
    shared: Arc<Shared>,
}

/// Keeps the writer thread running; dropping it writes out what is left and stops the thread.
pub struct FlushGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Lines not yet handed to the output.
    pending: Mutex<Pending>,
    /// Signalled when `pending` goes from empty to not empty, and at close.
    ready: Condvar,
    /// The output; taken before a batch is cut, so batches are written in the order they were cut.
    output: Mutex<Box<dyn Write + Send>>,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    closed: bool,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        crate::util::locks::lock(&self.pending)
    }

    /// Cuts the pending bytes into a batch and writes it out.
    fn write_batch(&self, spare: &mut Vec<u8>) {
        let mut output = crate::util::locks::lock(&self.output);
        std::mem::swap(&mut self.pending().bytes, spare);
        if !spare.is_empty() {
            // Logging has nowhere to report its own failure; a failed write loses that batch only.
            let _ = output.write_all(spare).and_then(|()| output.flush());
            spare.clear();
        }
    }
}

impl BatchedWriter {
    /// A writer to `output` and the guard that keeps its thread. Fails only when the OS refuses
    /// a thread.
    pub fn start(output: Box<dyn Write + Send>) -> io::Result<(BatchedWriter, FlushGuard)> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            ready: Condvar::new(),
            output: Mutex::new(output),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("courtesy-log".into())
            .spawn(move || run(&worker))?;
        Ok((
            BatchedWriter {
                shared: shared.clone(),
            },
            FlushGuard {
                shared,
                thread: Some(thread),
            },
        ))
    }
}

/// The writer thread: sleeps until there is something, lets more gather, writes it all.
fn run(shared: &Shared) {
    let mut spare = Vec::new();
    loop {
        let closed = {
            let mut pending = shared.pending();
            while pending.bytes.is_empty() && !pending.closed {
                pending = shared
                    .ready
                    .wait(pending)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            pending.closed
        };
        if !closed {
            std::thread::sleep(BATCH_WINDOW);
        }
        shared.write_batch(&mut spare);
        if closed {
            return;
        }
    }
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.shared.pending().closed = true;
        self.shared.ready.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Lines logged after the thread ended (by other threads still shutting down).
        self.shared.write_batch(&mut Vec::new());
    }
}

/// One event's writer: appends to the pending buffer.
pub struct LineWriter<'a> {
    shared: &'a Shared,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let (woke, full) = {
            let mut pending = self.shared.pending();
            let woke = pending.bytes.is_empty();
            pending.bytes.extend_from_slice(line);
            (woke, pending.bytes.len() >= HIGH_WATER || pending.closed)
        };
        if full {
            self.shared.write_batch(&mut Vec::new());
        } else if woke {
            self.shared.ready.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchedWriter {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            shared: &self.shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output that keeps what it got, and counts the writes.
    #[derive(Clone, Default)]
    struct Capture {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes: Arc<Mutex<usize>>,
    }

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.bytes.lock().unwrap().extend_from_slice(buf);
            *self.writes.lock().unwrap() += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_arrive_whole_in_order_and_batched() {
        let capture = Capture::default();
        let (writer, guard) = BatchedWriter::start(Box::new(capture.clone())).unwrap();
        for i in 0..1000 {
            writer
                .make_writer()
                .write_all(format!("line {i}\n").as_bytes())
                .unwrap();
        }
        drop(guard);
        let text = String::from_utf8(capture.bytes.lock().unwrap().clone()).unwrap();
        let expected: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, expected);
        // A thousand lines in well under the batch window: a handful of writes, not a thousand.
        assert!(*capture.writes.lock().unwrap() < 20);
    }

    #[test]
    fn a_quiet_line_is_written_within_the_window() {
        let capture = Capture::default();
        let (writer, _guard) = BatchedWriter::start(Box::new(capture.clone())).unwrap();
        writer.make_writer().write_all(b"alone\n").unwrap();
        let mut waited = Duration::ZERO;
        while capture.bytes.lock().unwrap().is_empty() && waited < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
            waited += Duration::from_millis(5);
        }
        assert_eq!(capture.bytes.lock().unwrap().as_slice(), b"alone\n");
    }

    #[test]
    fn many_threads_never_interleave_inside_a_line() {
        let capture = Capture::default();
        let (writer, guard) = BatchedWriter::start(Box::new(capture.clone())).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..2000 {
                        // Big lines, so that the high-water path runs too.
                        let line = format!("{t}:{i}:{}\n", "x".repeat(1000));
                        writer.make_writer().write_all(line.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(guard);
        let text = String::from_utf8(capture.bytes.lock().unwrap().clone()).unwrap();
        let mut last = [-1i64; 4];
        let mut count = 0;
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let t: usize = parts.next().unwrap().parse().unwrap();
            let i: i64 = parts.next().unwrap().parse().unwrap();
            assert_eq!(parts.next().unwrap().len(), 1000);
            assert!(i > last[t], "thread {t}: line {i} after {}", last[t]);
            last[t] = i;
            count += 1;
        }
        assert_eq!(count, 8000);
    }
}
