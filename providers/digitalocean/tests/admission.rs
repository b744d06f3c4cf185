//! Admission of LoadBalancer Services against the DigitalOcean API stub: a parser's error refuses with the
//! text of the controller's error; a good Service is validated by the API with `validate_only` (created or
//! updated, by its ID annotation) and nothing is created or changed; the API's refusal refuses; an update
//! that changes nothing in the request asks nothing; an API that does not answer admits with a warning.

mod support;

use cloud_provider::{LoadBalancer, ServiceAdmission, Verdict};
use provider_digitalocean::annotations::{
    ANN_CERTIFICATE_ID, ANN_CERTIFICATE_NAME, ANN_LOAD_BALANCER_ID, ANN_PROTOCOL, ANN_SIZE_UNIT,
    ANN_TYPE,
};
use provider_digitalocean::stub::{DoStub, DropletSpec, Fault, RecordedRequest};
use support::{cloud_for, droplet_node, lb_service};

const UID: &str = "0a1b2c3d-0000-4000-8000-000000000001";

/// The load-balancer requests the stub received.
fn lb_requests(stub: &DoStub) -> Vec<RecordedRequest> {
    stub.requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/v2/load_balancers"))
        .collect()
}

fn denied(verdict: Verdict) -> String {
    match verdict {
        Verdict::Denied { message } => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_parsers_error_refuses_with_the_controllers_text_and_asks_nothing() {
    let stub = DoStub::start().await;
    let cloud = cloud_for(&stub);
    let id = stub.add_droplet(DropletSpec::new("node-1"));
    let service = lb_service("web", UID, &[(ANN_SIZE_UNIT, "huge")]);
    let message = denied(cloud.admit_service("kubernetes", &service, None).await);
    assert!(message.contains(ANN_SIZE_UNIT), "{message}");
    assert!(
        lb_requests(&stub).is_empty(),
        "no API call for a parser's error"
    );
    let ensured = cloud
        .ensure_load_balancer("kubernetes", &service, &[droplet_node("node-1", id)])
        .await
        .unwrap_err();
    assert_eq!(ensured.to_string(), message, "the controller's text");
}

#[tokio::test]
async fn a_good_service_is_validated_by_the_api_and_nothing_is_created() {
    let stub = DoStub::start().await;
    let cloud = cloud_for(&stub);
    let service = lb_service("web", UID, &[]);
    assert_eq!(
        cloud.admit_service("kubernetes", &service, None).await,
        Verdict::allowed()
    );
    let requests = lb_requests(&stub);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("POST", "/v2/load_balancers")
    );
    assert!(requests[0].is_validate_only());
    assert!(stub.requests().iter().all(|r| !r.is_mutating()));
    assert!(stub.load_balancers().is_empty(), "nothing created");
}

#[tokio::test]
async fn the_apis_refusal_refuses() {
    let stub = DoStub::start().await;
    let cloud = cloud_for(&stub);
    let service = lb_service(
        "web",
        UID,
        &[
            (ANN_TYPE, "REGIONAL"),
            (ANN_PROTOCOL, "https"),
            (ANN_CERTIFICATE_ID, "no-such-certificate"),
        ],
    );
    let message = denied(cloud.admit_service("kubernetes", &service, None).await);
    assert!(
        message.starts_with("invalid load balancer definition: "),
        "{message}"
    );
    assert!(message.contains("422"), "{message}");
    assert!(stub.load_balancers().is_empty());
}

#[tokio::test]
async fn a_certificate_name_that_names_nothing_refuses() {
    let stub = DoStub::start().await;
    let cloud = cloud_for(&stub);
    let service = lb_service(
        "web",
        UID,
        &[
            (ANN_TYPE, "REGIONAL"),
            (ANN_PROTOCOL, "https"),
            (ANN_CERTIFICATE_NAME, "shop"),
        ],
    );
    let message = denied(cloud.admit_service("kubernetes", &service, None).await);
    assert_eq!(message, "certificate with name \"shop\" not found");
    stub.add_certificate("shop", "custom");
    assert_eq!(
        cloud.admit_service("kubernetes", &service, None).await,
        Verdict::allowed()
    );
}

#[tokio::test]
async fn updates_are_validated_against_the_load_balancer_of_the_id_annotation() {
    let stub = DoStub::start().await;
    let cloud = cloud_for(&stub);
    let id = stub.add_droplet(DropletSpec::new("node-1"));
    let created = lb_service("web", UID, &[]);
    cloud
        .ensure_load_balancer("kubernetes", &created, &[droplet_node("node-1", id)])
        .await
        .unwrap();
    let lb_id = stub.load_balancers()[0]["id"].as_str().unwrap().to_string();
    let old = lb_service("web", UID, &[(ANN_LOAD_BALANCER_ID, &lb_id)]);
    let before = lb_requests(&stub).len();

    // A change outside the request (a label) asks nothing.
    let mut relabelled = old.clone();
    relabelled.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
    assert_eq!(
        cloud
            .admit_service("kubernetes", &relabelled, Some(&old))
            .await,
        Verdict::allowed()
    );
    assert_eq!(lb_requests(&stub).len(), before);

    let resized = lb_service(
        "web",
        UID,
        &[(ANN_LOAD_BALANCER_ID, &lb_id), (ANN_SIZE_UNIT, "3")],
    );
    assert_eq!(
        cloud
            .admit_service("kubernetes", &resized, Some(&old))
            .await,
        Verdict::allowed()
    );
    let requests = lb_requests(&stub);
    let last = requests.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("PUT", format!("/v2/load_balancers/{lb_id}").as_str())
    );
    assert!(last.is_validate_only());
    assert_eq!(stub.load_balancers()[0]["size_unit"], 1, "nothing changed");

    // A stale ID is validated as a new load balancer.
    let stale = lb_service(
        "web",
        UID,
        &[(ANN_LOAD_BALANCER_ID, "gone"), (ANN_SIZE_UNIT, "2")],
    );
    assert_eq!(
        cloud.admit_service("kubernetes", &stale, Some(&old)).await,
        Verdict::allowed()
    );
    let last = lb_requests(&stub).pop().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("POST", "/v2/load_balancers")
    );
}

#[tokio::test]
async fn an_api_that_does_not_answer_admits_with_a_warning() {
    let stub = DoStub::start().await;
    let cloud = cloud_for(&stub);
    stub.inject(Fault::status("POST", "/v2/load_balancers", 503, 10));
    let service = lb_service("web", UID, &[]);
    match cloud.admit_service("kubernetes", &service, None).await {
        Verdict::Allowed { warnings } => {
            assert_eq!(warnings.len(), 1);
            assert!(warnings[0].contains("admitted unchecked"), "{warnings:?}");
        }
        other => panic!("expected an admission, got {other:?}"),
    }
}
