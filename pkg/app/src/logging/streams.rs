//! Where log lines go: everything to stderr, or with split streams info lines to stdout (optionally
//! through a buffer flushed at `--log-flush-frequency`) and warnings and errors to stderr.

use std::io::{BufWriter, Stderr, Stdout, Write};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

use super::LogSettings;

/// Stdout behind a buffer of a fixed size.
pub struct BufferedStdout {
    out: Mutex<BufWriter<Stdout>>,
}

impl BufferedStdout {
    /// Writes what the buffer holds.
    pub fn flush_now(&self) {
        let _ = self.out.lock().flush();
    }

    /// Flushes every `period` on a thread of its own, for the life of the process.
    pub fn flush_every(self: &Arc<Self>, period: Duration) {
        let stdout = Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("log-flush".to_string())
            .spawn(move || {
                loop {
                    std::thread::sleep(period);
                    match stdout.upgrade() {
                        Some(stdout) => stdout.flush_now(),
                        None => return,
                    }
                }
            });
    }
}

/// The writers of the log (see the module documentation).
#[derive(Clone)]
pub struct Streams {
    split: bool,
    buffered: Option<Arc<BufferedStdout>>,
}

impl Streams {
    /// The streams `settings` ask for, with the buffered stdout when there is one.
    pub fn new(settings: &LogSettings) -> (Self, Option<Arc<BufferedStdout>>) {
        let buffered = (settings.split_stream && settings.info_buffer_size > 0).then(|| {
            let capacity = usize::try_from(settings.info_buffer_size).unwrap_or(usize::MAX);
            Arc::new(BufferedStdout {
                out: Mutex::new(BufWriter::with_capacity(capacity, std::io::stdout())),
            })
        });
        (
            Streams {
                split: settings.split_stream,
                buffered: buffered.clone(),
            },
            buffered,
        )
    }
}

/// One log line's destination.
pub enum StreamWriter {
    /// Standard error.
    Stderr(Stderr),
    /// Standard output, unbuffered.
    Stdout(Stdout),
    /// Standard output through the buffer.
    Buffered(Arc<BufferedStdout>),
}

impl Write for StreamWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            StreamWriter::Stderr(err) => err.write(bytes),
            StreamWriter::Stdout(out) => out.write(bytes),
            StreamWriter::Buffered(out) => out.out.lock().write(bytes),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            StreamWriter::Stderr(err) => err.write_all(bytes),
            StreamWriter::Stdout(out) => out.write_all(bytes),
            StreamWriter::Buffered(out) => out.out.lock().write_all(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            StreamWriter::Stderr(err) => err.flush(),
            StreamWriter::Stdout(out) => out.flush(),
            // Flushed when full and at --log-flush-frequency.
            StreamWriter::Buffered(_) => Ok(()),
        }
    }
}

impl<'a> MakeWriter<'a> for Streams {
    type Writer = StreamWriter;

    fn make_writer(&'a self) -> StreamWriter {
        StreamWriter::Stderr(std::io::stderr())
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> StreamWriter {
        if !self.split || *meta.level() < Level::INFO {
            return StreamWriter::Stderr(std::io::stderr());
        }
        match &self.buffered {
            Some(buffered) => StreamWriter::Buffered(buffered.clone()),
            None => StreamWriter::Stdout(std::io::stdout()),
        }
    }
}
