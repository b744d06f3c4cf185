//! Process metrics read from `/proc/self` on every scrape, with the standard Prometheus names:
//! `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
//! `process_open_fds`, `process_max_fds` and `process_start_time_seconds`.
//!
//! Values that cannot be read (another OS, a restricted /proc) are left out of the scrape rather than
//! reported as zero.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second used by `/proc/<pid>/stat` (USER_HZ, 100 on every Linux architecture).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// A snapshot of the process' resource usage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessSample {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, in bytes.
    pub resident_memory_bytes: Option<u64>,
    /// Virtual memory size, in bytes.
    pub virtual_memory_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// Start time since the Unix epoch, in seconds.
    pub start_time_seconds: Option<f64>,
}

impl ProcessSample {
    /// Reads `/proc/self`.
    pub fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let limits = std::fs::read_to_string("/proc/self/limits").ok();
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| parse_boot_time(&text));
        let stat_fields = stat.as_deref().and_then(parse_stat);
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|dir| dir.count() as u64);
        Self {
            cpu_seconds: stat_fields.map(|s| (s.utime + s.stime) as f64 / CLOCK_TICKS_PER_SECOND),
            resident_memory_bytes: status.as_deref().and_then(|s| status_kb(s, "VmRSS:")),
            virtual_memory_bytes: status.as_deref().and_then(|s| status_kb(s, "VmSize:")),
            open_fds,
            max_fds: limits.as_deref().and_then(parse_max_open_files),
            start_time_seconds: match (stat_fields, boot_time) {
                (Some(s), Some(boot)) => {
                    Some(boot as f64 + s.starttime as f64 / CLOCK_TICKS_PER_SECOND)
                }
                _ => None,
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
}

/// Fields 14, 15 and 22 of `/proc/<pid>/stat`; the command name (field 2) may contain spaces and
/// parentheses, so parsing starts after its last `)`.
fn parse_stat(text: &str) -> Option<StatFields> {
    let rest = &text[text.rfind(')')? + 1..];
    // After the command: field 3 (state) is at index 0.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(StatFields {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
    })
}

fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn status_kb(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A [`Collector`] that samples `/proc/self` on each scrape.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = ProcessSample::read();
        if let Some(cpu) = sample.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges: [(&str, &str, Option<f64>); 5] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                sample.resident_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                sample.virtual_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                sample.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                sample.max_fds.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                sample.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                gauge.encode(metric)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        let stat = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 \
                    98765 1000000 500 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(StatFields {
                utime: 250,
                stime: 50,
                starttime: 98765
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(
            parse_boot_time("cpu 1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        assert_eq!(
            status_kb("Name:\tx\nVmRSS:\t  2048 kB\n", "VmRSS:"),
            Some(2_097_152)
        );
        assert_eq!(
            parse_max_open_files(
                "Limit                     Soft Limit           Hard Limit           Units\n\
                 Max open files            1024                 524288               files\n"
            ),
            Some(1024)
        );
    }

    #[test]
    fn this_process_is_sampled() {
        let sample = ProcessSample::read();
        if cfg!(target_os = "linux") {
            assert!(sample.resident_memory_bytes.unwrap() > 0);
            assert!(sample.open_fds.unwrap() >= 3);
            assert!(sample.cpu_seconds.unwrap() >= 0.0);
            let now = jiff::Timestamp::now().as_second() as f64;
            let start = sample.start_time_seconds.unwrap();
            assert!(
                start <= now + 1.0 && start > now - 86_400.0 * 365.0,
                "{start}"
            );
        }
    }

    #[test]
    fn collector_output_has_the_standard_names() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        if cfg!(target_os = "linux") {
            for name in [
                "# TYPE process_cpu_seconds counter",
                "process_cpu_seconds_total ",
                "process_resident_memory_bytes ",
                "process_open_fds ",
                "process_start_time_seconds ",
                "process_max_fds ",
            ] {
                assert!(text.contains(name), "{name} missing in\n{text}");
            }
        }
    }
}
