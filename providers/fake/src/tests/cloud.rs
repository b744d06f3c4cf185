use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cloud_provider::{
    CloudError, CloudProvider, Clusters, InstanceState, Instances, InstancesV2, LoadBalancer,
    PvLabeler, Registry, RegistryError, Route, Routes, Zones, well_known,
};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};

use super::{cloud, node, node_with, service};
use crate::{FaultKind, FaultSpec, InstanceConfig, PowerState};

fn ip_of(status: &k8s_openapi::api::core::v1::LoadBalancerStatus) -> String {
    status.ingress.as_ref().unwrap()[0].ip.clone().unwrap()
}

#[tokio::test]
async fn auto_discovery_is_deterministic_and_uses_kubelet_addresses() {
    let yaml = "zones: [z1, z2, z3]\n";
    let (a, b) = (cloud(yaml), cloud(yaml));
    let mut seen = BTreeMap::<String, usize>::new();
    for i in 0..30 {
        let n = node_with(
            &format!("node-{i}"),
            None,
            &[("InternalIP", "10.0.0.9"), ("Hostname", "h")],
        );
        let ma = a.instance_metadata(&n).await.unwrap().unwrap();
        let mb = b.instance_metadata(&n).await.unwrap().unwrap();
        assert_eq!(ma, mb, "same name, same zone in every cloud");
        assert_eq!(ma.provider_id, format!("fake://node-{i}"));
        assert_eq!(ma.region, "fake-region-1");
        assert_eq!(ma.instance_type, "fake.small");
        assert_eq!(
            ma.node_addresses,
            n.status.as_ref().unwrap().addresses.clone().unwrap()
        );
        *seen.entry(ma.zone).or_default() += 1;
    }
    // The hash spreads nodes over every configured zone.
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        vec!["z1", "z2", "z3"]
    );
    // Asking again gives the same zone; new kubelet addresses are followed.
    let n = node_with("node-3", None, &[("InternalIP", "10.0.0.10")]);
    let again = a.instance_metadata(&n).await.unwrap().unwrap();
    assert_eq!(
        again.zone,
        b.instance_metadata(&node("node-3"))
            .await
            .unwrap()
            .unwrap()
            .zone
    );
    assert_eq!(again.node_addresses[0].address, "10.0.0.10");
    let rec = a.handle().instance("node-3").unwrap();
    assert!(rec.auto_discovered);
    assert_eq!(rec.state, PowerState::Running);
}

#[tokio::test]
async fn discovered_instances_can_report_an_external_ip() {
    let c = cloud("discoveredExternalIPs: true\n");
    let n = node_with(
        "ext-1",
        None,
        &[("InternalIP", "10.1.2.3"), ("Hostname", "ext-1")],
    );
    let md = c.instance_metadata(&n).await.unwrap().unwrap();
    let reported: Vec<(&str, &str)> = md
        .node_addresses
        .iter()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    assert_eq!(
        reported,
        [
            ("InternalIP", "10.1.2.3"),
            ("Hostname", "ext-1"),
            ("ExternalIP", "198.18.2.3")
        ]
    );
    // Once the node shows it, the same list comes back (no second ExternalIP).
    let written = node_with(
        "ext-1",
        None,
        &[
            ("InternalIP", "10.1.2.3"),
            ("Hostname", "ext-1"),
            ("ExternalIP", "198.18.2.3"),
        ],
    );
    let again = c.instance_metadata(&written).await.unwrap().unwrap();
    assert_eq!(again.node_addresses, md.node_addresses);
    // Off by default: exactly the kubelet's addresses.
    let plain = cloud("{}\n").instance_metadata(&n).await.unwrap().unwrap();
    assert_eq!(plain.node_addresses.len(), 2);
}

#[tokio::test]
async fn terminated_instances_stay_gone_with_auto_discovery() {
    let c = cloud("");
    let n = node("worker");
    assert!(c.instance_exists(&n).await.unwrap());
    c.handle().terminate_instance("worker").unwrap();
    assert!(!c.instance_exists(&n).await.unwrap());
    let with_id = node_with("worker", Some("fake://worker"), &[]);
    assert!(!c.instance_exists(&with_id).await.unwrap());
    assert!(
        c.instance_metadata(&n)
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert!(
        c.instance_shutdown(&n)
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert!(
        !c.instance_exists_by_provider_id("fake://worker")
            .await
            .unwrap()
    );
    assert!(
        c.instance_id("worker")
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert_eq!(c.handle().state().terminated, vec!["worker"]);
    let err = c.handle().stop_instance("worker").unwrap_err();
    assert_eq!(
        err.to_string(),
        "not found: instance \"worker\" is terminated"
    );
    // Adding it again explicitly brings it back.
    c.handle()
        .add_instance(InstanceConfig::named("worker"))
        .unwrap();
    assert!(c.instance_exists(&n).await.unwrap());
}

#[tokio::test]
async fn without_auto_discovery_unknown_nodes_do_not_exist() {
    let c = cloud("autoDiscover: false\n");
    assert!(!c.instance_exists(&node("x")).await.unwrap());
    assert!(
        c.instance_metadata(&node("x"))
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert!(
        c.node_addresses("x")
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert!(c.handle().instances().is_empty());
}

#[tokio::test]
async fn explicit_instances_v1_and_v2() {
    let c = cloud(
        r#"
region: r
zones: [r-a, r-b]
instanceTypes: [small, big]
autoDiscover: false
instances:
  - name: n1
    id: i-1
    type: big
    zone: r-b
    labels: {example.com/pool: blue}
    addresses: [{type: InternalIP, address: 10.1.0.1}, {type: Hostname, address: host-1}]
  - name: n2
    providerID: fake://i-2
    state: stopped
  - name: n3
    state: terminated
"#,
    );
    let n1 = node("n1");
    let m = c.instance_metadata(&n1).await.unwrap().unwrap();
    assert_eq!(m.provider_id, "fake://i-1");
    assert_eq!(m.instance_type, "big");
    assert_eq!((m.zone.as_str(), m.region.as_str()), ("r-b", "r"));
    assert_eq!(
        m.additional_labels
            .get("example.com/pool")
            .map(String::as_str),
        Some("blue")
    );
    // By provider ID on the node.
    let by_pid = node_with("n1", Some("fake://i-1"), &[]);
    assert_eq!(c.instance_metadata(&by_pid).await.unwrap().unwrap(), m);
    // Stopped instances exist and are shut down.
    let n2 = node("n2");
    assert!(c.instance_exists(&n2).await.unwrap());
    assert!(c.instance_shutdown(&n2).await.unwrap());
    assert!(!c.instance_shutdown(&n1).await.unwrap());
    let states = c
        .instance_states(&[n1.clone(), n2.clone(), node("n3"), node("nope")])
        .await;
    let states: Vec<_> = states.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        states,
        vec![
            InstanceState::Running,
            InstanceState::Shutdown,
            InstanceState::NotFound,
            InstanceState::NotFound
        ]
    );
    // v1
    assert_eq!(c.instance_id("n1").await.unwrap(), "i-1");
    assert_eq!(c.instance_type("n1").await.unwrap(), "big");
    assert_eq!(
        c.instance_type_by_provider_id("fake://i-2").await.unwrap(),
        "small"
    );
    assert_eq!(c.node_addresses("n1").await.unwrap(), m.node_addresses);
    assert_eq!(
        c.node_addresses_by_provider_id("fake://i-1").await.unwrap(),
        m.node_addresses
    );
    assert!(
        c.instance_exists_by_provider_id("fake://i-2")
            .await
            .unwrap()
    );
    assert!(
        c.instance_shutdown_by_provider_id("fake://i-2")
            .await
            .unwrap()
    );
    assert!(
        !c.instance_exists_by_provider_id("fake://i-9")
            .await
            .unwrap()
    );
    assert_eq!(c.current_node_name("host-1").await.unwrap(), "n1");
    assert_eq!(c.current_node_name("other").await.unwrap(), "other");
    // Zones
    let z = c.get_zone_by_node_name("n1").await.unwrap();
    assert_eq!((z.failure_domain.as_str(), z.region.as_str()), ("r-b", "r"));
    assert_eq!(c.get_zone_by_provider_id("fake://i-1").await.unwrap(), z);
    assert_eq!(c.get_zone().await.unwrap().failure_domain, "r-a");
    assert!(
        c.get_zone_by_node_name("n3")
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    // Another cloud's provider ID is an error, not "gone".
    let foreign = node_with("n1", Some("aws:///zone/i-1"), &[]);
    let err = c.instance_exists(&foreign).await.unwrap_err();
    assert!(
        err.to_string().contains("not a fake cloud provider ID"),
        "{err}"
    );
    // Start/stop through the handle.
    c.handle().start_instance("n2").unwrap();
    assert!(!c.instance_shutdown(&n2).await.unwrap());
    c.handle().stop_instance("i-1").unwrap();
    assert!(c.instance_shutdown(&n1).await.unwrap());
}

#[tokio::test]
async fn bulk_lookups_are_one_cloud_call() {
    let c = cloud("");
    let nodes: Vec<_> = (0..50).map(|i| node(&format!("n{i}"))).collect();
    let metas = c.instance_metadata_bulk(&nodes).await;
    assert_eq!(metas.len(), 50);
    for (i, m) in metas.iter().enumerate() {
        assert_eq!(
            m.as_ref().unwrap().as_ref().unwrap().provider_id,
            format!("fake://n{i}")
        );
    }
    let states = c.instance_states(&nodes).await;
    assert!(
        states
            .iter()
            .all(|s| matches!(s, Ok(InstanceState::Running)))
    );
    let calls = c.handle().calls();
    assert_eq!(calls.get("instance_metadata_bulk"), Some(&1));
    assert_eq!(calls.get("instance_states"), Some(&1));
    assert_eq!(calls.get("instance_metadata"), None);
    // A fault on the bulk call fails every entry at once.
    c.handle()
        .set_fault(
            "instance_metadata_bulk",
            FaultSpec::errors(1.0, FaultKind::Provider),
        )
        .unwrap();
    let metas = c.instance_metadata_bulk(&nodes[..3]).await;
    assert!(
        metas
            .iter()
            .all(|m| m.as_ref().unwrap_err().to_string()
                == "injected fault in instance_metadata_bulk")
    );
    c.handle()
        .set_fault(
            "instance_states",
            FaultSpec::errors(1.0, FaultKind::NotFound),
        )
        .unwrap();
    let states = c.instance_states(&nodes[..3]).await;
    assert!(
        states
            .iter()
            .all(|s| matches!(s, Ok(InstanceState::NotFound)))
    );
}

#[tokio::test]
async fn a_hang_lasts_until_the_faults_change() {
    let c = cloud("");
    let control = c.handle();
    control
        .set_fault("list_routes", FaultSpec::errors(1.0, FaultKind::Hang))
        .unwrap();
    // A caller's timeout frees it.
    let timed_out =
        tokio::time::timeout(Duration::from_millis(100), c.list_routes("kubernetes")).await;
    assert!(timed_out.is_err(), "the call hangs");
    // Other operations are not affected.
    assert_eq!(c.list_clusters().await.unwrap(), ["kubernetes"]);
    // A call hanging while the faults change fails like a reset connection.
    let hanging = tokio::spawn({
        let c = c.clone();
        async move { c.list_routes("kubernetes").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!hanging.is_finished(), "still hanging");
    assert!(control.clear_fault("list_routes"));
    let ended = tokio::time::timeout(Duration::from_secs(5), hanging)
        .await
        .expect("released by the change")
        .unwrap();
    assert_eq!(
        ended.unwrap_err().to_string(),
        "injected hang in list_routes ended (the faults changed): connection reset"
    );
    assert!(c.list_routes("kubernetes").await.unwrap().is_empty());
    assert_eq!(control.call_count("list_routes"), 3);
    // A hang for a number of calls hangs only those.
    control
        .set_fault(
            "get_zone",
            FaultSpec::errors(1.0, FaultKind::Hang).for_calls(1),
        )
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(50), c.get_zone())
            .await
            .is_err()
    );
    assert!(c.get_zone().await.is_ok());
}

#[tokio::test]
async fn load_balancers_are_idempotent_and_release_ips() {
    let c = cloud("loadBalancerCIDR: 192.0.2.0/30\n");
    let s1 = service(
        "web",
        "11111111-2222-3333-4444-555555555555",
        &[(80, 30080)],
    );
    let s2 = service(
        "api",
        "aaaaaaaa-2222-3333-4444-555555555555",
        &[(443, 30443)],
    );
    let s3 = service(
        "db",
        "bbbbbbbb-2222-3333-4444-555555555555",
        &[(5432, 30432)],
    );
    let nodes = [node("b"), node("a")];
    assert_eq!(c.get_load_balancer("k", &s1).await.unwrap(), None);
    let st = c.ensure_load_balancer("k", &s1, &nodes).await.unwrap();
    assert_eq!(ip_of(&st), "192.0.2.1");
    // Ensure again: same IP, no second LB.
    let again = c.ensure_load_balancer("k", &s1, &nodes[..1]).await.unwrap();
    assert_eq!(again, st);
    let lbs = c.handle().load_balancers();
    assert_eq!(lbs.len(), 1);
    assert_eq!(
        lbs[0].name,
        "a11111111222233334444555555555555"[..32].to_string()
    );
    assert_eq!(lbs[0].name, c.get_load_balancer_name("k", &s1));
    assert_eq!(lbs[0].service, "default/web");
    assert_eq!(*lbs[0].nodes, ["b".to_string()]);
    assert_eq!(lbs[0].ensure_count, 2);
    assert_eq!(lbs[0].ports[0].port, 80);
    assert_eq!(lbs[0].ports[0].node_port, Some(30080));
    assert_eq!(
        c.get_load_balancer("k", &s1).await.unwrap(),
        Some(st.clone())
    );
    // Update changes hosts only.
    c.update_load_balancer("k", &s1, &nodes).await.unwrap();
    let lb = &c.handle().load_balancers()[0];
    assert_eq!(
        (lb.nodes.to_vec(), lb.update_count),
        (vec!["a".to_string(), "b".to_string()], 1)
    );
    assert!(c.update_load_balancer("k", &s2, &nodes).await.is_err());
    // Second LB takes the second and last address; the third exhausts the pool.
    assert_eq!(
        ip_of(&c.ensure_load_balancer("k", &s2, &nodes).await.unwrap()),
        "192.0.2.2"
    );
    let err = c.ensure_load_balancer("k", &s3, &nodes).await.unwrap_err();
    assert!(
        err.to_string().contains("192.0.2.0/30 is exhausted"),
        "{err}"
    );
    // Delete releases the IP; deleting twice is fine.
    c.ensure_load_balancer_deleted("k", &s1).await.unwrap();
    c.ensure_load_balancer_deleted("k", &s1).await.unwrap();
    assert_eq!(c.get_load_balancer("k", &s1).await.unwrap(), None);
    assert_eq!(
        ip_of(&c.ensure_load_balancer("k", &s3, &nodes).await.unwrap()),
        "192.0.2.1"
    );
    // A Service without a UID has no LB name.
    let mut no_uid = service("x", "u", &[]);
    no_uid.metadata.uid = None;
    assert!(c.ensure_load_balancer("k", &no_uid, &nodes).await.is_err());
}

#[tokio::test]
async fn requested_load_balancer_ip() {
    let c = cloud("");
    let mut s = service(
        "web",
        "11111111-0000-0000-0000-000000000000",
        &[(80, 30080)],
    );
    s.spec.as_mut().unwrap().load_balancer_ip = Some("198.51.100.77".into());
    assert_eq!(
        ip_of(&c.ensure_load_balancer("k", &s, &[]).await.unwrap()),
        "198.51.100.77"
    );
    s.spec.as_mut().unwrap().load_balancer_ip = Some("198.51.100.78".into());
    assert_eq!(
        ip_of(&c.ensure_load_balancer("k", &s, &[]).await.unwrap()),
        "198.51.100.78"
    );
    let other = service(
        "other",
        "22222222-0000-0000-0000-000000000000",
        &[(80, 30081)],
    );
    let mut taken = other.clone();
    taken.spec.as_mut().unwrap().load_balancer_ip = Some("198.51.100.78".into());
    assert!(
        c.ensure_load_balancer("k", &taken, &[])
            .await
            .unwrap_err()
            .to_string()
            .contains("in use")
    );
    // .77 was released when the first LB moved.
    let mut s77 = other.clone();
    s77.spec.as_mut().unwrap().load_balancer_ip = Some("198.51.100.77".into());
    assert_eq!(
        ip_of(&c.ensure_load_balancer("k", &s77, &[]).await.unwrap()),
        "198.51.100.77"
    );
    let mut bad = service("bad", "33333333-0000-0000-0000-000000000000", &[]);
    bad.spec.as_mut().unwrap().load_balancer_ip = Some("10.0.0.1".into());
    assert!(
        c.ensure_load_balancer("k", &bad, &[])
            .await
            .unwrap_err()
            .to_string()
            .contains("not a host address")
    );
}

#[tokio::test]
async fn routes_table() {
    let c = cloud("autoDiscover: false\ninstances: [{name: n1}, {name: n2}]\n");
    let route = |node: &str, cidr: &str| Route {
        name: String::new(),
        target_node: node.to_string(),
        target_node_addresses: vec![],
        destination_cidr: cidr.to_string(),
        blackhole: false,
    };
    c.create_route("k", "uid-1", &route("n1", "10.244.1.0/24"))
        .await
        .unwrap();
    c.create_route("k", "uid-1", &route("n1", "10.244.1.0/24"))
        .await
        .unwrap();
    c.create_route("k", "uid-2", &route("n2", "10.244.2.0/24"))
        .await
        .unwrap();
    c.create_route("other", "uid-1", &route("n1", "10.9.0.0/24"))
        .await
        .unwrap();
    // A second destination with the same hint (a dual-stack node's IPv6 pod CIDR) is its own route.
    c.create_route("k", "uid-1", &route("n1", "fd00:10:244:1::/64"))
        .await
        .unwrap();
    assert!(
        c.create_route("k", "uid-3", &route("n2", "10.244.2.0/24"))
            .await
            .is_err()
    );
    assert!(
        c.create_route("k", "uid-4", &route("n2", "not-a-cidr"))
            .await
            .is_err()
    );
    let listed = c.list_routes("k").await.unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].name, "k-uid-1-10-244-1-0-24");
    assert_eq!(listed[0].destination_cidr, "10.244.1.0/24");
    assert!(!listed[0].blackhole);
    assert_eq!(listed[1].name, "k-uid-1-fd00-10-244-1---64");
    // A route whose target instance is terminated is a blackhole.
    c.handle().terminate_instance("n2").unwrap();
    let listed = c.list_routes("k").await.unwrap();
    assert!(listed[2].blackhole);
    c.delete_route("k", &listed[1]).await.unwrap();
    c.delete_route("k", &listed[1]).await.unwrap();
    assert_eq!(c.list_routes("k").await.unwrap().len(), 2);
    assert_eq!(c.handle().routes().len(), 3);
}

#[tokio::test]
async fn clusters_and_volume_labels() {
    let c = cloud(
        "clusterName: prod\nmasterAddress: 10.0.0.1:6443\nzones: [z1, z2]\nvolumes: [{name: pv-static, zone: z2}]\n",
    );
    assert_eq!(c.list_clusters().await.unwrap(), vec!["prod"]);
    assert_eq!(c.master("prod").await.unwrap(), "10.0.0.1:6443");
    assert!(c.master("dev").await.is_err());
    assert!(!c.has_cluster_id());

    let mut pv = PersistentVolume::default();
    pv.metadata.name = Some("pv-static".into());
    let labels = c.get_labels_for_volume(&pv).await.unwrap().unwrap();
    assert_eq!(
        labels.get(well_known::LABEL_ZONE).map(String::as_str),
        Some("z2")
    );
    assert_eq!(
        labels.get(well_known::LABEL_ZONE_BETA).map(String::as_str),
        Some("z2")
    );
    assert_eq!(
        labels.get(well_known::LABEL_REGION).map(String::as_str),
        Some("fake-region-1")
    );
    assert_eq!(labels.len(), 4);

    let csi = |driver: &str, handle: &str, zone: Option<&str>| {
        let mut pv = PersistentVolume::default();
        pv.metadata.name = Some(format!("pvc-{handle}"));
        pv.spec = Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: handle.into(),
                volume_attributes: zone
                    .map(|z| BTreeMap::from([("zone".to_string(), z.to_string())])),
                ..Default::default()
            }),
            ..Default::default()
        });
        pv
    };
    let l = c
        .get_labels_for_volume(&csi("fake.csi.cloud", "vol-1", Some("z1")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l[well_known::LABEL_ZONE], "z1");
    let l1 = c
        .get_labels_for_volume(&csi("fake.csi.cloud", "vol-7", None))
        .await
        .unwrap()
        .unwrap();
    let l2 = c
        .get_labels_for_volume(&csi("fake.csi.cloud", "vol-7", None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l1, l2);
    assert_eq!(
        c.get_labels_for_volume(&csi("other.csi", "vol-1", None))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        c.get_labels_for_volume(&PersistentVolume::default())
            .await
            .unwrap(),
        None
    );
    c.handle()
        .set_fault(
            "get_labels_for_volume",
            FaultSpec::errors(1.0, FaultKind::NotFound),
        )
        .unwrap();
    assert!(matches!(
        c.get_labels_for_volume(&pv).await,
        Err(CloudError::DiskNotFound)
    ));
}

#[tokio::test]
async fn fault_rates_are_deterministic_per_seed() {
    async fn failures(seed: u64, rate: f64) -> Vec<bool> {
        let c = cloud(&format!("seed: {seed}\n"));
        c.handle()
            .set_fault("master", FaultSpec::errors(rate, FaultKind::Provider))
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..2000 {
            out.push(c.master("kubernetes").await.is_err());
        }
        out
    }
    let a = failures(7, 0.3).await;
    let b = failures(7, 0.3).await;
    assert_eq!(a, b, "same seed, same failures");
    let n = a.iter().filter(|f| **f).count();
    assert!((520..680).contains(&n), "{n} failures of 2000 at rate 0.3");
    assert_ne!(a, failures(8, 0.3).await, "another seed, other failures");
    assert!(failures(7, 0.0).await.iter().all(|f| !f));
    assert!(failures(7, 1.0).await.iter().all(|f| *f));
}

#[tokio::test]
async fn fault_streams_do_not_depend_on_other_operations() {
    let a = cloud("");
    let b = cloud("");
    for c in [&a, &b] {
        c.handle()
            .set_fault("*", FaultSpec::errors(0.5, FaultKind::Provider))
            .unwrap();
    }
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for i in 0..200 {
        xs.push(a.list_clusters().await.is_err());
        // b interleaves calls of another operation.
        if i % 3 == 0 {
            let _ = b.master("kubernetes").await;
        }
        ys.push(b.list_clusters().await.is_err());
    }
    assert_eq!(xs, ys);
}

#[tokio::test]
async fn fault_kinds() {
    let c = cloud("");
    let h = c.handle();
    let n = node("n");
    let svc = service("s", "11111111-0000-0000-0000-000000000000", &[(80, 30080)]);

    h.set_fault(
        "*",
        FaultSpec::errors(1.0, FaultKind::Retry).with_retry_after(Duration::from_millis(1500)),
    )
    .unwrap();
    let err = c.ensure_load_balancer("k", &svc, &[]).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));
    assert!(
        c.instance_metadata(&n)
            .await
            .unwrap_err()
            .retry_after()
            .is_some()
    );

    h.set_fault("*", FaultSpec::errors(1.0, FaultKind::NotFound))
        .unwrap();
    assert!(!c.instance_exists(&n).await.unwrap());
    assert!(!c.instance_exists_by_provider_id("fake://n").await.unwrap());
    assert!(
        c.instance_metadata(&n)
            .await
            .unwrap_err()
            .is_instance_not_found()
    );
    assert_eq!(c.get_load_balancer("k", &svc).await.unwrap(), None);
    // notFound has no meaning for ensure: a provider error under "*".
    let err = c.ensure_load_balancer("k", &svc, &[]).await.unwrap_err();
    assert!(matches!(err, CloudError::Provider { .. }), "{err:?}");
    assert!(
        h.set_fault("create_route", FaultSpec::errors(1.0, FaultKind::NotFound))
            .is_err()
    );

    // A specific fault overrides "*"; clearing it brings "*" back.
    h.set_fault("*", FaultSpec::errors(1.0, FaultKind::Provider))
        .unwrap();
    h.set_fault("list_clusters", FaultSpec::default()).unwrap();
    assert!(c.list_clusters().await.is_ok());
    let err = c.master("kubernetes").await.unwrap_err();
    assert_eq!(err.to_string(), "injected fault in master");
    assert!(h.clear_fault("list_clusters"));
    assert!(!h.clear_fault("list_clusters"));
    assert!(c.list_clusters().await.is_err());
    h.clear_faults();
    assert!(c.list_clusters().await.is_ok());
    assert!(h.faults().is_empty());
}

#[tokio::test]
async fn latency_and_call_counters() {
    let c = cloud("faults: {instance_exists: {latencyMs: 60}}\n");
    let h = c.handle();
    let n = node("n");
    let start = Instant::now();
    assert!(c.instance_exists(&n).await.unwrap());
    assert!(start.elapsed() >= Duration::from_millis(60));
    h.set_fault("*", FaultSpec::latency(Duration::from_millis(40)))
        .unwrap();
    let start = Instant::now();
    c.list_clusters().await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(40));
    h.clear_faults();
    let start = Instant::now();
    for _ in 0..3 {
        c.instance_exists(&n).await.unwrap();
    }
    // With the 60 ms latency still in place, three calls would take 180 ms at least.
    assert!(start.elapsed() < Duration::from_millis(180));
    assert_eq!(h.call_count("instance_exists"), 4);
    assert_eq!(h.call_count("list_clusters"), 1);
    assert_eq!(h.call_count("master"), 0);
    h.reset_calls();
    assert!(h.calls().is_empty());
}

#[tokio::test]
async fn latency_does_not_block_other_calls() {
    let c = cloud("");
    c.handle()
        .set_fault("master", FaultSpec::latency(Duration::from_millis(300)))
        .unwrap();
    let slow = {
        let c = c.clone();
        tokio::spawn(async move { c.master("kubernetes").await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let start = Instant::now();
    c.list_clusters().await.unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(200),
        "the state lock is not held while sleeping"
    );
    slow.await.unwrap().unwrap();
}

#[tokio::test]
async fn registry_integration() {
    let mut r = Registry::new();
    crate::register(&mut r);
    assert!(matches!(
        crate::try_register(&mut r),
        Err(RegistryError::Duplicate { .. })
    ));
    let cloud = r.init("fake", None).unwrap();
    assert_eq!(cloud.provider_name(), "fake");
    assert!(
        cloud.load_balancer().is_some()
            && cloud.instances().is_some()
            && cloud.instances_v2().is_some()
    );
    assert!(cloud.zones().is_some() && cloud.clusters().is_some() && cloud.pv_labeler().is_some());
    let err = r
        .init(
            "fake",
            Some(b"zones: [a]\ninstances: [{name: n, zone: b}]\n"),
        )
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "could not init cloud provider \"fake\": invalid fake cloud config: instances[0].zone: \"b\" is not a configured zone (a)"
    );
}

#[tokio::test]
#[should_panic(expected = "registering the fake cloud provider")]
async fn register_twice_panics() {
    let mut r = Registry::new();
    crate::register(&mut r);
    crate::register(&mut r);
}

#[tokio::test]
async fn snapshot_is_sorted_and_complete() {
    let c = cloud("clusterID: c1\n");
    for name in ["zeta", "alpha", "mid"] {
        c.instance_exists(&node(name)).await.unwrap();
    }
    c.handle().terminate_instance("mid").unwrap();
    let s = c.handle().state();
    assert_eq!(
        s.instances
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>(),
        vec!["alpha", "zeta"]
    );
    assert_eq!(s.terminated, vec!["mid"]);
    assert_eq!(s.cluster_id.as_deref(), Some("c1"));
    assert_eq!(s.load_balancer_cidr, "198.51.100.0/24");
    assert_eq!(s.calls.get("instance_exists"), Some(&3));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["instances"][0]["providerID"], "fake://alpha");
    assert_eq!(json["instances"][0]["state"], "running");
}

#[tokio::test]
async fn load_balancers_with_the_same_backends_share_one_list() {
    let c = cloud("loadBalancerCIDR: 192.0.2.0/29\n");
    let web = service(
        "web",
        "11111111-2222-3333-4444-555555555555",
        &[(80, 30080)],
    );
    let api = service(
        "api",
        "aaaaaaaa-2222-3333-4444-555555555555",
        &[(443, 30443)],
    );
    let nodes = [node("b"), node("a")];
    c.ensure_load_balancer("k", &web, &nodes).await.unwrap();
    c.ensure_load_balancer("k", &api, &nodes).await.unwrap();
    let lbs = c.handle().load_balancers();
    assert_eq!(*lbs[0].nodes, ["a".to_string(), "b".to_string()]);
    assert!(std::sync::Arc::ptr_eq(&lbs[0].nodes, &lbs[1].nodes));
    c.update_load_balancer("k", &api, &nodes[..1])
        .await
        .unwrap();
    let lbs = c.handle().load_balancers();
    let by_service = |key: &str| lbs.iter().find(|lb| lb.service == key).unwrap();
    assert_eq!(*by_service("default/api").nodes, ["b".to_string()]);
    assert_eq!(
        *by_service("default/web").nodes,
        ["a".to_string(), "b".to_string()]
    );
}
