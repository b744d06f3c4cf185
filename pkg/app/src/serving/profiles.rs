//! `--profiling`: the CPU and heap profiles of `/debug/pprof/`, in pprof's protobuf format (what
//! `go tool pprof` and every pprof viewer read), as upstream's Go handlers serve them.
//!
//! - `/debug/pprof/profile?seconds=N` samples the CPU for N seconds (default 30) at 100 Hz; one profile at
//!   a time, as Go's. Stacks are unwound with their DWARF unwind tables (framehop; the release build keeps
//!   them and its symbols, not its debug information). The sampler's table, about 24 MiB, is allocated by
//!   the first profile and kept for the process's life (pprof-rs keeps it in a static); the symbolizer's
//!   caches are dropped after each profile.
//! - `/debug/pprof/heap` is jemalloc's sample of the live heap (one sample per 512 KiB allocated, Go's
//!   rate), when the daemon allocates through jemalloc (the binary's default); sampling starts with the
//!   process when `--profiling` is on, except in a static musl build, where jemalloc's sampling crashes
//!   now and then (its unwinder), so the heap is not sampled there.
//!
//! Go's other profiles (goroutine, block, mutex, threadcreate, trace) have no Rust counterpart: those
//! names answer 404 `Unknown profile`, as Go does for a name it does not know.

use std::collections::HashMap;
use std::time::Duration;

/// The CPU sampling frequency, in Hz (Go's).
pub const CPU_FREQUENCY: i32 = 100;
/// The longest CPU profile a request may ask for.
pub const MAX_CPU_SECONDS: u64 = 600;
/// The CPU profile's duration when the request names none (Go's).
pub const DEFAULT_CPU_SECONDS: u64 = 30;

/// The profiles the index lists, with what each is.
pub const PROFILES: &[(&str, &str)] = &[
    (
        "heap",
        "A sampling of memory allocations of live objects (jemalloc).",
    ),
    (
        "profile",
        "CPU profile. You can specify the duration in the seconds GET parameter.",
    ),
];

/// Why a profile could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Another CPU profile is being taken, or sampling could not start.
    #[error("Could not enable CPU profiling: {0}")]
    CpuBusy(String),
    /// The heap is not sampled (no jemalloc, or sampling is off).
    #[error("heap profiling is not available: {0}")]
    HeapUnavailable(String),
    /// Writing the profile failed.
    #[error("could not write the profile: {0}")]
    Write(String),
}

/// Starts sampling the heap, when the daemon allocates through jemalloc built with profiling. Logs why
/// not otherwise.
pub async fn start_heap_sampling() {
    #[cfg(all(feature = "heap-profiling", target_env = "musl"))]
    tracing::info!(
        "heap profiles are not available in a static musl build: jemalloc's sampling is not reliable \
         there (the release images are glibc builds)"
    );
    #[cfg(all(feature = "heap-profiling", not(target_env = "musl")))]
    {
        let Some(ctl) = jemalloc_pprof::PROF_CTL.as_ref() else {
            tracing::info!(
                "heap profiles are not available: jemalloc was started without profiling"
            );
            return;
        };
        let result = ctl.lock().await.activate();
        if let Err(err) = result {
            tracing::warn!(error = %err, "cannot start sampling the heap");
        }
    }
}

/// The heap profile (gzipped pprof).
pub async fn heap() -> Result<Vec<u8>, ProfileError> {
    #[cfg(feature = "heap-profiling")]
    {
        let ctl = jemalloc_pprof::PROF_CTL.as_ref().ok_or_else(|| {
            ProfileError::HeapUnavailable("jemalloc was started without profiling".to_string())
        })?;
        let mut ctl = ctl.lock().await;
        if !ctl.activated() {
            return Err(ProfileError::HeapUnavailable(
                "heap sampling is off (--profiling=false)".to_string(),
            ));
        }
        ctl.dump_pprof()
            .map_err(|err| ProfileError::Write(err.to_string()))
    }
    #[cfg(not(feature = "heap-profiling"))]
    {
        Err(ProfileError::HeapUnavailable(
            "this binary does not allocate through jemalloc".to_string(),
        ))
    }
}

/// Samples the CPU for `seconds` and returns the profile (pprof protobuf), on a thread of its own.
pub async fn cpu(seconds: u64) -> Result<Vec<u8>, ProfileError> {
    let duration = Duration::from_secs(seconds.clamp(1, MAX_CPU_SECONDS));
    tokio::task::spawn_blocking(move || cpu_blocking(duration))
        .await
        .map_err(|err| ProfileError::Write(err.to_string()))?
}

#[cfg(unix)]
fn cpu_blocking(duration: Duration) -> Result<Vec<u8>, ProfileError> {
    prepare_unwinder()?;
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(CPU_FREQUENCY)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|err| ProfileError::CpuBusy(err.to_string()))?;
    std::thread::sleep(duration);
    let report = guard
        .report()
        .build()
        .map_err(|err| ProfileError::Write(err.to_string()));
    // Sampling stops before the clean-up below, which is not part of what was asked for.
    drop(guard);
    // The symbolizer keeps the debug information it read (tens of MiB) until told otherwise.
    backtrace::clear_symbol_cache();
    let report = report?;
    let mut samples = Vec::with_capacity(report.data.len());
    for (frames, count) in &report.data {
        let stack = frames
            .frames
            .iter()
            .map(|inlined| {
                inlined
                    .iter()
                    .map(|symbol| Frame {
                        function: symbol.name(),
                        file: symbol
                            .filename
                            .as_ref()
                            .map(|f| f.display().to_string())
                            .unwrap_or_default(),
                        line: symbol.lineno.map(i64::from).unwrap_or_default(),
                    })
                    .collect()
            })
            .collect();
        samples.push(CpuSample {
            stack,
            thread: frames.thread_name.clone(),
            count: i64::try_from(*count).unwrap_or(i64::MAX),
        });
    }
    let start = report
        .timing
        .start_time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(encode_cpu_profile(
        &samples,
        start,
        report.timing.duration,
        report.timing.frequency,
    ))
}

/// Builds pprof-rs's stack unwinder, once per process, before the first real sample.
///
/// pprof-rs builds it (reading every loaded object's unwind tables, allocating megabytes) the first
/// time its SIGPROF handler runs, inside the handler. When that first signal interrupted a thread in
/// the allocator, holding its lock, the handler waited for that lock forever and the whole process hung.
/// Here the first sample is this thread's own, raised at a point where it holds no lock: a throwaway
/// profile, with nothing blocklisted (the raise is in libc) and a timer too slow (1 Hz of CPU time) to
/// fire before the raise does; stopping it drops its one sample.
#[cfg(unix)]
fn prepare_unwinder() -> Result<(), ProfileError> {
    static PREPARED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if PREPARED.get().is_some() {
        return Ok(());
    }
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(1)
        .build()
        .map_err(|err| ProfileError::CpuBusy(err.to_string()))?;
    // Only this thread is signalled, and the profiler's handler is installed.
    let raised = nix::sys::signal::raise(nix::sys::signal::Signal::SIGPROF);
    drop(guard);
    raised.map_err(|err| {
        ProfileError::CpuBusy(format!("cannot prepare the stack unwinder: {err}"))
    })?;
    let _ = PREPARED.set(());
    Ok(())
}

#[cfg(not(unix))]
fn cpu_blocking(_duration: Duration) -> Result<Vec<u8>, ProfileError> {
    Err(ProfileError::CpuBusy(
        "CPU profiles need a Unix system".to_string(),
    ))
}

/// One function of a stack frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function's (demangled) name.
    pub function: String,
    /// Its source file, if known.
    pub file: String,
    /// The line, if known (0 otherwise).
    pub line: i64,
}

/// One sampled stack: its frames leaf first, each with the functions inlined into it (innermost first).
#[derive(Debug, Clone)]
pub struct CpuSample {
    /// The frames.
    pub stack: Vec<Vec<Frame>>,
    /// The sampled thread's name.
    pub thread: String,
    /// How many times it was sampled.
    pub count: i64,
}

/// A pprof protobuf writer of just what profiles need: varints, length-delimited fields, packed lists.
#[derive(Default)]
struct Proto(Vec<u8>);

impl Proto {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    /// A varint field, left out when zero (proto3).
    fn uint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.key(field, 0);
            self.varint(value);
        }
    }

    fn int(&mut self, field: u32, value: i64) {
        self.uint(field, value as u64);
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn message(&mut self, field: u32, build: impl FnOnce(&mut Proto)) {
        let mut inner = Proto::default();
        build(&mut inner);
        self.bytes(field, &inner.0);
    }

    fn packed(&mut self, field: u32, values: impl IntoIterator<Item = u64>) {
        let mut inner = Proto::default();
        for value in values {
            inner.varint(value);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
    }
}

/// The strings of a profile, each once, `""` first.
struct Strings {
    index: HashMap<String, i64>,
    table: Vec<String>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            index: HashMap::from([(String::new(), 0)]),
            table: vec![String::new()],
        }
    }

    fn id(&mut self, text: &str) -> i64 {
        if let Some(id) = self.index.get(text) {
            return *id;
        }
        let id = self.table.len() as i64;
        self.table.push(text.to_string());
        self.index.insert(text.to_string(), id);
        id
    }
}

/// Encodes a CPU profile (sample types `samples/count` and `cpu/nanoseconds`, period `cpu/nanoseconds`,
/// a `thread` label per sample) as pprof's `Profile` message.
pub fn encode_cpu_profile(
    samples: &[CpuSample],
    start: Duration,
    duration: Duration,
    frequency: i32,
) -> Vec<u8> {
    let period = 1_000_000_000 / i64::from(frequency.max(1));
    let mut strings = Strings::new();
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    let mut locations: HashMap<Vec<Frame>, u64> = HashMap::new();
    let mut out = Proto::default();
    let value_types = [("samples", "count"), ("cpu", "nanoseconds")];
    for (kind, unit) in value_types {
        let (kind, unit) = (strings.id(kind), strings.id(unit));
        out.message(1, |m| {
            m.int(1, kind);
            m.int(2, unit);
        });
    }
    let thread_key = strings.id("thread");
    let mut function_messages = Proto::default();
    let mut location_messages = Proto::default();
    for sample in samples {
        let mut ids = Vec::with_capacity(sample.stack.len());
        for frame in &sample.stack {
            if let Some(id) = locations.get(frame) {
                ids.push(*id);
                continue;
            }
            let location_id = locations.len() as u64 + 1;
            let mut lines = Vec::with_capacity(frame.len());
            for function in frame {
                let key = (function.function.clone(), function.file.clone());
                let function_id = match functions.get(&key) {
                    Some(id) => *id,
                    None => {
                        let id = functions.len() as u64 + 1;
                        let (name, file) = (strings.id(&key.0), strings.id(&key.1));
                        function_messages.message(5, |m| {
                            m.uint(1, id);
                            m.int(2, name);
                            m.int(3, name);
                            m.int(4, file);
                        });
                        functions.insert(key, id);
                        id
                    }
                };
                lines.push((function_id, function.line));
            }
            location_messages.message(4, |m| {
                m.uint(1, location_id);
                for (function_id, line) in &lines {
                    m.message(4, |l| {
                        l.uint(1, *function_id);
                        l.int(2, *line);
                    });
                }
            });
            locations.insert(frame.clone(), location_id);
            ids.push(location_id);
        }
        let thread = strings.id(&sample.thread);
        out.message(2, |m| {
            m.packed(1, ids.iter().copied());
            m.packed(
                2,
                [sample.count, sample.count.saturating_mul(period)]
                    .into_iter()
                    .map(|v| v as u64),
            );
            m.message(3, |l| {
                l.int(1, thread_key);
                l.int(2, thread);
            });
        });
    }
    out.0.extend_from_slice(&location_messages.0);
    out.0.extend_from_slice(&function_messages.0);
    let (cpu, nanoseconds) = (strings.id("cpu"), strings.id("nanoseconds"));
    for text in &strings.table {
        out.bytes(6, text.as_bytes());
    }
    out.int(9, i64::try_from(start.as_nanos()).unwrap_or(i64::MAX));
    out.int(10, i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX));
    out.message(11, |m| {
        m.int(1, cpu);
        m.int(2, nanoseconds);
    });
    out.int(12, period);
    out.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal protobuf reader for the test: the fields of one message as (number, wire value).
    fn fields(mut bytes: &[u8]) -> Vec<(u64, Result<u64, Vec<u8>>)> {
        fn varint(bytes: &mut &[u8]) -> u64 {
            let mut value = 0;
            let mut shift = 0;
            loop {
                let byte = bytes[0];
                *bytes = &bytes[1..];
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return value;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes);
            match key & 7 {
                0 => out.push((key >> 3, Ok(varint(&mut bytes)))),
                2 => {
                    let len = varint(&mut bytes) as usize;
                    out.push((key >> 3, Err(bytes[..len].to_vec())));
                    bytes = &bytes[len..];
                }
                other => panic!("unexpected wire type {other}"),
            }
        }
        out
    }

    #[test]
    fn cpu_profiles_are_pprof_messages() {
        let frame = |name: &str| Frame {
            function: name.to_string(),
            file: "src/lib.rs".to_string(),
            line: 7,
        };
        let samples = vec![
            CpuSample {
                stack: vec![vec![frame("leaf"), frame("inlined")], vec![frame("main")]],
                thread: "ccm-worker".into(),
                count: 3,
            },
            CpuSample {
                stack: vec![vec![frame("main")]],
                thread: "ccm-worker".into(),
                count: 1,
            },
        ];
        let bytes = encode_cpu_profile(
            &samples,
            Duration::from_secs(1),
            Duration::from_secs(2),
            100,
        );
        let top = fields(&bytes);
        let strings: Vec<String> = top
            .iter()
            .filter(|(n, _)| *n == 6)
            .map(|(_, v)| String::from_utf8(v.clone().unwrap_err()).unwrap())
            .collect();
        assert_eq!(strings[0], "");
        for name in [
            "samples",
            "cpu",
            "nanoseconds",
            "leaf",
            "inlined",
            "main",
            "ccm-worker",
        ] {
            assert!(strings.iter().any(|s| s == name), "{name}: {strings:?}");
        }
        assert_eq!(
            top.iter().filter(|(n, _)| *n == 2).count(),
            2,
            "two samples"
        );
        assert_eq!(
            top.iter().filter(|(n, _)| *n == 4).count(),
            2,
            "two locations"
        );
        assert_eq!(
            top.iter().filter(|(n, _)| *n == 5).count(),
            3,
            "three functions"
        );
        let period = top
            .iter()
            .find(|(n, _)| *n == 12)
            .unwrap()
            .1
            .clone()
            .unwrap();
        assert_eq!(period, 10_000_000);
        let duration = top
            .iter()
            .find(|(n, _)| *n == 10)
            .unwrap()
            .1
            .clone()
            .unwrap();
        assert_eq!(duration, 2_000_000_000);
        // The first sample: locations 1 and 2, values 3 samples and 30 ms.
        let sample = fields(
            &top.iter()
                .find(|(n, _)| *n == 2)
                .unwrap()
                .1
                .clone()
                .unwrap_err(),
        );
        assert_eq!(sample[0].1.clone().unwrap_err(), vec![1, 2]);
        let values = sample[1].1.clone().unwrap_err();
        assert_eq!(values[0], 3);
        // The first location holds two lines: the inlined function, then the one it is inlined into.
        let location = fields(
            &top.iter()
                .find(|(n, _)| *n == 4)
                .unwrap()
                .1
                .clone()
                .unwrap_err(),
        );
        assert_eq!(location.iter().filter(|(n, _)| *n == 4).count(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cpu_profile_samples_this_process() {
        // Busy until the profile is taken: starting the profiler can itself take seconds on a loaded
        // machine (it symbolizes one backtrace of this debug binary first).
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy = std::thread::spawn({
            let done = done.clone();
            move || {
                let mut x = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                x
            }
        });
        let profile = cpu(1).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.join().unwrap();
        let profile = profile.unwrap();
        let top = fields(&profile);
        assert!(
            top.iter().any(|(n, _)| *n == 2),
            "no sample in a busy second"
        );
    }
}
