//! An EC2 instance as the provider reads it (ID, state, type, zone, DNS names, addresses, interfaces,
//! security groups, tags) with its provider ID, coarse state and node addresses, and the cache of instances
//! by ID with bounded staleness (`InstanceCacheTTL`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Instance;
use cloud_provider::{
    ADDRESS_EXTERNAL_DNS, ADDRESS_EXTERNAL_IP, ADDRESS_HOSTNAME, ADDRESS_INTERNAL_DNS,
    ADDRESS_INTERNAL_IP, InstanceState, node_address,
};
use k8s_openapi::api::core::v1::NodeAddress;
use parking_lot::Mutex;

use crate::config::IpFamily;
use crate::provider_id::PROVIDER_NAME;
use crate::tagging::ec2_tag_pairs;

/// An EC2 network interface as the provider uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interface {
    pub(crate) device_index: i32,
    pub(crate) in_use: bool,
    pub(crate) private_ips: Vec<String>,
    pub(crate) ipv6_addresses: Vec<String>,
}

/// An EC2 instance as the provider uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Ec2Instance {
    pub(crate) id: String,
    pub(crate) state: String,
    pub(crate) instance_type: String,
    pub(crate) zone: String,
    pub(crate) private_dns_name: String,
    pub(crate) public_dns_name: String,
    pub(crate) private_ip: String,
    pub(crate) public_ip: String,
    pub(crate) vpc_id: String,
    pub(crate) subnet_id: String,
    pub(crate) interfaces: Vec<Interface>,
    pub(crate) security_groups: Vec<String>,
    pub(crate) tags: Vec<(String, String)>,
    pub(crate) source_dest_check: Option<bool>,
}

fn s(v: Option<&str>) -> String {
    v.unwrap_or_default().to_string()
}

impl From<&Instance> for Ec2Instance {
    fn from(i: &Instance) -> Self {
        Ec2Instance {
            id: s(i.instance_id()),
            state: s(i.state().and_then(|st| st.name()).map(|n| n.as_str())),
            instance_type: s(i.instance_type().map(|t| t.as_str())),
            zone: s(i.placement().and_then(|p| p.availability_zone())),
            private_dns_name: s(i.private_dns_name()),
            public_dns_name: s(i.public_dns_name()),
            private_ip: s(i.private_ip_address()),
            public_ip: s(i.public_ip_address()),
            vpc_id: s(i.vpc_id()),
            subnet_id: s(i.subnet_id()),
            interfaces: i
                .network_interfaces()
                .iter()
                .map(|ni| Interface {
                    device_index: ni
                        .attachment()
                        .and_then(|a| a.device_index())
                        .unwrap_or(i32::MAX),
                    in_use: ni.status().map(|st| st.as_str()) == Some("in-use"),
                    private_ips: ni
                        .private_ip_addresses()
                        .iter()
                        .filter_map(|p| p.private_ip_address())
                        .map(str::to_string)
                        .collect(),
                    ipv6_addresses: ni
                        .ipv6_addresses()
                        .iter()
                        .filter_map(|a| a.ipv6_address())
                        .map(str::to_string)
                        .collect(),
                })
                .collect(),
            security_groups: i
                .security_groups()
                .iter()
                .filter_map(|g| g.group_id())
                .map(str::to_string)
                .collect(),
            tags: ec2_tag_pairs(i.tags()),
            source_dest_check: i.source_dest_check(),
        }
    }
}

impl Ec2Instance {
    /// The instance's provider ID, `aws:///<zone>/<id>`.
    pub(crate) fn provider_id(&self) -> String {
        format!("{PROVIDER_NAME}:///{}/{}", self.zone, self.id)
    }

    /// The tags as string pairs.
    pub(crate) fn tag_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The coarse state: terminated instances are gone, stopped ones shut down.
    pub(crate) fn coarse_state(&self) -> InstanceState {
        match self.state.as_str() {
            "terminated" => InstanceState::NotFound,
            "stopped" => InstanceState::Shutdown,
            _ => InstanceState::Running,
        }
    }

    /// The node addresses in the upstream order for each family in `families`.
    ///
    /// IPv4: every private IP of each in-use interface (by device index) as InternalIP, the public IP as
    /// ExternalIP, the private DNS name as InternalDNS and Hostname, the public DNS name as ExternalDNS.
    /// IPv6: the first IPv6 address of each in-use interface as InternalIP.
    pub(crate) fn node_addresses(&self, families: &[IpFamily]) -> Vec<NodeAddress> {
        let mut interfaces: Vec<&Interface> = self.interfaces.iter().filter(|i| i.in_use).collect();
        interfaces.sort_by_key(|i| i.device_index);
        let mut out = Vec::new();
        for family in families {
            match family {
                IpFamily::Ipv4 => {
                    if self.interfaces.is_empty() {
                        if !self.private_ip.is_empty() {
                            out.push(node_address(ADDRESS_INTERNAL_IP, &self.private_ip));
                        }
                    } else {
                        for ip in interfaces.iter().flat_map(|i| &i.private_ips) {
                            out.push(node_address(ADDRESS_INTERNAL_IP, ip));
                        }
                    }
                    if !self.public_ip.is_empty() {
                        out.push(node_address(ADDRESS_EXTERNAL_IP, &self.public_ip));
                    }
                    if !self.private_dns_name.is_empty() {
                        out.push(node_address(ADDRESS_INTERNAL_DNS, &self.private_dns_name));
                        out.push(node_address(ADDRESS_HOSTNAME, &self.private_dns_name));
                    }
                    if !self.public_dns_name.is_empty() {
                        out.push(node_address(ADDRESS_EXTERNAL_DNS, &self.public_dns_name));
                    }
                }
                IpFamily::Ipv6 => {
                    for ip in interfaces.iter().filter_map(|i| i.ipv6_addresses.first()) {
                        out.push(node_address(ADDRESS_INTERNAL_IP, ip));
                    }
                }
            }
        }
        out
    }
}

type CacheEntry = (Instant, Option<Arc<Ec2Instance>>);

/// Instances by ID, with the time they were read; entries older than the TTL are not served.
#[derive(Debug)]
pub(crate) struct InstanceCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, CacheEntry>>,
}

impl InstanceCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        InstanceCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The fresh entry for `id`: `Some(None)` caches "no such instance".
    pub(crate) fn get(&self, id: &str) -> Option<Option<Arc<Ec2Instance>>> {
        if self.ttl.is_zero() {
            return None;
        }
        let entries = self.entries.lock();
        entries
            .get(id)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, inst)| inst.clone())
    }

    pub(crate) fn put(&self, id: String, instance: Option<Arc<Ec2Instance>>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= 4096 {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        entries.insert(id, (Instant::now(), instance));
    }

    /// Forgets `id`, so the next lookup reads it from EC2.
    pub(crate) fn invalidate(&self, id: &str) {
        self.entries.lock().remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ec2Instance {
        Ec2Instance {
            id: "i-1".into(),
            state: "running".into(),
            zone: "us-east-1a".into(),
            private_dns_name: "ip-10-0-0-5.ec2.internal".into(),
            public_dns_name: "ec2-3-3-3-3.compute-1.amazonaws.com".into(),
            private_ip: "10.0.0.5".into(),
            public_ip: "3.3.3.3".into(),
            interfaces: vec![
                Interface {
                    device_index: 1,
                    in_use: true,
                    private_ips: vec!["10.0.1.7".into()],
                    ipv6_addresses: vec!["2600::7".into(), "2600::8".into()],
                },
                Interface {
                    device_index: 0,
                    in_use: true,
                    private_ips: vec!["10.0.0.5".into(), "10.0.0.6".into()],
                    ipv6_addresses: vec!["2600::5".into()],
                },
                Interface {
                    device_index: 2,
                    in_use: false,
                    private_ips: vec!["10.0.2.9".into()],
                    ipv6_addresses: vec!["2600::9".into()],
                },
            ],
            ..Default::default()
        }
    }

    fn pairs(list: &[NodeAddress]) -> Vec<(String, String)> {
        list.iter()
            .map(|a| (a.type_.clone(), a.address.clone()))
            .collect()
    }

    #[test]
    fn addresses_in_upstream_order() {
        let inst = sample();
        let v4 = pairs(&inst.node_addresses(&[IpFamily::Ipv4]));
        let expect = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(t, a)| (t.to_string(), a.to_string()))
                .collect()
        };
        assert_eq!(
            v4,
            expect(&[
                ("InternalIP", "10.0.0.5"),
                ("InternalIP", "10.0.0.6"),
                ("InternalIP", "10.0.1.7"),
                ("ExternalIP", "3.3.3.3"),
                ("InternalDNS", "ip-10-0-0-5.ec2.internal"),
                ("Hostname", "ip-10-0-0-5.ec2.internal"),
                ("ExternalDNS", "ec2-3-3-3-3.compute-1.amazonaws.com"),
            ])
        );
        let v6 = pairs(&inst.node_addresses(&[IpFamily::Ipv6]));
        assert_eq!(
            v6,
            expect(&[("InternalIP", "2600::5"), ("InternalIP", "2600::7")])
        );
        let dual = inst.node_addresses(&[IpFamily::Ipv6, IpFamily::Ipv4]);
        assert_eq!(dual.len(), 9);
        assert_eq!(dual[0].address, "2600::5");
        assert_eq!(dual[2].address, "10.0.0.5");

        // Without interface data the primary private IP is used.
        let bare = Ec2Instance {
            interfaces: vec![],
            public_dns_name: String::new(),
            ..sample()
        };
        assert_eq!(
            pairs(&bare.node_addresses(&[IpFamily::Ipv4])),
            expect(&[
                ("InternalIP", "10.0.0.5"),
                ("ExternalIP", "3.3.3.3"),
                ("InternalDNS", "ip-10-0-0-5.ec2.internal"),
                ("Hostname", "ip-10-0-0-5.ec2.internal"),
            ])
        );
    }

    #[test]
    fn states_and_provider_ids() {
        let mut inst = sample();
        assert_eq!(inst.provider_id(), "aws:///us-east-1a/i-1");
        for (state, coarse) in [
            ("pending", InstanceState::Running),
            ("running", InstanceState::Running),
            ("stopping", InstanceState::Running),
            ("shutting-down", InstanceState::Running),
            ("stopped", InstanceState::Shutdown),
            ("terminated", InstanceState::NotFound),
        ] {
            inst.state = state.into();
            assert_eq!(inst.coarse_state(), coarse, "{state}");
        }
    }

    #[test]
    fn cache_serves_fresh_entries_only() {
        let cache = InstanceCache::new(Duration::from_millis(50));
        cache.put("i-1".into(), Some(Arc::new(sample())));
        cache.put("i-2".into(), None);
        assert_eq!(cache.get("i-1").unwrap().unwrap().id, "i-1");
        assert_eq!(cache.get("i-2"), Some(None));
        assert_eq!(cache.get("i-3"), None);
        cache.invalidate("i-1");
        assert_eq!(cache.get("i-1"), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get("i-2"), None);

        let off = InstanceCache::new(Duration::ZERO);
        off.put("i-1".into(), Some(Arc::new(sample())));
        assert_eq!(off.get("i-1"), None);
    }
}
