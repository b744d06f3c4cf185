//! Pod routes against moto.

use cloud_provider::{Route, Routes};

use crate::common::{World, provider};

async fn table_routes(world: &World, table: &str) -> Vec<(String, Option<String>)> {
    let out = world
        .ec2
        .describe_route_tables()
        .route_table_ids(table)
        .send()
        .await
        .unwrap();
    out.route_tables()[0]
        .routes()
        .iter()
        .filter_map(|r| {
            Some((
                r.destination_cidr_block()?.to_string(),
                r.instance_id().map(str::to_string),
            ))
        })
        .collect()
}

async fn source_dest_check(world: &World, id: &str) -> Option<bool> {
    world
        .ec2
        .describe_instance_attribute()
        .instance_id(id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::SourceDestCheck)
        .send()
        .await
        .unwrap()
        .source_dest_check()
        .and_then(|v| v.value())
}

fn route(node: &str, cidr: &str) -> Route {
    Route {
        target_node: node.to_string(),
        destination_cidr: cidr.to_string(),
        ..Default::default()
    }
}

#[tokio::test]
async fn create_list_and_delete_routes() {
    let world = World::new("routes").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let cloud = provider(&world.config("")).await;
    assert_eq!(source_dest_check(&world, &a.id).await, Some(true));

    // Nodes named by private DNS name and by instance ID.
    cloud
        .create_route(
            "prod",
            "uid-a",
            &route(&a.private_dns_name, "10.244.1.0/24"),
        )
        .await
        .unwrap();
    cloud
        .create_route("prod", "uid-b", &route(&b.id, "10.244.2.0/24"))
        .await
        .unwrap();
    let in_table = table_routes(&world, &world.route_table_id).await;
    assert!(
        in_table.contains(&("10.244.1.0/24".into(), Some(a.id.clone()))),
        "{in_table:?}"
    );
    assert!(
        in_table.contains(&("10.244.2.0/24".into(), Some(b.id.clone()))),
        "{in_table:?}"
    );
    assert_eq!(source_dest_check(&world, &a.id).await, Some(false));
    assert_eq!(source_dest_check(&world, &b.id).await, Some(false));

    let mut listed = cloud.list_routes("prod").await.unwrap();
    listed.sort_by(|x, y| x.destination_cidr.cmp(&y.destination_cidr));
    assert_eq!(
        listed.len(),
        2,
        "the VPC's local route is not a node route: {listed:?}"
    );
    assert_eq!(listed[0].name, "prod-10.244.1.0/24");
    assert_eq!(listed[0].target_node, a.private_dns_name);
    assert!(!listed[0].blackhole);
    assert_eq!(
        listed[1].target_node, b.id,
        "the node name the route was created for"
    );

    // Creating again is a no-op.
    let creates = cloud.metrics().request_count("CreateRoute");
    let modifies = cloud.metrics().request_count("ModifyInstanceAttribute");
    cloud
        .create_route(
            "prod",
            "uid-a",
            &route(&a.private_dns_name, "10.244.1.0/24"),
        )
        .await
        .unwrap();
    assert_eq!(cloud.metrics().request_count("CreateRoute"), creates);
    assert_eq!(
        cloud.metrics().request_count("ModifyInstanceAttribute"),
        modifies
    );

    // A fresh provider (no memory of created routes) names targets by private DNS name.
    let fresh = provider(&world.config("")).await;
    let listed = fresh.list_routes("prod").await.unwrap();
    assert!(listed.iter().any(|r| r.target_node == b.private_dns_name));

    cloud.delete_route("prod", &listed[0]).await.unwrap();
    cloud.delete_route("prod", &listed[1]).await.unwrap();
    assert!(cloud.list_routes("prod").await.unwrap().is_empty());
    // Deleting a route that is gone succeeds.
    cloud.delete_route("prod", &listed[0]).await.unwrap();

    // A node whose instance is gone cannot get a route.
    let err = cloud
        .create_route(
            "prod",
            "uid-x",
            &route("i-00000000000000bad", "10.244.9.0/24"),
        )
        .await
        .unwrap_err();
    assert!(err.is_instance_not_found(), "{err}");
}

#[tokio::test]
async fn route_table_discovery() {
    let world = World::new("rtb").await;
    let a = world.instance(0).await;

    // A second table tagged for the cluster makes the choice ambiguous...
    let second = world
        .ec2
        .create_route_table()
        .vpc_id(&world.vpc_id)
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::RouteTable)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key(&world.cluster_tag)
                        .value("owned")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap()
        .route_table()
        .unwrap()
        .route_table_id()
        .unwrap()
        .to_string();
    let cloud = provider(&world.config("")).await;
    let err = cloud.list_routes("c").await.unwrap_err();
    assert!(err.to_string().contains("RouteTableID"), "{err}");
    assert!(err.to_string().contains("found 2 route tables"), "{err}");

    // ... which RouteTableID resolves.
    let cloud = provider(&world.config(&format!("RouteTableID = {second}"))).await;
    cloud
        .create_route("c", "uid", &route(&a.private_dns_name, "10.250.0.0/24"))
        .await
        .unwrap();
    assert!(
        table_routes(&world, &second)
            .await
            .contains(&("10.250.0.0/24".into(), Some(a.id.clone())))
    );
    assert!(
        !table_routes(&world, &world.route_table_id)
            .await
            .iter()
            .any(|r| r.0 == "10.250.0.0/24")
    );

    // A cluster without a tagged table.
    let other = provider(&crate::common::cloud_config("no-such-cluster", "")).await;
    let err = other.list_routes("c").await.unwrap_err();
    assert!(err.to_string().contains("found no route table"), "{err}");
    // A configured table that does not exist.
    let missing = provider(&world.config("RouteTableID = rtb-0000dead")).await;
    let err = missing.list_routes("c").await.unwrap_err();
    assert!(err.to_string().contains("rtb-0000dead"), "{err}");
}

/// A route table tagged only with the legacy `KubernetesCluster=<id>` is the cluster's, as upstream finds it;
/// one of another cluster is not.
#[tokio::test]
async fn legacy_tagged_route_table() {
    let world = World::new("rtblegacy").await;
    let a = world.instance(0).await;
    let legacy_id = format!("{}-legacy", world.cluster_id);
    let table = |value: &str| {
        world
            .ec2
            .create_route_table()
            .vpc_id(&world.vpc_id)
            .tag_specifications(
                aws_sdk_ec2::types::TagSpecification::builder()
                    .resource_type(aws_sdk_ec2::types::ResourceType::RouteTable)
                    .tags(
                        aws_sdk_ec2::types::Tag::builder()
                            .key("KubernetesCluster")
                            .value(value)
                            .build(),
                    )
                    .build(),
            )
    };
    let ours = table(&legacy_id)
        .send()
        .await
        .unwrap()
        .route_table()
        .unwrap()
        .route_table_id()
        .unwrap()
        .to_string();
    table("some-other-cluster").send().await.unwrap();
    let config = format!(
        "[Global]\nRegion = {}\nKubernetesClusterTag = {legacy_id}\nInstanceCacheTTL = 0\n{}",
        crate::common::REGION,
        crate::common::cloud_config(&legacy_id, "")
            .split_once("\n[ServiceOverride")
            .map(|(_, rest)| format!("[ServiceOverride{rest}"))
            .unwrap()
    );
    let cloud = provider(&config).await;
    cloud
        .create_route("c", "uid", &route(&a.id, "10.251.0.0/24"))
        .await
        .unwrap();
    assert!(
        table_routes(&world, &ours)
            .await
            .contains(&("10.251.0.0/24".into(), Some(a.id.clone())))
    );
}
