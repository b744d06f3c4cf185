//! The latency the fake cloud adds to a call: on the runtime's timer, or (`preciseLatency`) to within tens
//! of microseconds. The runtime's timer counts whole milliseconds and rounds up, so a "20 ms" call lasts
//! 20.5 to 21 ms on it. For a precise wait, one thread of the process keeps the deadlines and wakes each
//! waiting call at its own (the operating system's timer is precise), at the price of a wake-up from
//! another thread per call; a call dropped while it waits is skipped at its deadline.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// Waits `latency`: to within tens of microseconds when `precise` (and the waking thread could be
/// started), else on the runtime's timer.
pub(crate) async fn wait(latency: Duration, precise: bool) {
    match precise.then(waker).flatten() {
        Some(waker) => {
            let (wake, woken) = oneshot::channel();
            waker.schedule(Instant::now() + latency, wake);
            // The waker never drops a waiter before its deadline.
            let _ = woken.await;
        }
        None => tokio::time::sleep(latency).await,
    }
}

/// The process's waking thread, started on first use.
fn waker() -> Option<&'static Waker> {
    static WAKER: OnceLock<Option<&'static Waker>> = OnceLock::new();
    *WAKER.get_or_init(|| {
        let waker: &'static Waker = Box::leak(Box::default());
        std::thread::Builder::new()
            .name("fake-cloud-latency".to_string())
            .spawn(|| waker.run())
            .ok()
            .map(|_| waker)
    })
}

/// Deadlines of the calls waiting, earliest first.
#[derive(Default)]
struct Waker {
    waiting: Mutex<Waiting>,
    changed: Condvar,
}

#[derive(Default)]
struct Waiting {
    deadlines: BinaryHeap<Deadline>,
    scheduled: u64,
}

/// One waiting call: ordered by deadline, then by when it was scheduled (the heap is a max-heap, so the
/// order is reversed).
struct Deadline {
    at: Instant,
    sequence: u64,
    wake: oneshot::Sender<()>,
}

impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.sequence).cmp(&(self.at, self.sequence))
    }
}

impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Deadline {}

impl Waker {
    fn schedule(&self, at: Instant, wake: oneshot::Sender<()>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.scheduled += 1;
        let sequence = waiting.scheduled;
        // The thread sleeps until the earliest deadline: it only needs waking for an earlier one.
        let sooner = waiting.deadlines.peek().is_none_or(|first| at < first.at);
        waiting.deadlines.push(Deadline { at, sequence, wake });
        if sooner {
            self.changed.notify_one();
        }
    }

    /// Wakes every call whose deadline has come, then sleeps until the next deadline or a new call.
    fn run(&self) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let now = Instant::now();
            while waiting
                .deadlines
                .peek()
                .is_some_and(|first| first.at <= now)
            {
                if let Some(due) = waiting.deadlines.pop() {
                    let _ = due.wake.send(());
                }
            }
            waiting = match waiting.deadlines.peek().map(|first| first.at - now) {
                Some(until_next) => {
                    self.changed
                        .wait_timeout(waiting, until_next)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait(waiting)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_wait_at_least_their_latency_and_are_woken_in_deadline_order() {
        let start = Instant::now();
        let long = tokio::spawn(async move {
            wait(Duration::from_millis(30), true).await;
            Instant::now()
        });
        let short = tokio::spawn(async move {
            wait(Duration::from_millis(10), true).await;
            Instant::now()
        });
        let (long, short) = (long.await.unwrap(), short.await.unwrap());
        assert!(short - start >= Duration::from_millis(10));
        assert!(long - start >= Duration::from_millis(30));
        assert!(short < long);
    }

    #[tokio::test]
    async fn a_dropped_call_does_not_stop_the_others() {
        let dropped = tokio::spawn(wait(Duration::from_millis(5), true));
        dropped.abort();
        let start = Instant::now();
        wait(Duration::from_millis(15), true).await;
        assert!(start.elapsed() >= Duration::from_millis(15));
    }
}
