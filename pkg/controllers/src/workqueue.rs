//! A de-duplicating work queue with delayed adds and per-key exponential backoff, shared by the workers of
//! one controller.
//!
//! A key is queued at most once; a key added while a worker processes it is queued again when the worker
//! calls [`WorkQueue::done`], so no change is missed and no key is processed by two workers at once.
//! Workers may take several keys at a time ([`WorkQueue::next_batch`]) to amortize cloud calls.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::workqueue_metrics::{QueueLabels, RunningWork, WorkqueueMetrics};

/// The longest delay honoured: a provider asking to retry later than this (a `Retry-After` of years, say) is
/// retried after it instead, and no deadline arithmetic can overflow.
pub const MAX_DELAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The instant `delay` from now, `delay` capped at [`MAX_DELAY`].
fn deadline_after(delay: Duration) -> Instant {
    Instant::now() + delay.min(MAX_DELAY)
}

struct State<K> {
    /// Keys ready to be processed, with when they were queued.
    ready: VecDeque<(K, Instant)>,
    queued: HashSet<K>,
    /// Keys being processed, with when their processing started.
    processing: HashMap<K, Instant>,
    dirty: HashSet<K>,
    delayed: BinaryHeap<Reverse<(Instant, u64, K)>>,
    delayed_at: HashMap<K, Instant>,
    failures: HashMap<K, u32>,
    sequence: u64,
    shut_down: bool,
    /// Set by [`WorkQueue::finish_when_idle`].
    single_pass: bool,
}

impl<K> State<K> {
    /// In a single pass, shuts the queue down once nothing is ready, being processed or delayed.
    fn shut_down_if_finished(&mut self) -> bool {
        if self.single_pass
            && self.ready.is_empty()
            && self.processing.is_empty()
            && self.delayed_at.is_empty()
        {
            self.shut_down = true;
        }
        self.shut_down
    }
}

struct Inner<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    base_delay: Duration,
    max_delay: Duration,
    metrics: Option<QueueMetrics>,
}

/// The metrics of a named queue.
struct QueueMetrics {
    labels: QueueLabels,
    families: WorkqueueMetrics,
}

impl<K> Inner<K> {
    /// Counts an add and sets the depth (keys ready or waiting for their processing to end).
    fn count_add(&self, s: &State<K>) {
        if let Some(m) = &self.metrics {
            m.families.adds.get_or_create(&m.labels).inc();
            self.set_depth(s);
        }
    }

    fn set_depth(&self, s: &State<K>) {
        if let Some(m) = &self.metrics {
            let depth = i64::try_from(s.ready.len() + s.dirty.len()).unwrap_or(i64::MAX);
            m.families.depth.get_or_create(&m.labels).set(depth);
        }
    }

    fn observe(
        &self,
        family: fn(&WorkqueueMetrics) -> &Family<QueueLabels, Histogram>,
        since: Instant,
    ) {
        if let Some(m) = &self.metrics {
            family(&m.families)
                .get_or_create(&m.labels)
                .observe(since.elapsed().as_secs_f64());
        }
    }
}

impl<K: Send + Sync> RunningWork for Inner<K> {
    fn running_seconds(&self) -> (f64, f64) {
        let s = self.state.lock();
        s.processing
            .values()
            .fold((0.0, 0.0), |(sum, max), started| {
                let seconds = started.elapsed().as_secs_f64();
                (sum + seconds, f64::max(max, seconds))
            })
    }
}

/// The work queue; cheap to clone (clones share the queue).
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<K> std::fmt::Debug for WorkQueue<K>
where
    K: Eq + Hash + Clone + Ord,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.state.lock();
        f.debug_struct("WorkQueue")
            .field("ready", &s.ready.len())
            .field("processing", &s.processing.len())
            .field("delayed", &s.delayed_at.len())
            .finish()
    }
}

/// Exponential backoff: `base * 2^(failures-1)`, at most `max`.
pub fn backoff_delay(base: Duration, max: Duration, failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32 << (failures - 1).min(30);
    base.saturating_mul(factor).min(max)
}

impl<K> WorkQueue<K>
where
    K: Eq + Hash + Clone + Ord,
{
    /// An empty queue whose rate-limited re-adds back off from `base_delay` up to `max_delay`.
    pub fn new(base_delay: Duration, max_delay: Duration) -> Self {
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    ready: VecDeque::new(),
                    queued: HashSet::new(),
                    processing: HashMap::new(),
                    dirty: HashSet::new(),
                    delayed: BinaryHeap::new(),
                    delayed_at: HashMap::new(),
                    failures: HashMap::new(),
                    sequence: 0,
                    shut_down: false,
                    single_pass: false,
                }),
                notify: Notify::new(),
                base_delay,
                max_delay,
                metrics: None,
            }),
        }
    }

    /// Reports this queue's `workqueue_*` metrics under the upstream queue `name` (see
    /// [`crate::workqueue_metrics::queue_names`]). Call right after [`WorkQueue::new`], before cloning.
    pub fn with_metrics(mut self, name: &str, metrics: &WorkqueueMetrics) -> Self
    where
        K: Send + Sync + 'static,
    {
        let labels = QueueLabels {
            name: name.to_string(),
        };
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.metrics = Some(QueueMetrics {
                labels: labels.clone(),
                families: metrics.clone(),
            });
            let running: Arc<dyn RunningWork> = self.inner.clone();
            metrics.track(labels, Arc::downgrade(&running));
        }
        self
    }

    /// Queues `key` now (no-op when already queued; re-queued after processing when being processed).
    pub fn add(&self, key: K) {
        let mut s = self.inner.state.lock();
        if s.shut_down || s.queued.contains(&key) {
            return;
        }
        if s.processing.contains_key(&key) {
            if s.dirty.insert(key) {
                self.inner.count_add(&s);
            }
            return;
        }
        s.queued.insert(key.clone());
        s.ready.push_back((key, Instant::now()));
        self.inner.count_add(&s);
        drop(s);
        self.inner.notify.notify_one();
    }

    /// Queues `key` after `delay` (an earlier pending delayed add of the same key wins).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = deadline_after(delay);
        let mut s = self.inner.state.lock();
        if s.shut_down || s.single_pass {
            return;
        }
        if let Some(existing) = s.delayed_at.get(&key)
            && *existing <= at
        {
            return;
        }
        s.sequence += 1;
        let seq = s.sequence;
        s.delayed_at.insert(key.clone(), at);
        s.delayed.push(Reverse((at, seq, key)));
        drop(s);
        // A worker sleeping until a later deadline must look again.
        self.inner.notify.notify_one();
    }

    /// Records a failure of `key` and queues it again after its backoff delay (or after `at_least`, when
    /// longer, e.g. a cloud `Retry` delay). Returns the delay used.
    pub fn add_rate_limited(&self, key: K, at_least: Option<Duration>) -> Duration {
        if let Some(m) = &self.inner.metrics {
            m.families.retries.get_or_create(&m.labels).inc();
        }
        let failures = {
            let mut s = self.inner.state.lock();
            let n = s.failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let mut delay = backoff_delay(self.inner.base_delay, self.inner.max_delay, failures);
        if let Some(min) = at_least {
            delay = delay.max(min);
        }
        let delay = delay.min(MAX_DELAY);
        self.add_after(key, delay);
        delay
    }

    /// Clears the failure count of `key` (after a successful sync).
    pub fn forget(&self, key: &K) {
        self.inner.state.lock().failures.remove(key);
    }

    /// Consecutive failures recorded for `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.inner
            .state
            .lock()
            .failures
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Marks `key` processed; re-queues it when it was added while being processed.
    pub fn done(&self, key: &K) {
        let mut s = self.inner.state.lock();
        if let Some(started) = s.processing.remove(key) {
            self.inner.observe(|m| &m.work_duration, started);
        }
        if s.dirty.remove(key) && !s.shut_down {
            s.queued.insert(key.clone());
            s.ready.push_back((key.clone(), Instant::now()));
            drop(s);
            self.inner.notify.notify_one();
        } else if s.shut_down_if_finished() {
            drop(s);
            self.inner.notify.notify_waiters();
            self.inner.notify.notify_one();
        }
    }

    /// Makes this a single pass over the keys queued so far (a dry run): delayed and rate-limited adds
    /// (retries) are dropped, and the queue shuts itself down (workers get `None`) once every key has been
    /// processed.
    pub fn finish_when_idle(&self) {
        let mut s = self.inner.state.lock();
        s.single_pass = true;
        s.delayed.clear();
        s.delayed_at.clear();
        if s.shut_down_if_finished() {
            drop(s);
            self.inner.notify.notify_waiters();
            self.inner.notify.notify_one();
        }
    }

    /// Keys ready now (not counting delayed ones).
    pub fn len(&self) -> usize {
        self.inner.state.lock().ready.len()
    }

    /// Whether nothing is ready, being processed or delayed.
    pub fn is_empty(&self) -> bool {
        let s = self.inner.state.lock();
        s.ready.is_empty() && s.processing.is_empty() && s.delayed_at.is_empty()
    }

    /// Stops the queue: waiting workers get `None`, later adds are ignored.
    pub fn shut_down(&self) {
        self.inner.state.lock().shut_down = true;
        self.inner.notify.notify_waiters();
        self.inner.notify.notify_one();
    }

    /// Waits for the next key; `None` once the queue is shut down.
    pub async fn next(&self) -> Option<K> {
        self.next_batch(1, 1).await.and_then(|mut v| v.pop())
    }

    /// Waits until keys are ready and takes up to `max` of them, but no more than a `1/share` part of the
    /// ready keys (rounded up), so that `share` workers split a burst between them. Every returned key must
    /// be passed to [`WorkQueue::done`]. `None` once the queue is shut down.
    pub async fn next_batch(&self, max: usize, share: usize) -> Option<Vec<K>> {
        loop {
            let notified = self.inner.notify.notified();
            let deadline = {
                let mut s = self.inner.state.lock();
                if s.shut_down || s.shut_down_if_finished() {
                    drop(s);
                    // Pass the news on to a worker that was not yet waiting when the queue shut down.
                    self.inner.notify.notify_one();
                    return None;
                }
                let now = Instant::now();
                promote_due(&self.inner, &mut s, now);
                if !s.ready.is_empty() {
                    let take = s
                        .ready
                        .len()
                        .div_ceil(share.max(1))
                        .clamp(1, max.max(1))
                        .min(s.ready.len());
                    let mut batch = Vec::with_capacity(take);
                    for _ in 0..take {
                        let Some((key, queued_at)) = s.ready.pop_front() else {
                            break;
                        };
                        self.inner.observe(|m| &m.queue_duration, queued_at);
                        s.queued.remove(&key);
                        s.processing.insert(key.clone(), now);
                        batch.push(key);
                    }
                    self.inner.set_depth(&s);
                    let more = !s.ready.is_empty();
                    drop(s);
                    if more {
                        self.inner.notify.notify_one();
                    }
                    return Some(batch);
                }
                s.delayed.peek().map(|Reverse((at, _, _))| *at)
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

fn promote_due<K: Eq + Hash + Clone + Ord>(inner: &Inner<K>, s: &mut State<K>, now: Instant) {
    while let Some(Reverse((at, _, _))) = s.delayed.peek() {
        if *at > now {
            break;
        }
        let Some(Reverse((at, _, key))) = s.delayed.pop() else {
            break;
        };
        // Skip stale heap entries superseded by an earlier add_after.
        if s.delayed_at.get(&key) != Some(&at) {
            continue;
        }
        s.delayed_at.remove(&key);
        if s.queued.contains(&key) {
            continue;
        }
        if s.processing.contains_key(&key) {
            if s.dirty.insert(key) {
                inner.count_add(s);
            }
            continue;
        }
        s.queued.insert(key.clone());
        s.ready.push_back((key, now));
        inner.count_add(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_single_pass_processes_each_key_once_and_then_ends() {
        let queue = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        queue.add("a");
        queue.add("b");
        queue.finish_when_idle();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    while let Some(key) = queue.next().await {
                        seen.push(key);
                        // A failure's retry is dropped in a single pass.
                        queue.add_rate_limited(key, None);
                        queue.done(&key);
                    }
                    seen
                })
            })
            .collect();
        let mut seen = Vec::new();
        for worker in workers {
            seen.extend(
                tokio::time::timeout(Duration::from_secs(5), worker)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        seen.sort_unstable();
        assert_eq!(seen, ["a", "b"]);
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn an_empty_single_pass_ends_at_once() {
        let queue: WorkQueue<&str> =
            WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        queue.add_after("later", Duration::from_secs(60));
        queue.finish_when_idle();
        assert_eq!(queue.next().await, None);
    }

    #[test]
    fn backoff_grows_and_caps() {
        let base = Duration::from_millis(5);
        let max = Duration::from_secs(1);
        assert_eq!(backoff_delay(base, max, 0), Duration::ZERO);
        assert_eq!(backoff_delay(base, max, 1), Duration::from_millis(5));
        assert_eq!(backoff_delay(base, max, 3), Duration::from_millis(20));
        assert_eq!(backoff_delay(base, max, 20), max);
        assert_eq!(backoff_delay(base, max, 500), max);
    }

    #[tokio::test]
    async fn dedups_and_requeues_keys_added_while_processing() {
        let q = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        let batch = q.next_batch(10, 1).await.unwrap();
        assert_eq!(batch, vec!["a", "b"]);
        q.add("a");
        assert_eq!(q.len(), 0, "a is being processed: marked dirty, not queued");
        q.done(&"a");
        q.done(&"b");
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn batches_are_split_between_workers() {
        let q = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        for i in 0..10 {
            q.add(i);
        }
        assert_eq!(q.next_batch(100, 4).await.unwrap().len(), 3);
        assert_eq!(q.next_batch(2, 1).await.unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_and_rate_limited_adds() {
        let q = WorkQueue::new(Duration::from_millis(100), Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(q.add_rate_limited("k", None), Duration::from_millis(100));
        assert_eq!(q.len(), 0);
        assert_eq!(q.next().await, Some("k"));
        assert!(start.elapsed() >= Duration::from_millis(100));
        q.done(&"k");
        assert_eq!(
            q.add_rate_limited("k", Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(q.failures(&"k"), 2);
        q.add_after("k", Duration::from_secs(1));
        assert_eq!(q.next().await, Some("k"));
        assert!(start.elapsed() < Duration::from_millis(1200));
        q.done(&"k");
        q.forget(&"k");
        assert_eq!(q.failures(&"k"), 0);
        // The superseded 3 s entry is stale and never fires.
        assert!(q.is_empty());
        let again = tokio::time::timeout(Duration::from_secs(5), q.next()).await;
        assert!(again.is_err(), "stale delayed entry fired");
    }

    #[tokio::test]
    async fn shut_down_releases_waiters() {
        let q: WorkQueue<u32> = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.next().await });
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
