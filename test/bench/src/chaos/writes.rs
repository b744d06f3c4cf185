//! The benchmark's own writes while the API server fails some of them: every write is retried until it
//! goes through (an injected 500, 409 Conflict or 429 is not an answer), and a repeated create that finds
//! the object, or a delete that finds it gone, counts as done.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Attempts of one write before the benchmark gives up.
const MAX_ATTEMPTS: u32 = 40;
/// Pause between attempts.
const PAUSE: Duration = Duration::from_millis(50);

/// Whether an API error is one the chaos injects (or a transient one), so the write is tried again.
fn retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => match status.code {
            409 => status.reason == "Conflict",
            429 | 500 | 503 | 504 => true,
            _ => false,
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn is_status(error: &kube::Error, code: u16, reason: &str) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == code && s.reason == reason)
}

/// Runs `write` until it succeeds, fails for good, or `MAX_ATTEMPTS` are spent; `done_on` says which final
/// error means the write's purpose is reached anyway (e.g. AlreadyExists on a repeated create).
async fn retry<T, F, Fut>(
    what: &str,
    mut write: F,
    done_on: impl Fn(&kube::Error) -> bool,
) -> anyhow::Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match write().await {
            Ok(value) => return Ok(Some(value)),
            Err(error) if attempt > 1 && done_on(&error) => return Ok(None),
            Err(error) if retryable(&error) && attempt < MAX_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(PAUSE).await;
            }
            Err(error) => {
                return Err(error).with_context(|| format!("{what} (attempt {attempt})"));
            }
        }
    }
}

/// Creates `objects` (at most `concurrency` at a time), each retried; returns when each create request
/// was first sent, by name.
pub async fn create_all<K>(
    api: &Api<K>,
    objects: Vec<K>,
    concurrency: usize,
) -> anyhow::Result<Vec<(String, Instant)>>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let results: Vec<anyhow::Result<(String, Instant)>> = futures::stream::iter(objects)
        .map(|object| async move {
            let name = object.name_any();
            let sent = Instant::now();
            retry(
                &format!("cannot create {name}"),
                || async { api.create(&PostParams::default(), &object).await },
                |e| is_status(e, 409, "AlreadyExists"),
            )
            .await?;
            Ok((name, sent))
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

/// Deletes the Services named `names` (retried; one already gone is fine).
pub async fn delete_services(api: &Api<Service>, names: &[String]) -> anyhow::Result<()> {
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
        .map(|name| async move {
            let deleted = retry(
                &format!("cannot delete service {name}"),
                || async { api.delete(name, &DeleteParams::default()).await },
                |e| is_status(e, 404, "NotFound"),
            )
            .await;
            deleted.map(|_| ())
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Marks the Nodes named `names` NotReady, as the node lifecycle controller does when their kubelet stops
/// posting status (retried).
pub async fn mark_not_ready(api: &Api<Node>, names: &[String]) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }]}});
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
        .map(|name| {
            let patch = &patch;
            async move {
                retry(
                    &format!("cannot mark node {name} NotReady"),
                    || async {
                        api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                            .await
                    },
                    |_| false,
                )
                .await
                .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.to_string(),
            ..Status::default()
        }))
    }

    #[test]
    fn only_injected_and_transient_errors_are_retried() {
        assert!(retryable(&api_error(500, "InternalError")));
        assert!(retryable(&api_error(429, "TooManyRequests")));
        assert!(retryable(&api_error(409, "Conflict")));
        assert!(!retryable(&api_error(409, "AlreadyExists")));
        assert!(!retryable(&api_error(404, "NotFound")));
        assert!(!retryable(&api_error(422, "Invalid")));
    }

    #[tokio::test]
    async fn a_write_is_retried_until_it_goes_through() {
        let mut calls = 0;
        let result = retry(
            "test",
            || {
                calls += 1;
                let outcome = if calls < 3 {
                    Err(api_error(500, "InternalError"))
                } else {
                    Ok(calls)
                };
                async move { outcome }
            },
            |_| false,
        )
        .await
        .unwrap();
        assert_eq!(result, Some(3));
        // A repeated create that finds the object is done; a first one is an error.
        let mut calls = 0;
        let repeated = retry(
            "test",
            || {
                calls += 1;
                let outcome: Result<(), _> = if calls == 1 {
                    Err(api_error(429, "TooManyRequests"))
                } else {
                    Err(api_error(409, "AlreadyExists"))
                };
                async move { outcome }
            },
            |e| is_status(e, 409, "AlreadyExists"),
        )
        .await
        .unwrap();
        assert_eq!(repeated, None);
        let first = retry(
            "creating x",
            || async { Err::<(), _>(api_error(409, "AlreadyExists")) },
            |e| is_status(e, 409, "AlreadyExists"),
        )
        .await
        .unwrap_err();
        assert!(format!("{first:#}").contains("creating x (attempt 1)"));
    }
}
