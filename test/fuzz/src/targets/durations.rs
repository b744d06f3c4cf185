//! `durations`: time values from outside: the daemon's Go-syntax duration flags (`--node-monitor-period`
//! and the like), and a cloud's `Retry-After` / `RateLimit-Reset` headers as the DigitalOcean client reads
//! them, through to the work queue that schedules the retry.
//!
//! Input: byte 0 picks the parser (even: a duration flag, odd: response headers); for headers, the rest is
//! `Retry-After`, `0xFF`, `RateLimit-Reset`, `0xFF`, 8 bytes of "now" in seconds since the epoch.
//!
//! Contract: no panic (no overflow from any delay, however large); an accepted duration written back in
//! nanoseconds reads back equal; any wait a response asks for can be scheduled, capped at the queue's
//! longest delay.

use std::time::{Duration, SystemTime};

use ccm_app::duration::parse_duration;
use cloud_controllers::workqueue::{MAX_DELAY, WorkQueue};
use http::{HeaderMap, HeaderValue};
use provider_digitalocean::client::rate_limit_wait;

use crate::input;

/// Runs one duration parser over one input.
pub fn check(data: &[u8]) {
    let (selector, rest) = data.split_first().unwrap_or((&0, &[]));
    if selector % 2 == 0 {
        duration_flag(&input::text(rest));
    } else {
        response_wait(rest);
    }
}

fn duration_flag(text: &str) {
    let Ok(duration) = parse_duration(text) else {
        return;
    };
    let written = format!("{}ns", duration.as_nanos());
    assert_eq!(
        parse_duration(&written).ok(),
        Some(duration),
        "{text:?} does not round-trip"
    );
}

fn response_wait(data: &[u8]) {
    let [retry_after, reset, now] = input::fields(data, 3)[..] else {
        unreachable!("fields returns exactly three fields")
    };
    let mut headers = HeaderMap::new();
    for (name, value) in [("retry-after", retry_after), ("ratelimit-reset", reset)] {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.insert(name, value);
        }
    }
    let mut secs = [0u8; 8];
    let n = now.len().min(8);
    secs[..n].copy_from_slice(&now[..n]);
    let Some(now) =
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(u64::from_be_bytes(secs)))
    else {
        return;
    };
    let Some(wait) = rate_limit_wait(&headers, now) else {
        return;
    };
    let queue: WorkQueue<u8> = WorkQueue::new(Duration::from_millis(5), Duration::from_secs(1000));
    let scheduled = queue.add_rate_limited(0, Some(wait));
    assert!(
        scheduled <= MAX_DELAY,
        "a retry scheduled {scheduled:?} ahead"
    );
    assert_eq!(scheduled, wait.max(Duration::from_millis(5)).min(MAX_DELAY));
}
