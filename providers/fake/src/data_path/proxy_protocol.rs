//! The PROXY protocol header a load balancer writes to a backend before the client's bytes, so the backend
//! learns the client's address and the address the client connected to (version 1: one text line; version
//! 2: a binary block). Both describe a TCP connection over IPv4 or IPv6.

use std::net::{IpAddr, SocketAddr};

use crate::config::ProxyProtocol;

/// The 12 bytes every version 2 header starts with.
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Version 2, command PROXY.
const V2_PROXY: u8 = 0x21;
/// TCP over IPv4, and over IPv6.
const V2_TCP4: u8 = 0x11;
const V2_TCP6: u8 = 0x21;

/// The header of a connection from `client` to `destination` (the load balancer's address and port).
pub(crate) fn header(
    version: ProxyProtocol,
    client: SocketAddr,
    destination: SocketAddr,
) -> Vec<u8> {
    // A client of one family reaching an address of the other (IPv4-mapped) is described in IPv6.
    let (client, destination) = same_family(client, destination);
    match version {
        ProxyProtocol::V1 => v1(client, destination),
        ProxyProtocol::V2 => v2(client, destination),
    }
}

fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    let v6 = |s: SocketAddr| match s.ip() {
        IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), s.port()),
        IpAddr::V6(_) => s,
    };
    if a.is_ipv4() == b.is_ipv4() {
        (a, b)
    } else {
        (v6(a), v6(b))
    }
}

fn v1(client: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let family = if client.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        client.ip(),
        destination.ip(),
        client.port(),
        destination.port()
    )
    .into_bytes()
}

fn v2(client: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 36);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(V2_PROXY);
    let addresses: Vec<u8> = match (client.ip(), destination.ip()) {
        (IpAddr::V4(c), IpAddr::V4(d)) => {
            out.push(V2_TCP4);
            [c.octets().as_slice(), d.octets().as_slice()].concat()
        }
        (c, d) => {
            out.push(V2_TCP6);
            [octets16(c).as_slice(), octets16(d).as_slice()].concat()
        }
    };
    let length = u16::try_from(addresses.len() + 4).unwrap_or(u16::MAX);
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&addresses);
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
    out
}

fn octets16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn version_1_is_one_line() {
        let h = header(
            ProxyProtocol::V1,
            addr("127.0.0.5:51000"),
            addr("127.240.0.1:80"),
        );
        assert_eq!(h, b"PROXY TCP4 127.0.0.5 127.240.0.1 51000 80\r\n");
        let h = header(
            ProxyProtocol::V1,
            addr("[2001:db8::1]:4000"),
            addr("[2001:db8::2]:443"),
        );
        assert_eq!(h, b"PROXY TCP6 2001:db8::1 2001:db8::2 4000 443\r\n");
    }

    #[test]
    fn version_2_is_the_binary_block() {
        let h = header(
            ProxyProtocol::V2,
            addr("10.1.2.3:258"),
            addr("127.240.0.1:80"),
        );
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0, 12, 10, 1, 2, 3, 127, 240, 0, 1, 1, 2, 0, 80]);
        assert_eq!(h, want);
        let h = header(ProxyProtocol::V2, addr("[::1]:1"), addr("[::2]:2"));
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(&h[h.len() - 4..], &[0, 1, 0, 2]);
    }

    #[test]
    fn mixed_families_are_described_in_ipv6() {
        let h = header(
            ProxyProtocol::V1,
            addr("10.0.0.1:5"),
            addr("[2001:db8::2]:80"),
        );
        assert_eq!(h, b"PROXY TCP6 ::ffff:10.0.0.1 2001:db8::2 5 80\r\n");
    }
}
