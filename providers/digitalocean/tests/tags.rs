//! The tags controller on the controller manager's real run path (`run_with_provider_controllers`), the
//! in-memory API server and the DigitalOcean API stub: the cluster's load balancers that lack
//! `k8s:<cluster ID>` are tagged in one call and nothing is sent when all have it; a tag that does not exist
//! yet is created first; load balancers this controller does not own are left alone; a failed pass is
//! retried.

mod support;

use std::sync::Arc;
use std::time::Duration;

use cloud_provider::CloudProvider;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use provider_digitalocean::DoClient;
use provider_digitalocean::annotations::{ANN_DISOWN, ANN_LOAD_BALANCER_ID};
use provider_digitalocean::stub::{DoStub, Fault};
use provider_digitalocean::tags::TagsController;
use serde_json::{Value, json};
use support::lb_service;
use support::wait_until;
use test_apiserver::TestApiServer;
use tokio_util::sync::CancellationToken;

/// The tag of `support::config_for`'s cluster `c-1`.
const TAG: &str = "k8s:c-1";
const TAG_RESOURCES: &str = "/v2/tags/k8s:c-1/resources";

/// The stub, an API server with `services`, and the controller running every `period` until dropped.
struct Harness {
    stub: DoStub,
    services: Api<Service>,
    shutdown: CancellationToken,
    _server: TestApiServer,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Harness {
    async fn start(stub: DoStub, services: Vec<Service>, period: Duration) -> Self {
        let server = TestApiServer::builder().start().await.unwrap();
        let client = server.client().unwrap();
        let api: Api<Service> = Api::namespaced(client.clone(), "default");
        for mut service in services {
            // The API server allocates the node ports.
            for port in service.spec.as_mut().unwrap().ports.iter_mut().flatten() {
                port.node_port = None;
            }
            api.create(&PostParams::default(), &service).await.unwrap();
        }
        let controller = TagsController::new(
            DoClient::new(&support::config_for(&stub)).unwrap(),
            Some("c-1".into()),
        )
        .with_period(period);
        let cloud = support::cloud_for(&stub);
        let shutdown = support::spawn_provider_controller(client, cloud, Arc::new(controller));
        Harness {
            stub,
            services: api,
            shutdown,
            _server: server,
        }
    }

    fn tags_of(&self, id: &str) -> Value {
        self.stub.load_balancer(id).unwrap()["tags"].clone()
    }

    /// The mutating requests under `/v2/tags`, as `METHOD path status`.
    fn tag_calls(&self) -> Vec<String> {
        self.stub
            .mutations("/v2/tags")
            .iter()
            .map(|r| format!("{} {} {}", r.method, r.path, r.status))
            .collect()
    }
}

/// A load balancer made outside the controller, with `tags`.
fn insert_lb(stub: &DoStub, name: &str, tags: &[&str]) -> String {
    stub.insert_load_balancer(json!({
        "name": name,
        "region": "nyc3",
        "forwarding_rules": [{"entry_protocol": "tcp", "entry_port": 80, "target_protocol": "tcp", "target_port": 30080}],
        "tags": tags,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_balancers_that_lack_the_tag_are_tagged_once() {
    let stub = DoStub::start().await;
    let untagged = insert_lb(&stub, "untagged", &[]);
    let tagged = insert_lb(&stub, "tagged", &[TAG]);
    let classed = insert_lb(&stub, "classed", &[]);
    let disowned = insert_lb(&stub, "disowned", &["other"]);
    let mut class_service = lb_service("classed", "u3", &[(ANN_LOAD_BALANCER_ID, &classed)]);
    class_service.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other".into());
    let services = vec![
        lb_service("untagged", "u1", &[(ANN_LOAD_BALANCER_ID, &untagged)]),
        lb_service("tagged", "u2", &[(ANN_LOAD_BALANCER_ID, &tagged)]),
        class_service,
        lb_service(
            "disowned",
            "u4",
            &[(ANN_LOAD_BALANCER_ID, &disowned), (ANN_DISOWN, "true")],
        ),
    ];
    let h = Harness::start(stub, services, Duration::from_millis(200)).await;
    wait_until("three passes", || async {
        h.stub.count_prefix("GET", "/v2/load_balancers") >= 3
    })
    .await;
    assert_eq!(h.tags_of(&untagged), json!([TAG]));
    assert_eq!(h.tags_of(&tagged), json!([TAG]));
    assert_eq!(
        h.tags_of(&classed),
        json!([]),
        "another class's load balancer"
    );
    assert_eq!(
        h.tags_of(&disowned),
        json!(["other"]),
        "a disowned load balancer"
    );
    // One call for the one that lacked it, none once all have it.
    assert_eq!(h.tag_calls(), [format!("POST {TAG_RESOURCES} 204")]);
    let body: Value =
        serde_json::from_str(h.stub.mutations(TAG_RESOURCES)[0].body.as_deref().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"resources": [{"resource_id": untagged, "resource_type": "load_balancer"}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_that_does_not_exist_is_created_first() {
    let stub = DoStub::start().await;
    assert!(stub.tags().is_empty());
    let h = Harness::start(
        stub,
        vec![lb_service("web", "u1", &[])],
        Duration::from_millis(200),
    )
    .await;
    // Found by its name (from the uid the API server gave the Service), as the service controller finds
    // a load balancer without the ID annotation.
    let service = h.services.get("web").await.unwrap();
    let name = provider_digitalocean::annotations::load_balancer_name(&service);
    let id = insert_lb(&h.stub, &name, &[]);
    wait_until("tagged", || async { h.tags_of(&id) == json!([TAG]) }).await;
    assert_eq!(
        h.tag_calls(),
        [
            format!("POST {TAG_RESOURCES} 404"),
            "POST /v2/tags 201".to_string(),
            format!("POST {TAG_RESOURCES} 204"),
        ]
    );
    assert_eq!(h.stub.tags(), [TAG]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pass_is_retried() {
    let stub = DoStub::start().await;
    let id = insert_lb(&stub, "lb", &[]);
    // The tag exists (another load balancer has it).
    insert_lb(&stub, "elsewhere", &[TAG]);
    stub.inject(Fault::status("POST", TAG_RESOURCES, 422, 1));
    let services = vec![lb_service("lb", "u1", &[(ANN_LOAD_BALANCER_ID, &id)])];
    // The period is long: only the retry can tag it within the wait.
    let h = Harness::start(stub, services, Duration::from_secs(300)).await;
    wait_until("tagged on the retry", || async {
        h.tags_of(&id) == json!([TAG])
    })
    .await;
    assert_eq!(
        h.tag_calls(),
        [
            format!("POST {TAG_RESOURCES} 422"),
            format!("POST {TAG_RESOURCES} 204"),
        ]
    );
}

#[tokio::test]
async fn the_controller_runs_only_with_a_cluster_id() {
    let stub = DoStub::start().await;
    let with_id = support::cloud_for(&stub).controllers();
    let tags = with_id
        .iter()
        .find(|c| c.info().name == "tags-controller")
        .expect("the provider offers the tags controller");
    assert_eq!(tags.info().alias, "tags");
    assert!(tags.info().enabled_by_default);
    assert_eq!(tags.skip_reason(), None);
    let without_id = support::cloud_with(&stub, |config| config.cluster_id = None).controllers();
    let reason = without_id
        .iter()
        .find(|c| c.info().name == "tags-controller")
        .and_then(|c| c.skip_reason())
        .unwrap();
    assert!(reason.contains("DO_CLUSTER_ID"), "{reason}");
}
