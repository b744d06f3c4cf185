//! Instances, zones and bulk lookups against moto.

use std::time::Duration;

use cloud_provider::{CloudProvider, InstanceState, InstancesV2, Zones};

use provider_aws::topology::LABEL_NETWORK_NODE_PREFIX;

use crate::common::{World, node, node_with_id, provider};

#[tokio::test]
async fn metadata_by_provider_id_dns_name_and_instance_id() {
    let world = World::new("meta").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let cloud = provider(&world.config("")).await;
    assert!(cloud.has_cluster_id());
    assert_eq!(cloud.provider_name(), "aws");
    let v2 = cloud.instances_v2().unwrap();

    // By provider ID.
    let meta = v2
        .instance_metadata(&node_with_id("whatever", &a.provider_id()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, a.provider_id());
    assert_eq!(meta.instance_type, "m5.large");
    assert_eq!(meta.zone, "us-east-1a");
    assert_eq!(meta.region, "us-east-1");
    let zone_id = meta
        .additional_labels
        .get("topology.k8s.aws/zone-id")
        .expect("zone-id label");
    assert!(!zone_id.is_empty());
    // Upstream order: InternalIP, then InternalDNS and Hostname (moto gives no public address in a VPC
    // subnet without auto-assignment).
    let types: Vec<(&str, &str)> = meta
        .node_addresses
        .iter()
        .map(|x| (x.type_.as_str(), x.address.as_str()))
        .collect();
    assert_eq!(types[0], ("InternalIP", a.private_ip.as_str()));
    assert!(types.contains(&("InternalDNS", a.private_dns_name.as_str())));
    assert!(types.contains(&("Hostname", a.private_dns_name.as_str())));

    // By private DNS name (a kubelet-registered node without provider ID).
    let meta = v2
        .instance_metadata(&node(&b.private_dns_name))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, b.provider_id());
    assert_eq!(meta.zone, "us-east-1b");

    // By a node name that is the instance ID.
    let meta = v2
        .instance_metadata(&node(&format!("{}.ec2.internal", a.id)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, a.provider_id());

    // The other accepted provider-ID forms.
    for form in [format!("aws:////{}", a.id), a.id.clone()] {
        let meta = v2
            .instance_metadata(&node_with_id("n", &form))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.provider_id, a.provider_id(), "{form}");
    }

    // Unknown instance.
    let err = v2
        .instance_metadata(&node_with_id("n", "aws:///us-east-1a/i-0000000000000dead"))
        .await
        .unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");

    // The v1 interface and zones.
    let v1 = cloud.instances().unwrap();
    assert_eq!(
        v1.instance_type(&a.private_dns_name).await.unwrap(),
        "m5.large"
    );
    assert_eq!(
        v1.instance_id(&a.private_dns_name).await.unwrap(),
        format!("/us-east-1a/{}", a.id)
    );
    assert_eq!(
        v1.instance_type_by_provider_id(&b.provider_id())
            .await
            .unwrap(),
        "m5.large"
    );
    let addresses = v1
        .node_addresses_by_provider_id(&a.provider_id())
        .await
        .unwrap();
    assert_eq!(addresses[0].address, a.private_ip);
    assert_eq!(
        v1.node_addresses(&a.private_dns_name).await.unwrap(),
        addresses
    );
    let zones = cloud.zones().unwrap();
    let zone = zones
        .get_zone_by_provider_id(&b.provider_id())
        .await
        .unwrap();
    assert_eq!(
        (zone.failure_domain.as_str(), zone.region.as_str()),
        ("us-east-1b", "us-east-1")
    );
    let zone = zones
        .get_zone_by_node_name(&a.private_dns_name)
        .await
        .unwrap();
    assert_eq!(zone.failure_domain, "us-east-1a");
}

#[tokio::test]
async fn dns_lookups_only_find_the_clusters_instances() {
    let world = World::new("foreign").await;
    let ours = world.instance(0).await;
    let theirs = world
        .instance_with(
            0,
            &[("kubernetes.io/cluster/someone-else", "owned")],
            &[&world.node_sg],
        )
        .await;
    let cloud = provider(&world.config("")).await;
    let v2 = cloud.instances_v2().unwrap();
    assert!(
        v2.instance_exists(&node(&ours.private_dns_name))
            .await
            .unwrap()
    );
    assert!(
        !v2.instance_exists(&node(&theirs.private_dns_name))
            .await
            .unwrap()
    );
    // By ID the instance is found regardless of tags (the provider ID is authoritative).
    assert!(
        v2.instance_exists(&node_with_id("x", &theirs.provider_id()))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn exists_and_shutdown_follow_the_instance_state() {
    let world = World::new("states").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let v2 = cloud.instances_v2().unwrap();
    let v1 = cloud.instances().unwrap();
    let n = node_with_id("a", &a.provider_id());

    assert!(v2.instance_exists(&n).await.unwrap());
    assert!(!v2.instance_shutdown(&n).await.unwrap());
    assert_eq!(
        v2.instance_states(std::slice::from_ref(&n)).await[0]
            .as_ref()
            .unwrap(),
        &InstanceState::Running
    );

    world.stop(&a.id).await;
    assert!(
        v2.instance_exists(&n).await.unwrap(),
        "a stopped instance still exists"
    );
    assert!(v2.instance_shutdown(&n).await.unwrap());
    assert!(
        v1.instance_shutdown_by_provider_id(&a.provider_id())
            .await
            .unwrap()
    );
    assert_eq!(
        v2.instance_states(std::slice::from_ref(&n)).await[0]
            .as_ref()
            .unwrap(),
        &InstanceState::Shutdown
    );

    world.start(&a.id).await;
    assert!(!v2.instance_shutdown(&n).await.unwrap());

    world.terminate(&a.id).await;
    assert!(
        !v2.instance_exists(&n).await.unwrap(),
        "terminated means gone"
    );
    assert!(
        !v1.instance_exists_by_provider_id(&a.provider_id())
            .await
            .unwrap()
    );
    assert_eq!(
        v2.instance_states(std::slice::from_ref(&n)).await[0]
            .as_ref()
            .unwrap(),
        &InstanceState::NotFound
    );
    assert!(
        v2.instance_metadata(&n)
            .await
            .unwrap_err()
            .is_instance_not_found()
    );

    // Never existed.
    let ghost = node_with_id("ghost", "aws:///us-east-1a/i-00000000000000bad");
    assert!(!v2.instance_exists(&ghost).await.unwrap());
    assert!(
        !v1.instance_exists_by_provider_id("i-00000000000000bad")
            .await
            .unwrap()
    );
    // A malformed provider ID is an error, not "gone".
    assert!(
        v2.instance_exists(&node_with_id("bad", "aws:///us-east-1a/vol-1"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn bulk_lookups_batch_ids_in_chunks_of_150() {
    let world = World::new("bulk").await;
    let mut seeded = Vec::new();
    for i in 0..4 {
        seeded.push(world.instance(i % 2).await);
    }
    let cloud = provider(&world.config("")).await;

    // Four real instances by ID plus one by DNS name: one DescribeInstances for the IDs, one for the name.
    let mut nodes: Vec<_> = seeded
        .iter()
        .map(|i| node_with_id(&i.id, &i.provider_id()))
        .collect();
    nodes.push(node("ip-192-0-2-1.ec2.internal"));
    let before = cloud.metrics().request_count("DescribeInstances");
    let results = cloud.instance_metadata_bulk(&nodes).await;
    assert_eq!(
        cloud.metrics().request_count("DescribeInstances") - before,
        2
    );
    for (inst, result) in seeded.iter().zip(&results) {
        assert_eq!(
            result.as_ref().unwrap().as_ref().unwrap().provider_id,
            inst.provider_id()
        );
    }
    assert!(results[4].as_ref().unwrap_err().is_instance_not_found());

    // 160 IDs (four real, the rest unknown): two calls of at most 150 filter values.
    let mut many = nodes[..4].to_vec();
    for i in 0..156 {
        many.push(node_with_id(
            "ghost",
            &format!("aws:///us-east-1a/i-{:017x}", 0xdead0000u64 + i),
        ));
    }
    let before = cloud.metrics().request_count("DescribeInstances");
    let states = cloud.instance_states(&many).await;
    assert_eq!(
        cloud.metrics().request_count("DescribeInstances") - before,
        2
    );
    assert_eq!(states.len(), 160);
    assert!(
        states[..4]
            .iter()
            .all(|s| s.as_ref().unwrap() == &InstanceState::Running)
    );
    assert!(
        states[4..]
            .iter()
            .all(|s| s.as_ref().unwrap() == &InstanceState::NotFound)
    );
}

#[tokio::test]
async fn cached_instance_data_has_bounded_staleness() {
    let world = World::new("cache").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("InstanceCacheTTL = 1500ms")).await;
    let nodes = [node_with_id("a", &a.provider_id())];

    assert_eq!(
        cloud.instance_states(&nodes).await[0].as_ref().unwrap(),
        &InstanceState::Running
    );
    let calls = cloud.metrics().request_count("DescribeInstances");
    world.stop(&a.id).await;
    // Within the TTL the cached state answers without an API call...
    assert_eq!(
        cloud.instance_states(&nodes).await[0].as_ref().unwrap(),
        &InstanceState::Running
    );
    assert!(cloud.instance_metadata_bulk(&nodes).await[0].is_ok());
    assert_eq!(cloud.metrics().request_count("DescribeInstances"), calls);
    // ... and never beyond it.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        cloud.instance_states(&nodes).await[0].as_ref().unwrap(),
        &InstanceState::Shutdown
    );
    assert_eq!(
        cloud.metrics().request_count("DescribeInstances"),
        calls + 1
    );
}

#[tokio::test]
async fn zone_of_this_machine_comes_from_the_config() {
    let world = World::new("zone").await;
    let cloud = provider(&world.config("Zone = us-east-1c")).await;
    let zone = cloud.get_zone().await.unwrap();
    assert_eq!(zone.failure_domain, "us-east-1c");
    assert_eq!(zone.region, "us-east-1");
}

/// The network-node labels of instances with a topology, as upstream writes them, looked up in calls of up
/// to 100 instance IDs; a type AWS lists no topology for is not asked again, nodes with the labels are not
/// asked for, and only instance types that should have a topology fail without one.
#[tokio::test]
async fn network_topology_labels_in_bulk() {
    let world = World::new("topology").await;
    let gpu = world.instance_of_type(0, "p5.48xlarge").await;
    let gpu2 = world.instance_of_type(1, "p5.48xlarge").await;
    let plain = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let nodes: Vec<_> = [&gpu, &gpu2, &plain]
        .iter()
        .map(|i| node_with_id(&i.private_dns_name, &i.provider_id()))
        .collect();
    let calls = || cloud.metrics().request_count("DescribeInstanceTopology");
    let before = calls();
    let metadata: Vec<_> = cloud
        .instance_metadata_bulk(&nodes)
        .await
        .into_iter()
        .map(|m| m.unwrap().unwrap())
        .collect();
    assert_eq!(calls() - before, 1, "one call for the three instances");
    let layers = |i: usize| -> Vec<(String, String)> {
        metadata[i]
            .additional_labels
            .iter()
            .filter(|(k, _)| k.starts_with(LABEL_NETWORK_NODE_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let first = layers(0);
    assert_eq!(
        first.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        [
            "topology.k8s.aws/network-node-layer-1",
            "topology.k8s.aws/network-node-layer-2",
            "topology.k8s.aws/network-node-layer-3"
        ]
    );
    // Instances in different zones share no network node; the third layer is each instance's own.
    assert_ne!(first[0].1, layers(1)[0].1);
    assert!(layers(2).is_empty(), "m5.large has no topology");

    // Again: m5.large is known to have none, and a node that has its labels is not asked for.
    let mut labelled = nodes[0].clone();
    labelled.metadata.labels = Some(metadata[0].additional_labels.clone());
    let before = calls();
    let again = cloud
        .instance_metadata_bulk(&[labelled, nodes[2].clone()])
        .await;
    assert!(again.iter().all(|m| m.is_ok()));
    assert_eq!(calls() - before, 0);
    let before = calls();
    cloud.instance_metadata_bulk(&nodes[1..2]).await;
    assert_eq!(
        calls() - before,
        1,
        "answers with a topology are not cached"
    );

    // An m5.large the pattern says should have a topology initializes without one (the empty answer is
    // remembered, not an error), as upstream.
    let strict =
        provider(&world.config("SupportedTopologyInstanceTypePattern = ^m5\\\\..*$")).await;
    let meta = strict.instance_metadata(&nodes[2]).await.unwrap().unwrap();
    assert!(
        !meta
            .additional_labels
            .keys()
            .any(|k| k.starts_with(LABEL_NETWORK_NODE_PREFIX))
    );
}

/// 120 instances: two DescribeInstanceTopology calls (AWS takes at most 100 IDs).
#[tokio::test]
async fn topology_lookups_take_100_instances_per_call() {
    let world = World::new("topologybulk").await;
    let out = world
        .ec2
        .run_instances()
        .image_id(crate::common::AMI)
        .instance_type(aws_sdk_ec2::types::InstanceType::from("trn1.32xlarge"))
        .min_count(120)
        .max_count(120)
        .subnet_id(&world.private_subnets[0].0)
        .tag_specifications(crate::common::tags_for(
            aws_sdk_ec2::types::ResourceType::Instance,
            &[(&world.cluster_tag, "owned")],
        ))
        .send()
        .await
        .expect("run instances");
    let nodes: Vec<_> = out
        .instances()
        .iter()
        .map(|i| {
            let id = i.instance_id().unwrap();
            node_with_id(id, &format!("aws:///us-east-1a/{id}"))
        })
        .collect();
    let cloud = provider(&world.config("")).await;
    let before = cloud.metrics().request_count("DescribeInstanceTopology");
    let metadata = cloud.instance_metadata_bulk(&nodes).await;
    assert_eq!(
        cloud.metrics().request_count("DescribeInstanceTopology") - before,
        2
    );
    assert!(metadata.iter().all(|m| {
        m.as_ref()
            .unwrap()
            .as_ref()
            .unwrap()
            .additional_labels
            .len()
            == 4
    }));
}
