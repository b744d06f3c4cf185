//! The Lease-based leader election against the in-memory API server: creation, renewal, expiry and
//! takeover, release, lost renewals and the MicroTime format.

use std::time::{Duration, Instant};

use ccm_app::leader::{
    LeaderElectionConfig, LeaderElector, LeaderStatus, LeaseDuration, RenewOutcome,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use test_apiserver::{FaultRule, TestApiServer};
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "kube-system";
const NAME: &str = "cloud-controller-manager";

fn config(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        namespace: NAMESPACE.to_string(),
        name: NAME.to_string(),
        identity: identity.to_string(),
        lease_duration: LeaseDuration::new(Duration::from_secs(1)).unwrap(),
        renew_deadline: Duration::from_millis(700),
        retry_period: Duration::from_millis(100),
    }
}

fn elector(server: &TestApiServer, identity: &str) -> (LeaderElector, LeaderStatus) {
    let status = LeaderStatus::new(NAME, Duration::from_secs(5));
    let elector = LeaderElector::new(server.client().unwrap(), config(identity), status.clone());
    (elector, status)
}

/// A candidate that retries only every 30 s, with the given lease duration and renew deadline (seconds).
fn slow_elector(server: &TestApiServer, identity: &str, lease: u64, renew: u64) -> LeaderElector {
    let config = LeaderElectionConfig {
        lease_duration: LeaseDuration::new(Duration::from_secs(lease)).unwrap(),
        renew_deadline: Duration::from_secs(renew),
        retry_period: Duration::from_secs(30),
        ..config(identity)
    };
    let status = LeaderStatus::new(NAME, Duration::from_secs(5));
    LeaderElector::new(server.client().unwrap(), config, status)
}

/// The Lease as raw JSON, to check the wire format.
async fn raw_lease(server: &TestApiServer) -> serde_json::Value {
    let request = http::Request::get(format!(
        "/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{NAME}"
    ))
    .body(Vec::new())
    .unwrap();
    let text = server
        .client()
        .unwrap()
        .request_text(request)
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn assert_micro_time(value: &serde_json::Value) {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {value}"));
    // 2026-01-01T00:00:00.000000Z
    assert_eq!(text.len(), 27, "{text}");
    let (_, fraction) = text.split_once('.').unwrap();
    assert_eq!(fraction.len(), 7, "{text}");
    assert!(fraction.ends_with('Z'));
    assert!(fraction[..6].chars().all(|c| c.is_ascii_digit()), "{text}");
}

#[tokio::test]
async fn the_first_candidate_creates_the_lease_and_the_second_waits() {
    let server = TestApiServer::start().await.unwrap();
    let (mut a, status_a) = elector(&server, "host-a_1");
    let (mut b, status_b) = elector(&server, "host-b_2");

    assert!(a.try_acquire_or_renew().await.unwrap());
    assert!(!b.try_acquire_or_renew().await.unwrap());

    let lease = raw_lease(&server).await;
    let spec = &lease["spec"];
    assert_eq!(spec["holderIdentity"], "host-a_1");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    assert_eq!(spec["leaseTransitions"], 0);
    assert_micro_time(&spec["acquireTime"]);
    assert_micro_time(&spec["renewTime"]);

    // A renewal moves renewTime only.
    let first_renew = spec["renewTime"].clone();
    let acquired = spec["acquireTime"].clone();
    let rv = lease["metadata"]["resourceVersion"].clone();
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);
    assert!(status_a.is_leader());
    assert!(!status_b.is_leader());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(a.try_acquire_or_renew().await.unwrap());
    let lease = raw_lease(&server).await;
    assert_eq!(lease["spec"]["acquireTime"], acquired);
    assert_ne!(lease["spec"]["renewTime"], first_renew);
    assert_ne!(lease["metadata"]["resourceVersion"], rv);
    assert_eq!(lease["spec"]["leaseTransitions"], 0);
}

#[tokio::test]
async fn a_standby_takes_over_when_the_leader_stops_renewing() {
    let server = TestApiServer::start().await.unwrap();
    let (mut a, _) = elector(&server, "a");
    let (mut b, status_b) = elector(&server, "b");
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);

    // `a` never renews: `b` must wait one lease duration from its first observation, then take over.
    let start = Instant::now();
    assert!(b.acquire(&cancel).await);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(1),
        "took over after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1_600),
        "took over after {waited:?}"
    );
    assert!(status_b.is_leader());
    let lease = raw_lease(&server).await;
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);

    // The old leader notices at its next renewal and loses at once.
    let outcome = a.renew_until_lost(&cancel).await;
    assert_eq!(
        outcome,
        RenewOutcome::Lost("the lease is now held by \"b\"".to_string())
    );
    assert!(!a.is_leader());
}

#[tokio::test]
async fn a_renewing_leader_keeps_the_lease() {
    let server = TestApiServer::start().await.unwrap();
    let (mut a, status_a) = elector(&server, "a");
    let (mut b, _) = elector(&server, "b");
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);
    let stop = CancellationToken::new();
    let renewing = {
        let stop = stop.clone();
        tokio::spawn(async move { (a.renew_until_lost(&stop).await, a) })
    };
    // Three lease durations later `b` still has not got it.
    let standby = CancellationToken::new();
    let attempt = tokio::time::timeout(Duration::from_secs(3), b.acquire(&standby)).await;
    assert!(
        attempt.is_err(),
        "the standby must not take a renewed lease"
    );
    assert!(status_a.check().is_ok());
    stop.cancel();
    let (outcome, mut a) = renewing.await.unwrap();
    assert_eq!(outcome, RenewOutcome::Stopped);
    assert!(a.is_leader());

    // Releasing hands over at once.
    assert!(a.release().await.unwrap());
    assert!(!status_a.is_leader());
    let lease = raw_lease(&server).await;
    assert_eq!(lease["spec"]["holderIdentity"], "");
    let start = Instant::now();
    assert!(b.try_acquire_or_renew().await.unwrap());
    assert!(start.elapsed() < Duration::from_millis(500));
    let lease = raw_lease(&server).await;
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    // Releasing a lease someone else holds does nothing.
    assert!(!a.release().await.unwrap());
}

#[tokio::test]
async fn failed_renewals_lose_leadership_at_the_renew_deadline() {
    let server = TestApiServer::start().await.unwrap();
    let (mut a, status_a) = elector(&server, "a");
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);
    server
        .controls()
        .fail(FaultRule::new(500).verb("update").resource("leases"));
    let start = Instant::now();
    let outcome = a.renew_until_lost(&cancel).await;
    let took = start.elapsed();
    assert_eq!(
        outcome,
        RenewOutcome::Lost(
            "failed to renew lease kube-system/cloud-controller-manager within the renew deadline (700ms)"
                .to_string()
        )
    );
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(took < Duration::from_millis(1_300), "{took:?}");
    assert!(!status_a.is_leader());
}

#[tokio::test]
async fn a_lease_taken_behind_the_leaders_back_is_respected() {
    let server = TestApiServer::start().await.unwrap();
    let (mut a, _) = elector(&server, "a");
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);
    // Somebody else rewrites the lease behind the elector's back, with a different holder and a
    // resourceVersion precondition of its own: the elector's next attempt sees the new holder.
    let api: Api<Lease> = Api::namespaced(server.client().unwrap(), NAMESPACE);
    let mut lease = api.get(NAME).await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some("intruder".to_string());
    api.replace(NAME, &Default::default(), &lease)
        .await
        .unwrap();
    // The old resourceVersion is now stale: a replace with it is refused (409).
    let err = api
        .replace(NAME, &Default::default(), &lease)
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(status) if status.code == 409));
    assert!(!a.try_acquire_or_renew().await.unwrap());
}

#[tokio::test]
async fn acquiring_stops_on_cancel() {
    let server = TestApiServer::start().await.unwrap();
    let (mut a, _) = elector(&server, "a");
    let (mut b, status_b) = elector(&server, "b");
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);
    let standby = CancellationToken::new();
    let stopper = standby.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        stopper.cancel();
    });
    let start = Instant::now();
    assert!(!b.acquire(&standby).await);
    assert!(start.elapsed() < Duration::from_millis(900));
    assert!(!status_b.is_leader());
}

#[tokio::test]
async fn a_watching_standby_takes_over_as_soon_as_the_lease_is_released() {
    let server = TestApiServer::start().await.unwrap();
    // Retries so far apart that only the standby's watch on the Lease can explain a quick takeover.
    let mut a = slow_elector(&server, "a", 60, 40);
    let mut b = slow_elector(&server, "b", 60, 40);
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);

    let standby = tokio::spawn(async move {
        let won = b.acquire(&CancellationToken::new()).await;
        (won, Instant::now())
    });
    // The standby has tried once and is waiting for its next retry, 30 s away.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!standby.is_finished());
    let released = Instant::now();
    assert!(a.release().await.unwrap());
    let (won, at) = tokio::time::timeout(Duration::from_secs(5), standby)
        .await
        .expect("the standby took over before its next retry")
        .unwrap();
    assert!(won);
    let waited = at - released;
    assert!(
        waited < Duration::from_secs(1),
        "took over {waited:?} after the release"
    );
    assert_eq!(raw_lease(&server).await["spec"]["holderIdentity"], "b");
}

#[tokio::test]
async fn a_watching_standby_takes_over_one_lease_duration_after_the_last_renewal() {
    let server = TestApiServer::start().await.unwrap();
    // Retries far apart: a takeover close to one lease duration after the last renewal needs the watch.
    let mut a = slow_elector(&server, "a", 2, 1);
    let mut b = slow_elector(&server, "b", 2, 1);
    let cancel = CancellationToken::new();
    assert!(a.acquire(&cancel).await);
    let standby = tokio::spawn(async move {
        let won = b.acquire(&CancellationToken::new()).await;
        (won, Instant::now())
    });
    // The leader renews a few times, which the standby sees, then stops.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(a.try_acquire_or_renew().await.unwrap());
    }
    let last_renewal = Instant::now();
    let (won, at) = tokio::time::timeout(Duration::from_secs(10), standby)
        .await
        .expect("the standby took over before its next retry")
        .unwrap();
    assert!(won);
    let waited = at - last_renewal;
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_millis(2_600),
        "took over {waited:?} after the last renewal"
    );
}
