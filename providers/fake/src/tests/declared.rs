//! Load balancers and routes declared in the cloud-config, and the cloud exported as a cloud-config.

use std::sync::Arc;

use cloud_provider::{InstancesV2, LoadBalancer, Route, Routes, node_address};
use k8s_openapi::api::core::v1::LoadBalancerStatus;

use super::{cloud, node, node_with, service};
use crate::{FakeCloud, FaultKind, FaultSpec, InstanceRecord, LoadBalancerRecord};

const WEB_UID: &str = "6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab";

fn ip_of(status: &LoadBalancerStatus) -> String {
    status.ingress.as_ref().unwrap()[0].ip.clone().unwrap()
}

/// The records without the call counters (a declared load balancer has had no call).
fn uncounted(mut lbs: Vec<LoadBalancerRecord>) -> Vec<LoadBalancerRecord> {
    for lb in &mut lbs {
        lb.ensure_count = 0;
        lb.update_count = 0;
    }
    lbs
}

#[tokio::test]
async fn a_declared_load_balancer_is_the_one_ensure_made() {
    let web = service("web", WEB_UID, &[(80, 30080), (443, 30443)]);
    let nodes = [node("node-2"), node("node-1")];
    let first = cloud("");
    let made = first
        .ensure_load_balancer("kubernetes", &web, &nodes)
        .await
        .unwrap();

    let second = cloud(&format!(
        "
loadBalancers:
  - serviceUID: {WEB_UID}
    service: default/web
    ip: 198.51.100.1
    ports: [{{port: 80, nodePort: 30080}}, {{port: 443, nodePort: 30443}}]
    nodes: [node-1, node-2]
"
    ));
    assert_eq!(
        second.get_load_balancer("kubernetes", &web).await.unwrap(),
        Some(made.clone())
    );
    let declared = second.handle().load_balancers();
    assert_eq!(declared, uncounted(first.handle().load_balancers()));
    assert_eq!(declared[0].name, second.get_load_balancer_name("k", &web));

    // Ensuring and updating it keeps the load balancer and its IP.
    assert_eq!(
        second
            .ensure_load_balancer("kubernetes", &web, &nodes)
            .await
            .unwrap(),
        made
    );
    second
        .update_load_balancer("kubernetes", &web, &nodes[..1])
        .await
        .unwrap();
    let lb = &second.handle().load_balancers()[0];
    assert_eq!(
        (lb.ip.as_str(), lb.ensure_count, lb.update_count),
        ("198.51.100.1", 1, 1)
    );
    // The declared IP is taken: the next Service gets the next free address.
    let api = service("api", "uid-api", &[(8080, 30081)]);
    assert_eq!(
        ip_of(
            &second
                .ensure_load_balancer("kubernetes", &api, &nodes)
                .await
                .unwrap()
        ),
        "198.51.100.2"
    );
    // Deleting it releases the IP, as for an ensured one.
    second
        .ensure_load_balancer_deleted("kubernetes", &web)
        .await
        .unwrap();
    assert_eq!(
        second.get_load_balancer("kubernetes", &web).await.unwrap(),
        None
    );
    let db = service("db", "uid-db", &[(5432, 30432)]);
    assert_eq!(
        ip_of(
            &second
                .ensure_load_balancer("kubernetes", &db, &nodes)
                .await
                .unwrap()
        ),
        "198.51.100.1"
    );
}

#[tokio::test]
async fn declared_load_balancers_without_an_ip_take_the_lowest_free_one() {
    let c = cloud(
        "
loadBalancerCIDR: 192.0.2.0/29
loadBalancers:
  - {serviceUID: uid-a, service: default/a, nodes: [n1, n2]}
  - {serviceUID: uid-b, service: default/b, ip: 192.0.2.1, nodes: [n2, n1, n1]}
",
    );
    let lbs = c.handle().load_balancers();
    let by_uid = |uid: &str| lbs.iter().find(|lb| lb.service_uid == uid).unwrap();
    assert_eq!(by_uid("uid-a").ip, "192.0.2.2");
    assert_eq!(by_uid("uid-b").ip, "192.0.2.1");
    // Sorted, without duplicates, and one shared list for the same backends (as ensure keeps them).
    assert_eq!(*by_uid("uid-b").nodes, ["n1".to_string(), "n2".to_string()]);
    assert!(Arc::ptr_eq(&by_uid("uid-a").nodes, &by_uid("uid-b").nodes));
    let a = service("a", "uid-a", &[]);
    assert_eq!(
        c.get_load_balancer("kubernetes", &a)
            .await
            .unwrap()
            .map(|s| ip_of(&s)),
        Some("192.0.2.2".to_string())
    );
    // The status is that of an ensured load balancer: one ingress, the IP in VIP mode.
    let status = c
        .get_load_balancer("kubernetes", &a)
        .await
        .unwrap()
        .unwrap();
    let ingress = status.ingress.unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0].ip_mode.as_deref(), Some("VIP"));
    assert_eq!(ingress[0].hostname, None);
}

#[tokio::test]
async fn declared_routes_are_listed() {
    let c = cloud(
        "
autoDiscover: false
instances: [{name: node-1}, {name: node-2, state: terminated}]
routes:
  - targetNode: node-1
    destinationCIDR: 10.244.1.0/24
    targetNodeAddresses: [{type: InternalIP, address: 10.0.0.11}]
  - name: kubernetes-uid-2-10-244-2-0-24
    targetNode: node-2
    destinationCIDR: 10.244.2.0/24
  - cluster: other
    targetNode: node-1
    destinationCIDR: 10.244.1.0/24
",
    );
    let listed = c.list_routes("kubernetes").await.unwrap();
    assert_eq!(
        listed,
        [
            Route {
                name: "kubernetes-node-1-10-244-1-0-24".into(),
                target_node: "node-1".into(),
                target_node_addresses: vec![node_address("InternalIP", "10.0.0.11")],
                destination_cidr: "10.244.1.0/24".into(),
                blackhole: false,
            },
            // Its target instance is terminated.
            Route {
                name: "kubernetes-uid-2-10-244-2-0-24".into(),
                target_node: "node-2".into(),
                target_node_addresses: vec![],
                destination_cidr: "10.244.2.0/24".into(),
                blackhole: true,
            },
        ]
    );
    let other = c.list_routes("other").await.unwrap();
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].name, "other-node-1-10-244-1-0-24");

    // The table's rules hold for declared routes: creating the same route again is a no-op, another
    // route to the same destination is refused, deleting removes it.
    c.create_route("kubernetes", "node-1", &listed[0])
        .await
        .unwrap();
    assert!(
        c.create_route("kubernetes", "uid-1", &listed[0])
            .await
            .is_err()
    );
    assert_eq!(c.handle().routes().len(), 3);
    c.delete_route("kubernetes", &listed[1]).await.unwrap();
    assert_eq!(c.list_routes("kubernetes").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_declared_route_lists_like_the_created_one() {
    let route = Route {
        name: String::new(),
        target_node: "node-1".into(),
        target_node_addresses: vec![
            node_address("InternalIP", "10.0.0.11"),
            node_address("Hostname", "node-1"),
        ],
        destination_cidr: "fd00:10:244:1::/64".into(),
        blackhole: false,
    };
    let first = cloud("");
    first
        .create_route("kubernetes", "9c1d-uid", &route)
        .await
        .unwrap();
    let second = cloud(
        "
routes:
  - name: kubernetes-9c1d-uid-fd00-10-244-1---64
    targetNode: node-1
    destinationCIDR: fd00:10:244:1::/64
    targetNodeAddresses:
      - {type: InternalIP, address: 10.0.0.11}
      - {type: Hostname, address: node-1}
",
    );
    assert_eq!(
        second.list_routes("kubernetes").await.unwrap(),
        first.list_routes("kubernetes").await.unwrap()
    );
    assert_eq!(second.handle().routes(), first.handle().routes());
}

#[tokio::test]
async fn the_exported_cloud_config_starts_a_cloud_in_the_same_state() {
    let first = cloud(
        "
zones: [z1, z2]
clusterName: prod
loadBalancerCIDR: 192.0.2.0/28
instances:
  - name: n1
    id: i-1
    zone: z2
    type: fake.large
    labels: {pool: blue}
    addresses: [{type: InternalIP, address: 10.0.0.1}]
  - {name: n2}
  - {name: gone, id: i-gone, state: terminated}
",
    );
    let h = first.handle();
    // Auto-discovered instances: one running, one stopped, one terminated.
    let n3 = node_with("n3", None, &[("InternalIP", "10.0.0.3")]);
    first.instance_metadata(&n3).await.unwrap();
    first
        .instance_metadata(&node_with(
            "n4",
            Some("fake://i-4"),
            &[("InternalIP", "10.0.0.4")],
        ))
        .await
        .unwrap();
    h.stop_instance("n4").unwrap();
    first.instance_metadata(&node("n5")).await.unwrap();
    h.terminate_instance("n5").unwrap();
    h.stop_instance("n2").unwrap();
    // Three load balancers, the first deleted again: the pool has a hole at .1.
    let nodes = [node("n1"), node("n2")];
    for (name, uid) in [("old", "uid-old"), ("web", WEB_UID), ("api", "uid-api")] {
        first
            .ensure_load_balancer("prod", &service(name, uid, &[(80, 30080)]), &nodes)
            .await
            .unwrap();
    }
    first
        .ensure_load_balancer_deleted("prod", &service("old", "uid-old", &[]))
        .await
        .unwrap();
    let route = |node: &str, cidr: &str| Route {
        target_node: node.into(),
        target_node_addresses: vec![node_address("InternalIP", "10.0.0.1")],
        destination_cidr: cidr.into(),
        ..Route::default()
    };
    first
        .create_route("prod", "uid-1", &route("n1", "10.244.1.0/24"))
        .await
        .unwrap();
    first
        .create_route("other", "uid-1", &route("n1", "10.244.1.0/24"))
        .await
        .unwrap();
    h.set_fault("create_route", FaultSpec::errors(0.5, FaultKind::Retry))
        .unwrap();

    let exported = h.cloud_config();
    let yaml = serde_saphyr::to_string(&exported).unwrap();
    let second = FakeCloud::from_yaml(yaml.as_bytes()).unwrap();
    // The running auto-discovered instance is discovered again from its node.
    second.instance_metadata(&n3).await.unwrap();

    let (a, b) = (h.state(), second.handle().state());
    let plain = |mut list: Vec<InstanceRecord>| {
        for i in &mut list {
            i.auto_discovered = false;
        }
        list
    };
    assert_eq!(plain(b.instances), plain(a.instances));
    assert_eq!(b.terminated, ["gone", "n5"]);
    assert_eq!(b.terminated, a.terminated);
    assert_eq!(b.load_balancers, uncounted(a.load_balancers));
    assert_eq!(b.routes, a.routes);
    assert_eq!(b.faults, a.faults);
    for cluster in ["prod", "other"] {
        assert_eq!(
            second.list_routes(cluster).await.unwrap(),
            first.list_routes(cluster).await.unwrap()
        );
    }
    assert!(!second.instance_exists(&node("gone")).await.unwrap());
    assert!(!second.instance_exists(&node("n5")).await.unwrap());
    // Both clouds give the next load balancer the same address (the hole).
    let next = service("next", "uid-next", &[(80, 30081)]);
    let ip = ip_of(
        &first
            .ensure_load_balancer("prod", &next, &nodes)
            .await
            .unwrap(),
    );
    assert_eq!(ip, "192.0.2.1");
    assert_eq!(
        ip_of(
            &second
                .ensure_load_balancer("prod", &next, &nodes)
                .await
                .unwrap()
        ),
        ip
    );
    // Exporting the second cloud gives the same cloud-config again.
    second
        .ensure_load_balancer_deleted("prod", &next)
        .await
        .unwrap();
    assert_eq!(second.handle().cloud_config(), exported);

    // The shape: explicit values, no running auto-discovered instance, the other cluster named.
    assert!(!yaml.contains("n3"), "{yaml}");
    assert!(
        yaml.contains("serviceUID: 6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab"),
        "{yaml}"
    );
    assert!(yaml.contains("cluster: other"), "{yaml}");
    assert!(!yaml.contains("cluster: prod"), "{yaml}");
}

#[tokio::test]
async fn a_cloud_without_load_balancers_or_routes_exports_no_such_keys() {
    let c = cloud("");
    let yaml = serde_saphyr::to_string(&c.handle().cloud_config()).unwrap();
    assert!(!yaml.contains("loadBalancers"), "{yaml}");
    assert!(!yaml.contains("routes"), "{yaml}");
    assert_eq!(
        crate::FakeConfig::from_yaml(yaml.as_bytes()).unwrap(),
        *c.config()
    );
}

#[tokio::test]
async fn backend_lists_shared_by_load_balancers_are_exported_once() {
    let first = cloud("");
    let many = [node("n3"), node("n1"), node("n2")];
    for i in 0..4 {
        first
            .ensure_load_balancer(
                "kubernetes",
                &service(&format!("svc-{i}"), &format!("uid-{i}"), &[(80, 30080)]),
                &many,
            )
            .await
            .unwrap();
    }
    first
        .ensure_load_balancer(
            "kubernetes",
            &service("lonely", "uid-lonely", &[(80, 30080)]),
            &[node("n1")],
        )
        .await
        .unwrap();
    // A list equal to the shared one but held apart (another ensure came in between) joins it.
    first
        .ensure_load_balancer(
            "kubernetes",
            &service("late", "uid-late", &[(80, 30080)]),
            &many,
        )
        .await
        .unwrap();

    let exported = first.handle().cloud_config();
    assert_eq!(exported.load_balancer_node_sets, [vec!["n1", "n2", "n3"]]);
    let lonely = exported
        .load_balancers
        .iter()
        .find(|lb| lb.service == "default/lonely")
        .unwrap();
    assert_eq!(
        (lonely.nodes.clone(), lonely.node_set),
        (vec!["n1".to_string()], None)
    );
    for lb in exported
        .load_balancers
        .iter()
        .filter(|lb| lb.service != "default/lonely")
    {
        assert_eq!((lb.nodes.len(), lb.node_set), (0, Some(0)), "{lb:?}");
    }
    let yaml = serde_saphyr::to_string(&exported).unwrap();
    assert_eq!(yaml.matches("n3").count(), 1, "{yaml}");

    let second = FakeCloud::from_yaml(yaml.as_bytes()).unwrap();
    let restored = second.handle().load_balancers();
    assert_eq!(restored, uncounted(first.handle().load_balancers()));
    let shared: Vec<&LoadBalancerRecord> =
        restored.iter().filter(|lb| lb.nodes.len() == 3).collect();
    assert_eq!(shared.len(), 5);
    assert!(
        shared
            .iter()
            .all(|lb| Arc::ptr_eq(&lb.nodes, &shared[0].nodes))
    );
    assert_eq!(second.handle().cloud_config(), exported);
}
