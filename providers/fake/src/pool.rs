//! The load-balancer IP pool: a CIDR whose host addresses are handed out lowest first and returned on release.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4 or IPv6 network in CIDR notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: u128,
    prefix: u8,
    v6: bool,
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `x::y/n`; host bits must be zero.
    pub fn parse(s: &str) -> Result<Self, String> {
        let cidr = Self::parse_unmasked(s)?;
        if cidr.base & cidr.host_mask() != 0 {
            return Err(format!("{s:?} has host bits set"));
        }
        Ok(cidr)
    }

    /// Parses like [`Cidr::parse`] (surrounding spaces allowed) but clears host bits instead of refusing
    /// them, as Kubernetes reads `loadBalancerSourceRanges` (`10.0.0.5/8` is `10.0.0.0/8`).
    pub fn parse_masked(s: &str) -> Result<Self, String> {
        let mut cidr = Self::parse_unmasked(s.trim())?;
        cidr.base &= !cidr.host_mask();
        Ok(cidr)
    }

    /// The address and prefix length of `s`, host bits as written.
    fn parse_unmasked(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (address/prefix)"))?;
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not a CIDR: bad address {addr:?}"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{s:?} is not a CIDR: bad prefix length {prefix:?}"))?;
        let cidr = Cidr {
            base: Self::to_num(ip),
            prefix,
            v6: ip.is_ipv6(),
        };
        if prefix > cidr.bits() {
            return Err(format!(
                "{s:?} is not a CIDR: prefix length above {}",
                cidr.bits()
            ));
        }
        Ok(cidr)
    }

    fn bits(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    fn host_mask(&self) -> u128 {
        let host_bits = u32::from(self.bits() - self.prefix);
        if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        }
    }

    /// The first and last addresses usable by hosts. For IPv4 networks larger than /31 the network and
    /// broadcast addresses are excluded; for IPv6 the subnet-router anycast address (the first) is.
    fn host_range(&self) -> (u128, u128) {
        let last = self.base | self.host_mask();
        let host_bits = self.bits() - self.prefix;
        match (self.v6, host_bits) {
            (false, 0 | 1) => (self.base, last),
            (false, _) => (self.base + 1, last - 1),
            (true, 0) => (self.base, last),
            (true, _) => (self.base + 1, last),
        }
    }

    /// Whether `ip` lies inside the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (ip, self.v6) {
            (IpAddr::V4(a), false) => u128::from(u32::from(a)) & !self.host_mask() == self.base,
            (IpAddr::V6(a), true) => u128::from(a) & !self.host_mask() == self.base,
            _ => false,
        }
    }

    fn ip_at(self, n: u128) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(n))
        } else {
            // The value always fits: it lies inside a 32-bit network.
            IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX)))
        }
    }

    fn to_num(ip: IpAddr) -> u128 {
        match ip {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip_at(self.base), self.prefix)
    }
}

/// Why an address could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Every host address is in use.
    #[error("load balancer IP pool {cidr} is exhausted ({in_use} addresses in use)")]
    Exhausted {
        /// The pool.
        cidr: String,
        /// How many addresses are allocated.
        in_use: usize,
    },
    /// A specific address was requested that is outside the pool or not a host address.
    #[error("requested load balancer IP {ip} is not a host address of the pool {cidr}")]
    OutOfPool {
        /// The requested address.
        ip: IpAddr,
        /// The pool.
        cidr: String,
    },
    /// A specific address was requested that is already in use.
    #[error("requested load balancer IP {ip} is already in use")]
    InUse {
        /// The requested address.
        ip: IpAddr,
    },
}

/// Allocates host addresses of a CIDR, lowest free first.
#[derive(Debug, Clone)]
pub struct IpPool {
    cidr: Cidr,
    allocated: BTreeSet<u128>,
}

impl IpPool {
    /// A pool over `cidr` with nothing allocated.
    pub fn new(cidr: Cidr) -> Self {
        IpPool {
            cidr,
            allocated: BTreeSet::new(),
        }
    }

    /// The lowest free host address.
    pub fn allocate(&mut self) -> Result<IpAddr, PoolError> {
        let (first, last) = self.cidr.host_range();
        let mut candidate = first;
        // `allocated` is sorted: walk it until a gap appears.
        for &used in self.allocated.range(first..=last) {
            if used != candidate {
                break;
            }
            if candidate == last {
                return Err(self.exhausted());
            }
            candidate += 1;
        }
        if candidate > last {
            return Err(self.exhausted());
        }
        self.allocated.insert(candidate);
        Ok(self.cidr.ip_at(candidate))
    }

    /// Whether exactly `ip` could be allocated, without allocating it.
    pub fn check_specific(&self, ip: IpAddr) -> Result<(), PoolError> {
        let (first, last) = self.cidr.host_range();
        let n = Cidr::to_num(ip);
        if !self.cidr.contains(ip) || n < first || n > last {
            return Err(PoolError::OutOfPool {
                ip,
                cidr: self.cidr.to_string(),
            });
        }
        if self.allocated.contains(&n) {
            return Err(PoolError::InUse { ip });
        }
        Ok(())
    }

    /// Allocates exactly `ip`.
    pub fn allocate_specific(&mut self, ip: IpAddr) -> Result<IpAddr, PoolError> {
        self.check_specific(ip)?;
        self.allocated.insert(Cidr::to_num(ip));
        Ok(ip)
    }

    /// Returns `ip` to the pool; returns whether it was allocated.
    pub fn release(&mut self, ip: IpAddr) -> bool {
        self.cidr.contains(ip) && self.allocated.remove(&Cidr::to_num(ip))
    }

    /// How many addresses are allocated.
    pub fn in_use(&self) -> usize {
        self.allocated.len()
    }

    /// The pool's network.
    pub fn cidr(&self) -> Cidr {
        self.cidr
    }

    fn exhausted(&self) -> PoolError {
        PoolError::Exhausted {
            cidr: self.cidr.to_string(),
            in_use: self.allocated.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parsing() {
        assert_eq!(
            Cidr::parse("198.51.100.0/24").unwrap().to_string(),
            "198.51.100.0/24"
        );
        assert_eq!(Cidr::parse("fd00::/120").unwrap().to_string(), "fd00::/120");
        assert!(
            Cidr::parse("198.51.100.1/24")
                .unwrap_err()
                .contains("host bits")
        );
        assert!(Cidr::parse("198.51.100.0").is_err());
        assert!(Cidr::parse("198.51.100.0/40").is_err());
        assert!(Cidr::parse("x/24").is_err());
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(ip("10.255.0.1")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(!c.contains(ip("::1")));
    }

    #[test]
    fn allocates_lowest_free_and_reuses_released() {
        let mut p = IpPool::new(Cidr::parse("198.51.100.0/24").unwrap());
        assert_eq!(p.allocate().unwrap(), ip("198.51.100.1"));
        assert_eq!(p.allocate().unwrap(), ip("198.51.100.2"));
        assert_eq!(p.allocate().unwrap(), ip("198.51.100.3"));
        assert!(p.release(ip("198.51.100.2")));
        assert!(!p.release(ip("198.51.100.2")));
        assert!(!p.release(ip("203.0.113.1")));
        assert_eq!(p.allocate().unwrap(), ip("198.51.100.2"));
        assert_eq!(p.allocate().unwrap(), ip("198.51.100.4"));
        assert_eq!(p.in_use(), 4);
    }

    #[test]
    fn exhaustion_is_an_error_until_release() {
        // /30 has two host addresses.
        let mut p = IpPool::new(Cidr::parse("192.0.2.0/30").unwrap());
        assert_eq!(p.allocate().unwrap(), ip("192.0.2.1"));
        assert_eq!(p.allocate().unwrap(), ip("192.0.2.2"));
        let err = p.allocate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "load balancer IP pool 192.0.2.0/30 is exhausted (2 addresses in use)"
        );
        assert!(p.release(ip("192.0.2.1")));
        assert_eq!(p.allocate().unwrap(), ip("192.0.2.1"));
        // A /32 pool holds exactly one address.
        let mut one = IpPool::new(Cidr::parse("192.0.2.7/32").unwrap());
        assert_eq!(one.allocate().unwrap(), ip("192.0.2.7"));
        assert!(one.allocate().is_err());
    }

    #[test]
    fn specific_addresses() {
        let mut p = IpPool::new(Cidr::parse("192.0.2.0/29").unwrap());
        assert_eq!(
            p.allocate_specific(ip("192.0.2.1")).unwrap(),
            ip("192.0.2.1")
        );
        assert_eq!(
            p.allocate_specific(ip("192.0.2.1")),
            Err(PoolError::InUse {
                ip: ip("192.0.2.1")
            })
        );
        assert!(matches!(
            p.allocate_specific(ip("192.0.2.7")),
            Err(PoolError::OutOfPool { .. })
        ));
        assert!(matches!(
            p.allocate_specific(ip("192.0.2.0")),
            Err(PoolError::OutOfPool { .. })
        ));
        assert!(matches!(
            p.allocate_specific(ip("10.0.0.1")),
            Err(PoolError::OutOfPool { .. })
        ));
        assert_eq!(p.allocate().unwrap(), ip("192.0.2.2"));
    }

    #[test]
    fn ipv6_pool() {
        let mut p = IpPool::new(Cidr::parse("fd00::/126").unwrap());
        assert_eq!(p.allocate().unwrap(), ip("fd00::1"));
        assert_eq!(p.allocate().unwrap(), ip("fd00::2"));
        assert_eq!(p.allocate().unwrap(), ip("fd00::3"));
        assert!(p.allocate().is_err());
    }
}
