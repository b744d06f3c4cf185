//! Bounded waits: poll a condition until it holds or a deadline passes, then fail with what was expected
//! and the last thing observed.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::HarnessError;

/// How often conditions are polled.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// One observation of a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check<T> {
    /// The condition holds; the wait returns this value.
    Done(T),
    /// Not yet; the text describes what was observed (it ends up in the failure message).
    Pending(String),
}

impl<T> Check<T> {
    /// `Done(value)` when `cond` holds, else `Pending(observed())`.
    pub fn when(cond: bool, value: T, observed: impl FnOnce() -> String) -> Check<T> {
        if cond {
            Check::Done(value)
        } else {
            Check::Pending(observed())
        }
    }
}

/// Polls `probe` every [`POLL_INTERVAL`] until it returns [`Check::Done`] or `timeout` passes.
///
/// A probe error (e.g. the API server refusing a request) is treated as "not yet" and reported if the
/// wait times out, so a transient failure does not end the wait early.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut probe: F,
) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Check<T>, HarnessError>>,
{
    let start = Instant::now();
    loop {
        let last = match probe().await {
            Ok(Check::Done(value)) => return Ok(value),
            Ok(Check::Pending(observed)) => observed,
            Err(err) => format!("error: {err}"),
        };
        if start.elapsed() >= timeout {
            return Err(HarnessError::Timeout {
                what: what.to_string(),
                waited: timeout,
                last,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn returns_once_the_condition_holds() {
        let calls = Arc::new(AtomicU32::new(0));
        let value = wait_for("three calls", Duration::from_secs(5), || {
            let calls = calls.clone();
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(Check::when(n >= 3, n, || format!("{n} calls")))
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn times_out_with_the_last_observation_and_errors() {
        let err = wait_for::<(), _, _>("the impossible", Duration::from_millis(300), || async {
            Ok(Check::Pending("still nothing".into()))
        })
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("the impossible"), "{text}");
        assert!(text.contains("still nothing"), "{text}");

        let err = wait_for::<(), _, _>("a failing probe", Duration::from_millis(300), || async {
            Err(HarnessError::Config("boom".into()))
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
    }
}
