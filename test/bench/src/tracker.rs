//! Completion tracking: one watch (kube-runtime `watcher`, re-listing when it must) follows a resource type
//! and timestamps the moment each expected object first reaches its goal (a predicate on the object, or
//! its deletion).
//!
//! A deletion that happens while the watch is down is noticed at the next complete list: an expected
//! object missing from it counts as deleted at that moment.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What completes an object.
#[derive(Clone, Copy)]
pub struct Goal<K> {
    /// The object reached its goal state.
    pub reached: fn(&K) -> bool,
    /// A deletion of the object completes it too.
    pub deletion_completes: bool,
}

#[derive(Default)]
struct State {
    expected: HashSet<String>,
    done: HashMap<String, Instant>,
    /// Names seen by the list in progress, if one is in progress.
    listing: Option<HashSet<String>>,
    /// Complete lists seen so far.
    lists: u32,
    /// Watch errors seen (the watcher retries them).
    errors: u32,
}

struct Shared {
    state: Mutex<State>,
    /// Number of completed objects, for waiters.
    progress: watch::Sender<usize>,
    /// Whether the first complete list has arrived.
    synced: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn complete(&self, state: &mut State, name: &str, at: Instant) {
        if state.expected.contains(name) && !state.done.contains_key(name) {
            state.done.insert(name.to_string(), at);
            self.progress.send_replace(state.done.len());
        }
    }
}

/// Follows one resource type and records when each expected object completed.
pub struct Tracker {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Tracker {
    /// Starts watching `api`; objects named in `expected` complete when `goal` says so.
    pub fn start<K>(
        api: Api<K>,
        expected: impl IntoIterator<Item = String>,
        goal: Goal<K>,
    ) -> Tracker
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                expected: expected.into_iter().collect(),
                ..State::default()
            }),
            progress: watch::channel(0).0,
            synced: watch::channel(false).0,
        });
        let task = tokio::spawn(follow(api, goal, shared.clone()));
        Tracker { shared, task }
    }

    /// Waits for the first complete list (so that no later change can be missed).
    pub async fn wait_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        let mut synced = self.shared.synced.subscribe();
        match tokio::time::timeout(timeout, synced.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => bail!("the benchmark's watch stopped before its first list"),
            Err(_) => bail!("the benchmark's watch did not list within {timeout:?}"),
        }
    }

    /// Waits until every expected object completed or `deadline` passed; true when all completed.
    pub async fn wait_all(&self, deadline: tokio::time::Instant) -> bool {
        let total = self.expected();
        let mut progress = self.shared.progress.subscribe();
        matches!(
            tokio::time::timeout_at(deadline, progress.wait_for(|done| *done >= total)).await,
            Ok(Ok(_))
        )
    }

    /// The number of expected objects.
    pub fn expected(&self) -> usize {
        self.shared.lock().expected.len()
    }

    /// How many expected objects completed so far.
    pub fn done_count(&self) -> usize {
        self.shared.lock().done.len()
    }

    /// When each completed object completed.
    pub fn completions(&self) -> HashMap<String, Instant> {
        self.shared.lock().done.clone()
    }

    /// Watch errors the watcher recovered from.
    pub fn watch_errors(&self) -> u32 {
        self.shared.lock().errors
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn follow<K>(api: Api<K>, goal: Goal<K>, shared: Arc<Shared>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        let now = Instant::now();
        let event = match event {
            Ok(event) => event,
            Err(_) => {
                shared.lock().errors += 1;
                continue;
            }
        };
        let mut state = shared.lock();
        match event {
            watcher::Event::Init => state.listing = Some(HashSet::new()),
            watcher::Event::InitApply(object) => {
                let name = object.name_any();
                if let Some(seen) = state.listing.as_mut() {
                    seen.insert(name.clone());
                }
                if (goal.reached)(&object) {
                    shared.complete(&mut state, &name, now);
                }
            }
            watcher::Event::InitDone => {
                let seen = state.listing.take().unwrap_or_default();
                if state.lists > 0 && goal.deletion_completes {
                    let vanished: Vec<String> = state
                        .expected
                        .iter()
                        .filter(|name| !seen.contains(*name))
                        .cloned()
                        .collect();
                    for name in vanished {
                        shared.complete(&mut state, &name, now);
                    }
                }
                state.lists += 1;
                drop(state);
                shared.synced.send_replace(true);
            }
            watcher::Event::Apply(object) => {
                if (goal.reached)(&object) {
                    shared.complete(&mut state, &object.name_any(), now);
                }
            }
            watcher::Event::Delete(object) => {
                if goal.deletion_completes {
                    shared.complete(&mut state, &object.name_any(), now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{is_uninitialized, node_name, tainted_node};
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

    #[tokio::test]
    async fn records_goals_and_deletions_of_expected_objects_only() {
        let server = test_apiserver::TestApiServer::builder()
            .plain_http(true)
            .start()
            .await
            .unwrap();
        let nodes: Api<Node> = Api::all(server.client().unwrap());
        for i in 0..3 {
            nodes
                .create(&PostParams::default(), &tainted_node(i))
                .await
                .unwrap();
        }
        let tracker = Tracker::start(
            nodes.clone(),
            [node_name(0), node_name(1)],
            Goal {
                reached: |n: &Node| !is_uninitialized(n),
                deletion_completes: true,
            },
        );
        tracker.wait_synced(Duration::from_secs(10)).await.unwrap();
        assert_eq!(tracker.expected(), 2);
        assert!(tracker.completions().is_empty());

        // Not expected: ignored even though it reaches the goal.
        let untaint = serde_json::json!({"spec": {"taints": null}});
        nodes
            .patch(
                &node_name(2),
                &PatchParams::default(),
                &Patch::Merge(&untaint),
            )
            .await
            .unwrap();
        // Expected: one reaches the goal, one is deleted.
        let before = Instant::now();
        nodes
            .patch(
                &node_name(0),
                &PatchParams::default(),
                &Patch::Merge(&untaint),
            )
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        assert!(!tracker.wait_all(tokio::time::Instant::now()).await);
        nodes
            .delete(&node_name(1), &DeleteParams::default())
            .await
            .unwrap();
        assert!(tracker.wait_all(deadline).await);
        let done = tracker.completions();
        assert_eq!(done.len(), 2);
        assert!(done[&node_name(0)] >= before);
        assert!(!done.contains_key(&node_name(2)));
        server.shutdown().await;
    }
}
