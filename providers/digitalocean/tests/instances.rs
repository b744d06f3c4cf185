//! InstancesV2 against the stub: metadata, existence, shutdown, and the droplet cache's API cost.

mod support;

use std::time::Duration;

use cloud_provider::{InstanceState, InstancesV2};
use provider_digitalocean::stub::{DoStub, DropletSpec, Fault};
use support::{cloud_for, cloud_with, droplet_node, node};

fn addresses(meta: &cloud_provider::InstanceMetadata) -> Vec<(String, String)> {
    meta.node_addresses
        .iter()
        .map(|a| (a.type_.clone(), a.address.clone()))
        .collect()
}

#[tokio::test]
async fn metadata_by_provider_id_and_by_name() {
    let stub = DoStub::start().await;
    let id = stub.add_droplet(
        DropletSpec::new("pool-1-abc")
            .size("s-4vcpu-8gb")
            .region("fra1")
            .addresses(Some("10.0.0.7"), Some("203.0.113.7"), Some("2001:db8::7")),
    );
    let cloud = cloud_for(&stub);

    let meta = cloud
        .instance_metadata(&droplet_node("pool-1-abc", id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, format!("digitalocean://{id}"));
    assert_eq!(meta.instance_type, "s-4vcpu-8gb");
    assert_eq!(meta.region, "fra1");
    assert_eq!(meta.zone, "");
    let want = [
        ("Hostname", "pool-1-abc"),
        ("InternalIP", "10.0.0.7"),
        ("ExternalIP", "203.0.113.7"),
        ("ExternalIP", "2001:db8::7"),
    ]
    .map(|(t, a)| (t.to_string(), a.to_string()));
    assert_eq!(addresses(&meta), want.to_vec());

    // Without a provider ID the droplet is found by name, and the provider ID comes back.
    let by_name = cloud
        .instance_metadata(&node("pool-1-abc", None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_name.provider_id, format!("digitalocean://{id}"));

    let err = cloud
        .instance_metadata(&node("nonexistent", None))
        .await
        .unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");
}

#[tokio::test]
async fn a_droplet_without_a_private_address_is_an_error() {
    let stub = DoStub::start().await;
    let id = stub.add_droplet(DropletSpec::new("n").addresses(None, Some("203.0.113.8"), None));
    let err = cloud_for(&stub)
        .instance_metadata(&droplet_node("n", id))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no private IPv4"), "{err}");
}

#[tokio::test]
async fn exists_is_false_only_on_404() {
    let stub = DoStub::start().await;
    let id = stub.add_droplet(DropletSpec::new("n1"));
    let gone = stub.add_droplet(DropletSpec::new("n2"));
    stub.remove_droplet(gone);
    let cloud = cloud_for(&stub);
    assert!(
        cloud
            .instance_exists(&droplet_node("n1", id))
            .await
            .unwrap()
    );
    assert!(
        !cloud
            .instance_exists(&droplet_node("n2", gone))
            .await
            .unwrap()
    );
    // The answer "gone" came from the droplet itself, not from the list.
    assert_eq!(stub.count("GET", &format!("/v2/droplets/{gone}")), 1);
    assert!(
        !cloud
            .instance_exists(&node("never-existed", None))
            .await
            .unwrap()
    );

    // API failures are errors, never "does not exist".
    let cloud = cloud_for(&stub);
    stub.inject(Fault::status("GET", "/v2/droplets", 500, 100));
    let err = cloud
        .instance_exists(&droplet_node("n1", id))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("500"), "{err}");
    let states = cloud.instance_states(&[droplet_node("n1", id)]).await;
    assert!(states[0].is_err());
}

#[tokio::test]
async fn shutdown_follows_the_droplet_status() {
    let stub = DoStub::start().await;
    let id = stub.add_droplet(DropletSpec::new("n1"));
    let cloud = cloud_with(&stub, |c| c.droplet_cache_ttl = Duration::from_millis(100));
    let n = droplet_node("n1", id);
    assert!(!cloud.instance_shutdown(&n).await.unwrap());
    stub.set_droplet_status(id, "off");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(cloud.instance_shutdown(&n).await.unwrap());
    assert!(cloud.instance_exists(&n).await.unwrap());
    assert_eq!(
        cloud.instance_states(&[n]).await[0].as_ref().unwrap(),
        &InstanceState::Shutdown
    );
    stub.remove_droplet(id);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let err = cloud
        .instance_shutdown(&droplet_node("n1", id))
        .await
        .unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");
}

#[tokio::test]
async fn node_checks_cost_o1_api_calls_per_period() {
    let stub = DoStub::start().await;
    let nodes: Vec<_> = (0..250)
        .map(|i| {
            let name = format!("node-{i}");
            let id = stub.add_droplet(DropletSpec::new(&name));
            droplet_node(&name, id)
        })
        .collect();
    let cloud = cloud_with(&stub, |c| c.droplet_cache_ttl = Duration::from_secs(2));

    for _ in 0..10 {
        let states = cloud.instance_states(&nodes).await;
        assert!(
            states
                .iter()
                .all(|s| s.as_ref().ok() == Some(&InstanceState::Running))
        );
    }
    for n in &nodes {
        assert!(cloud.instance_exists(n).await.unwrap());
    }
    let metas = cloud.instance_metadata_bulk(&nodes).await;
    assert!(metas.iter().all(|m| m.as_ref().is_ok_and(|m| m.is_some())));
    // 2,750 checks of 250 nodes: one list of two pages, no per-droplet call.
    assert_eq!(stub.count("GET", "/v2/droplets"), 2);
    assert_eq!(stub.count_prefix("GET", "/v2/droplets/"), 0);

    // After the period, one more list.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let _ = cloud.instance_states(&nodes).await;
    let _ = cloud.instance_states(&nodes).await;
    assert_eq!(stub.count("GET", "/v2/droplets"), 4);
    assert_eq!(stub.count_prefix("GET", "/v2/droplets/"), 0);
}

#[tokio::test]
async fn concurrent_checks_share_one_refresh() {
    let stub = DoStub::start().await;
    let nodes: Vec<_> = (0..30)
        .map(|i| {
            droplet_node(
                &format!("n{i}"),
                stub.add_droplet(DropletSpec::new(format!("n{i}"))),
            )
        })
        .collect();
    let cloud = std::sync::Arc::new(cloud_for(&stub));
    let tasks: Vec<_> = nodes
        .into_iter()
        .map(|n| {
            let cloud = cloud.clone();
            tokio::spawn(async move { cloud.instance_exists(&n).await.unwrap() })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap());
    }
    assert_eq!(stub.count("GET", "/v2/droplets"), 1);
}

#[tokio::test]
async fn misses_refresh_once_or_ask_for_the_droplet() {
    let stub = DoStub::start().await;
    let first = stub.add_droplet(DropletSpec::new("a"));
    let cloud = cloud_with(&stub, |c| {
        c.droplet_cache_ttl = Duration::from_secs(60);
        c.droplet_miss_refresh_interval = Duration::from_secs(60);
    });
    assert!(
        cloud
            .instance_exists(&droplet_node("a", first))
            .await
            .unwrap()
    );
    assert_eq!(stub.count("GET", "/v2/droplets"), 1);

    // A droplet created after the list: within the miss-refresh interval it is fetched by ID.
    let late = stub.add_droplet(DropletSpec::new("late"));
    assert!(
        cloud
            .instance_exists(&droplet_node("late", late))
            .await
            .unwrap()
    );
    assert_eq!(stub.count("GET", "/v2/droplets"), 1);
    assert_eq!(stub.count("GET", &format!("/v2/droplets/{late}")), 1);
    // ... and remembered.
    assert!(
        cloud
            .instance_exists(&droplet_node("late", late))
            .await
            .unwrap()
    );
    assert_eq!(stub.count("GET", &format!("/v2/droplets/{late}")), 1);
    // By name, within the interval: the name filter.
    let named = stub.add_droplet(DropletSpec::new("named"));
    let meta = cloud
        .instance_metadata(&node("named", None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, format!("digitalocean://{named}"));
    assert_eq!(
        stub.requests()
            .iter()
            .filter(|r| r.path == "/v2/droplets" && r.query.contains("name=named"))
            .count(),
        1
    );

    // With misses allowed to refresh, many new droplets cost one list, not one call each.
    let cloud = cloud_with(&stub, |c| {
        c.droplet_cache_ttl = Duration::from_secs(60);
        c.droplet_miss_refresh_interval = Duration::ZERO;
    });
    let _ = cloud.instance_states(&[droplet_node("a", first)]).await;
    stub.clear_requests();
    let batch: Vec<_> = (0..5)
        .map(|i| {
            droplet_node(
                &format!("b{i}"),
                stub.add_droplet(DropletSpec::new(format!("b{i}"))),
            )
        })
        .collect();
    let metas = cloud.instance_metadata_bulk(&batch).await;
    assert!(metas.iter().all(|m| m.as_ref().is_ok_and(|m| m.is_some())));
    assert_eq!(stub.count("GET", "/v2/droplets"), 1);
    assert_eq!(stub.count_prefix("GET", "/v2/droplets/"), 0);
}

#[tokio::test]
async fn bulk_results_keep_input_order_and_per_node_errors() {
    let stub = DoStub::start().await;
    let a = stub.add_droplet(DropletSpec::new("a"));
    let off = stub.add_droplet(DropletSpec::new("off").status("off"));
    let gone = stub.add_droplet(DropletSpec::new("gone"));
    stub.remove_droplet(gone);
    stub.add_droplet(DropletSpec::new("twin"));
    stub.add_droplet(DropletSpec::new("twin"));
    let cloud = cloud_for(&stub);
    let nodes = [
        droplet_node("gone", gone),
        node("bad", Some("aws:///us-east-1a/i-1")),
        droplet_node("a", a),
        node("twin", None),
        droplet_node("off", off),
    ];
    let states = cloud.instance_states(&nodes).await;
    assert_eq!(states[0].as_ref().unwrap(), &InstanceState::NotFound);
    assert!(
        states[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("aws:///us-east-1a/i-1")
    );
    assert_eq!(states[2].as_ref().unwrap(), &InstanceState::Running);
    assert!(
        states[3]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("ambiguous")
    );
    assert_eq!(states[4].as_ref().unwrap(), &InstanceState::Shutdown);

    let metas = cloud.instance_metadata_bulk(&nodes).await;
    assert!(metas[0].as_ref().unwrap_err().is_instance_not_found());
    assert!(metas[1].is_err());
    assert_eq!(
        metas[2].as_ref().unwrap().as_ref().unwrap().provider_id,
        format!("digitalocean://{a}")
    );
    assert!(metas[3].is_err());
    assert_eq!(
        metas[4].as_ref().unwrap().as_ref().unwrap().provider_id,
        format!("digitalocean://{off}")
    );
}
