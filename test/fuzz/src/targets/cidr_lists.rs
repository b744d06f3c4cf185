//! `cidr_lists`: CIDR and IP lists from outside: `--cluster-cidr`, the fake cloud's pool CIDRs, and the
//! `alpha.kubernetes.io/provided-node-ip` annotation (one IP or a dual-stack pair).
//!
//! Input: byte 0 picks the parser (modulo 3), the rest is the text.
//!
//! Contract: no panic; accepted values print back to themselves (`--cluster-cidr` as a comma-separated
//! list, a pool CIDR, an IP list); `--cluster-cidr` holds at most two CIDRs; a pool hands out addresses
//! inside its CIDR and refuses one outside.

use std::net::IpAddr;

use ccm_app::validation::parse_cluster_cidrs;
use cloud_controllers::node::addresses::parse_provided_node_ips;
use provider_fake::{Cidr, IpPool};

use crate::input;

/// Runs one CIDR or IP list parser over one input.
pub fn check(data: &[u8]) {
    let (selector, rest) = data.split_first().unwrap_or((&0, &[]));
    let text = input::text(rest);
    match selector % 3 {
        0 => cluster_cidrs(&text),
        1 => pool_cidr(&text),
        _ => provided_node_ips(&text),
    }
}

fn cluster_cidrs(text: &str) {
    let Ok(cidrs) = parse_cluster_cidrs(text) else {
        return;
    };
    assert!(cidrs.len() <= 2, "{} cluster CIDRs accepted", cidrs.len());
    let written = cidrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        parse_cluster_cidrs(&written).as_ref(),
        Ok(&cidrs),
        "{written:?} does not round-trip"
    );
}

fn pool_cidr(text: &str) {
    let Ok(cidr) = Cidr::parse(text) else { return };
    let written = cidr.to_string();
    assert_eq!(
        Cidr::parse(&written),
        Ok(cidr),
        "{written:?} does not round-trip"
    );
    let net: ipnet::IpNet = written.parse().expect("a pool CIDR is a CIDR");
    assert_eq!(net, net.trunc(), "pool CIDR {written} has host bits set");
    let mut pool = IpPool::new(cidr);
    for _ in 0..3 {
        match pool.allocate() {
            Ok(ip) => assert!(net.contains(&ip), "{ip} allocated outside {net}"),
            Err(_) => break,
        }
    }
    let outside: IpAddr = match net {
        ipnet::IpNet::V4(_) => "::1".parse().expect("an IPv6 address"),
        ipnet::IpNet::V6(_) => "10.0.0.1".parse().expect("an IPv4 address"),
    };
    assert!(
        pool.allocate_specific(outside).is_err(),
        "{outside} allocated from {net}"
    );
}

fn provided_node_ips(text: &str) {
    let Ok(ips) = parse_provided_node_ips(text) else {
        return;
    };
    assert!(ips.len() <= 2, "{} provided node IPs accepted", ips.len());
    if let [a, b] = ips[..] {
        assert_ne!(a.is_ipv4(), b.is_ipv4(), "a same-family pair accepted");
    }
    let written = ips
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        parse_provided_node_ips(&written).ok(),
        Some(ips),
        "{written:?} does not round-trip"
    );
}
