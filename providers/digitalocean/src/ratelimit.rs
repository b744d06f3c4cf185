//! The client-side API rate limit (`DO_API_RATE_LIMIT_QPS`): a token bucket with a burst of one, so calls
//! are spaced evenly at the configured rate. Waiters are served in arrival order.

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket (GCRA form): each call reserves the next free slot and sleeps until it.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    next_free: parking_lot::Mutex<Option<Instant>>,
}

impl RateLimiter {
    /// A limiter allowing `qps` calls per second (`qps` must be positive and finite).
    pub fn new(qps: f64) -> Self {
        RateLimiter {
            interval: Duration::from_secs_f64(1.0 / qps),
            next_free: parking_lot::Mutex::new(None),
        }
    }

    /// The spacing between two calls.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Waits for the caller's turn.
    pub async fn acquire(&self) {
        let at = {
            let mut next = self.next_free.lock();
            let now = Instant::now();
            let at = match *next {
                Some(t) if t > now => t,
                _ => now,
            };
            *next = Some(at + self.interval);
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn spaces_calls_evenly() {
        let limiter = RateLimiter::new(4.0);
        assert_eq!(limiter.interval(), Duration::from_millis(250));
        let start = Instant::now();
        for _ in 0..5 {
            limiter.acquire().await;
        }
        // The first call is immediate, the next four wait one interval each.
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        // After an idle period there is no catch-up burst beyond one call.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let start = Instant::now();
        limiter.acquire().await;
        limiter.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_millis(250));
    }
}
