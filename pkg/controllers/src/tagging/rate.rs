//! A token bucket: at most `rate` acquisitions per second on average, `burst` at once.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// A token bucket shared by the workers of one controller.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A full bucket of `burst` tokens refilled at `rate` per second (both greater than 0).
    pub(crate) fn new(rate: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token, and how long to wait before using it (zero when one was there).
    fn reserve(&self, now: Instant) -> Duration {
        let mut state = self.state.lock();
        let (tokens, last) = *state;
        let refilled = (tokens + now.saturating_duration_since(last).as_secs_f64() * self.rate)
            .min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(
                (-left / self.rate).min(crate::workqueue::MAX_DELAY.as_secs_f64()),
            )
        }
    }

    /// Waits until a token is available and takes it.
    pub(crate) async fn acquire(&self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        let limiter = RateLimiter::new(2.0, 3);
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.reserve(start), Duration::ZERO);
        }
        // Empty: the next tokens come every half second.
        assert_eq!(limiter.reserve(start), Duration::from_millis(500));
        assert_eq!(limiter.reserve(start), Duration::from_secs(1));
        // Two seconds later four tokens have come, two of them owed: two are free.
        let later = start + Duration::from_secs(2);
        assert_eq!(limiter.reserve(later), Duration::ZERO);
        assert_eq!(limiter.reserve(later), Duration::ZERO);
        assert_eq!(limiter.reserve(later), Duration::from_millis(500));
    }
}
