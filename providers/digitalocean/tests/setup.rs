//! Start-up: registration, the cloud-config factory, token and region checks.

mod support;

use cloud_provider::{CloudProvider, Registry, RegistryError};
use provider_digitalocean::stub::DoStub;
use provider_digitalocean::{AccessToken, DigitalOceanCloud};
use support::{cloud_with, config_for};

#[test]
fn registers_once_under_its_name() {
    let mut registry = Registry::new();
    provider_digitalocean::register(&mut registry);
    assert!(registry.contains("digitalocean"));
    let err = provider_digitalocean::try_register(&mut registry).unwrap_err();
    assert!(matches!(err, RegistryError::Duplicate { .. }));
}

#[tokio::test]
async fn the_factory_reads_the_cloud_config() {
    let stub = DoStub::start().await;
    let mut registry = Registry::new();
    provider_digitalocean::register(&mut registry);
    let yaml = format!(
        "accessToken: {}\noverrideURL: {}\nregion: fra1\nclusterID: prod\n",
        stub.token(),
        stub.url()
    );
    let cloud = registry
        .init("digitalocean", Some(yaml.as_bytes()))
        .unwrap();
    assert_eq!(cloud.provider_name(), "digitalocean");
    assert!(cloud.has_cluster_id());
    assert!(cloud.load_balancer().is_some());
    assert!(cloud.instances_v2().is_some());
    assert!(cloud.pv_labeler().is_some());
    assert!(cloud.routes().is_none() && cloud.zones().is_none() && cloud.clusters().is_none());
    assert!(cloud.instances().is_none());

    let err = registry
        .init("digitalocean", Some(b"region: fra1\nlbType: x\n"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("unknown field `lbType`"), "{err}");
}

#[tokio::test]
async fn prepare_validates_the_configured_region() {
    let stub = DoStub::start().await;
    let cloud = cloud_with(&stub, |c| c.region = Some("fra1".into()));
    cloud.prepare().await.unwrap();
    assert_eq!(cloud.region().as_deref(), Some("fra1"));
    assert_eq!(stub.count("GET", "/v2/account"), 1);
    assert_eq!(stub.count("GET", "/v2/regions"), 1);

    let cloud = cloud_with(&stub, |c| c.region = Some("mars1".into()));
    let err = cloud.prepare().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "\"mars1\" is not a DigitalOcean region (known regions: fra1, nyc3, sfo3)"
    );
}

#[tokio::test]
async fn prepare_reads_the_region_from_the_metadata_service() {
    let stub = DoStub::builder().metadata_region("sfo3").start().await;
    let cloud = cloud_with(&stub, |c| c.region = None);
    assert_eq!(cloud.region(), None);
    cloud.prepare().await.unwrap();
    assert_eq!(cloud.region().as_deref(), Some("sfo3"));

    // No region and no metadata service: a clear error.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}/metadata/v1/", closed.local_addr().unwrap());
    drop(closed);
    let cloud = cloud_with(&stub, |c| {
        c.region = None;
        c.metadata_url = dead.parse().unwrap();
    });
    let err = cloud.prepare().await.unwrap_err();
    assert!(err.to_string().contains("REGION is not set"), "{err}");
}

#[tokio::test]
async fn a_refused_token_is_reported_without_the_token() {
    let stub = DoStub::start().await;
    let mut config = config_for(&stub);
    config.access_token = AccessToken::new("dop_v1_wrong_value");
    let cloud = DigitalOceanCloud::new(config).unwrap();
    let err = cloud.prepare().await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("refused the access token"), "{msg}");
    assert!(msg.contains("DO_ACCESS_TOKEN"), "{msg}");
    assert!(!msg.contains("dop_v1_wrong_value"), "{msg}");
    assert!(!format!("{cloud:?}").contains("dop_v1_wrong_value"));
}

#[tokio::test]
async fn metrics_are_registered() {
    let stub = DoStub::start().await;
    let cloud = support::cloud_for(&stub);
    cloud.prepare().await.unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    cloud.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            r#"cloudprovider_digitalocean_api_requests_total{request="get_account",code="200"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains(
        r#"cloudprovider_digitalocean_api_requests_total{request="list_regions",code="200"} 1"#
    ));
    assert_eq!(cloud.api_metrics().request_count("get_account", "200"), 1);
}
