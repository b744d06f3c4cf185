//! The values of the controller configuration as types that cannot hold what the controllers could not
//! honour, and the defaults of the flags that set them.
//!
//! Each type is made by a constructor that refuses an invalid value. The daemon validates its flags into
//! these types once, at start-up, and turns a refusal into an error naming the flag; a controller takes
//! the value as it is and never adjusts it.
//!
//! [`defaults`] is the one place a default of these flags is written: the flag definitions of the daemon
//! and [`ControllerConfig::default`](crate::ControllerConfig) both read it.

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use ipnet::IpNet;

/// The defaults of the controller flags (see the module documentation).
pub mod defaults {
    use std::num::NonZeroUsize;
    use std::time::Duration;

    use super::{CloudCallTimeout, NonZeroDuration, Percent, Period};

    /// `--cluster-name`.
    pub const CLUSTER_NAME: &str = "kubernetes";
    /// `--allocate-node-cidrs`.
    pub const ALLOCATE_NODE_CIDRS: bool = false;
    /// `--configure-cloud-routes`.
    pub const CONFIGURE_CLOUD_ROUTES: bool = true;
    /// `--node-monitor-period`.
    pub const NODE_MONITOR_PERIOD: Period = Period::expect(Duration::from_secs(5));
    /// `--instance-exists-grace-period`: no grace, as upstream.
    pub const INSTANCE_EXISTS_GRACE_PERIOD: Duration = Duration::ZERO;
    /// `--node-status-update-frequency`.
    pub const NODE_STATUS_UPDATE_FREQUENCY: NonZeroDuration =
        NonZeroDuration::expect(Duration::from_secs(5 * 60));
    /// `--route-reconciliation-period`.
    pub const ROUTE_RECONCILIATION_PERIOD: Period = Period::expect(Duration::from_secs(10));
    /// `--concurrent-node-syncs`.
    pub const CONCURRENT_NODE_SYNCS: NonZeroUsize = NonZeroUsize::MIN;
    /// `--concurrent-service-syncs`.
    pub const CONCURRENT_SERVICE_SYNCS: NonZeroUsize = NonZeroUsize::MIN;
    /// `--node-deletion-max-percent`.
    pub const NODE_DELETION_MAX_PERCENT: Percent = Percent::expect(50);
    /// `--cloud-call-timeout`. Upstream waits for a cloud call forever; this only abandons calls that the
    /// providers' own limits would not end: an AWS SDK operation may take 120 s with its retries, and a
    /// bulk instance lookup (up to 250 nodes) makes two DescribeInstances calls; a DigitalOcean request
    /// may take 30 s per attempt over 6 attempts.
    pub const CLOUD_CALL_TIMEOUT: CloudCallTimeout =
        CloudCallTimeout::expect(Duration::from_secs(5 * 60));
}

/// The period of a controller's periodic pass (`--node-monitor-period`, `--route-reconciliation-period`):
/// at least [`Period::MIN`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period(Duration);

/// Why a duration is not a [`Period`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    /// The duration is zero.
    #[error("must be greater than 0")]
    Zero,
    /// The duration is shorter than [`Period::MIN`].
    #[error("must be at least {:?}, got {got:?}", Period::MIN)]
    TooShort {
        /// The duration given.
        got: Duration,
    },
}

impl Period {
    /// The shortest period the controllers honour: a pass that starts more often would keep the
    /// controller (and the cloud it asks) busy all the time.
    pub const MIN: Duration = Duration::from_millis(10);

    /// `period`, when it is at least [`Period::MIN`].
    pub const fn new(period: Duration) -> Result<Self, PeriodError> {
        if period.is_zero() {
            Err(PeriodError::Zero)
        } else if period.as_nanos() < Self::MIN.as_nanos() {
            Err(PeriodError::TooShort { got: period })
        } else {
            Ok(Period(period))
        }
    }

    /// The period as a duration.
    pub const fn get(self) -> Duration {
        self.0
    }

    /// `period`, for constants: a value below the minimum fails the build.
    const fn expect(period: Duration) -> Self {
        match Self::new(period) {
            Ok(period) => period,
            Err(_) => panic!("a period constant is below Period::MIN"),
        }
    }
}

impl TryFrom<Duration> for Period {
    type Error = PeriodError;

    fn try_from(period: Duration) -> Result<Self, Self::Error> {
        Self::new(period)
    }
}

impl From<Period> for Duration {
    fn from(period: Period) -> Self {
        period.0
    }
}

impl fmt::Debug for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A duration greater than zero (`--node-status-update-frequency`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NonZeroDuration(Duration);

impl NonZeroDuration {
    /// `duration`, unless it is zero.
    pub const fn new(duration: Duration) -> Option<Self> {
        if duration.is_zero() {
            None
        } else {
            Some(NonZeroDuration(duration))
        }
    }

    /// The duration.
    pub const fn get(self) -> Duration {
        self.0
    }

    /// `duration`, for constants: zero fails the build.
    const fn expect(duration: Duration) -> Self {
        match Self::new(duration) {
            Some(duration) => duration,
            None => panic!("a non-zero duration constant is zero"),
        }
    }
}

impl From<NonZeroDuration> for Duration {
    fn from(duration: NonZeroDuration) -> Self {
        duration.0
    }
}

impl fmt::Debug for NonZeroDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// How long one cloud provider call of a controller may take (`--cloud-call-timeout`): greater than zero
/// and at most [`CloudCallTimeout::MAX`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CloudCallTimeout(Duration);

/// Why a duration is not a [`CloudCallTimeout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CloudCallTimeoutError {
    /// The duration is zero.
    #[error("must be greater than 0")]
    Zero,
    /// The duration is longer than [`CloudCallTimeout::MAX`].
    #[error("must be at most {:?}, got {got:?}", CloudCallTimeout::MAX)]
    TooLong {
        /// The duration given.
        got: Duration,
    },
}

impl CloudCallTimeout {
    /// The largest timeout: beyond it a hung worker would stay lost for longer than any cloud call can
    /// take.
    pub const MAX: Duration = Duration::from_secs(60 * 60);

    /// `timeout`, when it is greater than zero and at most [`CloudCallTimeout::MAX`].
    pub const fn new(timeout: Duration) -> Result<Self, CloudCallTimeoutError> {
        if timeout.is_zero() {
            Err(CloudCallTimeoutError::Zero)
        } else if timeout.as_nanos() > Self::MAX.as_nanos() {
            Err(CloudCallTimeoutError::TooLong { got: timeout })
        } else {
            Ok(CloudCallTimeout(timeout))
        }
    }

    /// The timeout as a duration.
    pub const fn get(self) -> Duration {
        self.0
    }

    /// `timeout`, for constants: a value out of range fails the build.
    const fn expect(timeout: Duration) -> Self {
        match Self::new(timeout) {
            Ok(timeout) => timeout,
            Err(_) => panic!("a cloud-call timeout constant is out of range"),
        }
    }
}

impl TryFrom<Duration> for CloudCallTimeout {
    type Error = CloudCallTimeoutError;

    fn try_from(timeout: Duration) -> Result<Self, Self::Error> {
        Self::new(timeout)
    }
}

impl From<CloudCallTimeout> for Duration {
    fn from(timeout: CloudCallTimeout) -> Self {
        timeout.0
    }
}

impl fmt::Debug for CloudCallTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A share in percent, 0 to 100 (`--node-deletion-max-percent`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Percent(u8);

impl Percent {
    /// All of it.
    pub const ALL: Percent = Percent(100);

    /// `value` percent, when it is at most 100.
    pub const fn new(value: u32) -> Option<Self> {
        if value <= 100 {
            Some(Percent(value as u8))
        } else {
            None
        }
    }

    /// The share in percent (0 to 100).
    pub const fn get(self) -> u32 {
        self.0 as u32
    }

    /// `value` percent, for constants: more than 100 fails the build.
    const fn expect(value: u32) -> Self {
        match Self::new(value) {
            Some(percent) => percent,
            None => panic!("a percent constant is above 100"),
        }
    }
}

impl fmt::Debug for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The pod CIDRs of the cluster (`--cluster-cidr`): none, one CIDR, or an IPv4 and an IPv6 CIDR.
/// Dereferences to the CIDRs in the order given.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct ClusterCidrs(Vec<IpNet>);

/// Why a value is not a [`ClusterCidrs`]; the messages are the daemon's for `--cluster-cidr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterCidrsError {
    /// A part of the comma-separated list is not a CIDR.
    #[error("--cluster-cidr: {0:?} is not a valid CIDR (expected e.g. 10.244.0.0/16)")]
    NotACidr(String),
    /// More than two CIDRs.
    #[error("--cluster-cidr accepts at most two CIDRs (one IPv4 and one IPv6), got {0}")]
    TooMany(usize),
    /// Two CIDRs of the same IP family (the value as given).
    #[error(
        "--cluster-cidr {0:?}: a dual-stack value needs one IPv4 and one IPv6 CIDR, got two of the same \
         family"
    )]
    SameFamily(String),
}

impl ClusterCidrs {
    /// No cluster CIDR.
    pub const fn none() -> Self {
        ClusterCidrs(Vec::new())
    }

    /// `cidrs`, when they are none, one, or one of each IP family.
    pub fn new(cidrs: Vec<IpNet>) -> Result<Self, ClusterCidrsError> {
        let written = || {
            cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        Self::check(&cidrs, written)?;
        Ok(ClusterCidrs(cidrs))
    }

    /// Parses `--cluster-cidr`: empty, one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma
    /// (blanks around each are ignored).
    pub fn parse(value: &str) -> Result<Self, ClusterCidrsError> {
        let value = value.trim();
        if value.is_empty() {
            return Ok(Self::none());
        }
        let cidrs = value
            .split(',')
            .map(str::trim)
            .map(|part| {
                part.parse::<IpNet>()
                    .map_err(|_| ClusterCidrsError::NotACidr(part.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::check(&cidrs, || value.to_string())?;
        Ok(ClusterCidrs(cidrs))
    }

    /// The CIDRs, in the order given.
    pub fn as_slice(&self) -> &[IpNet] {
        &self.0
    }

    /// At most two CIDRs, of different IP families when there are two; `written` is the value for the
    /// message.
    fn check(cidrs: &[IpNet], written: impl Fn() -> String) -> Result<(), ClusterCidrsError> {
        match cidrs {
            [] | [_] => Ok(()),
            [first, second] if first.addr().is_ipv4() == second.addr().is_ipv4() => {
                Err(ClusterCidrsError::SameFamily(written()))
            }
            [_, _] => Ok(()),
            _ => Err(ClusterCidrsError::TooMany(cidrs.len())),
        }
    }
}

impl Deref for ClusterCidrs {
    type Target = [IpNet];

    fn deref(&self) -> &[IpNet] {
        &self.0
    }
}

impl TryFrom<Vec<IpNet>> for ClusterCidrs {
    type Error = ClusterCidrsError;

    fn try_from(cidrs: Vec<IpNet>) -> Result<Self, Self::Error> {
        Self::new(cidrs)
    }
}

impl fmt::Debug for ClusterCidrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    #[test]
    fn periods_below_the_minimum_are_refused() {
        assert_eq!(Period::new(Duration::ZERO), Err(PeriodError::Zero));
        assert_eq!(
            Period::new(Duration::from_millis(1)),
            Err(PeriodError::TooShort {
                got: Duration::from_millis(1)
            })
        );
        assert_eq!(
            Period::try_from(Duration::from_nanos(9_999_999)),
            Err(PeriodError::TooShort {
                got: Duration::from_nanos(9_999_999)
            })
        );
        assert_eq!(Period::new(Period::MIN).map(Period::get), Ok(Period::MIN));
        assert_eq!(
            Period::new(Duration::from_secs(5)).map(Duration::from),
            Ok(Duration::from_secs(5))
        );
        assert_eq!(
            PeriodError::TooShort {
                got: Duration::from_millis(1)
            }
            .to_string(),
            "must be at least 10ms, got 1ms"
        );
        assert_eq!(format!("{:?}", defaults::NODE_MONITOR_PERIOD), "5s");
    }

    #[test]
    fn non_zero_durations() {
        assert_eq!(NonZeroDuration::new(Duration::ZERO), None);
        assert_eq!(
            NonZeroDuration::new(Duration::from_nanos(1)).map(NonZeroDuration::get),
            Some(Duration::from_nanos(1))
        );
    }

    #[test]
    fn cloud_call_timeouts_are_bounded() {
        assert_eq!(
            CloudCallTimeout::new(Duration::ZERO),
            Err(CloudCallTimeoutError::Zero)
        );
        let too_long = CloudCallTimeout::MAX + Duration::from_millis(1);
        assert_eq!(
            CloudCallTimeout::try_from(too_long),
            Err(CloudCallTimeoutError::TooLong { got: too_long })
        );
        assert_eq!(
            CloudCallTimeout::new(CloudCallTimeout::MAX).map(Duration::from),
            Ok(CloudCallTimeout::MAX)
        );
        assert_eq!(
            CloudCallTimeout::new(Duration::from_nanos(1)).map(CloudCallTimeout::get),
            Ok(Duration::from_nanos(1))
        );
    }

    #[test]
    fn percents_are_at_most_100() {
        assert_eq!(Percent::new(0).map(Percent::get), Some(0));
        assert_eq!(Percent::new(100), Some(Percent::ALL));
        assert_eq!(Percent::new(101), None);
        assert_eq!(Percent::new(u32::MAX), None);
        assert_eq!(defaults::NODE_DELETION_MAX_PERCENT.to_string(), "50");
    }

    #[test]
    fn cluster_cidrs_parse() {
        assert_eq!(ClusterCidrs::parse(""), Ok(ClusterCidrs::none()));
        assert_eq!(ClusterCidrs::parse("  "), Ok(ClusterCidrs::default()));
        assert_eq!(
            ClusterCidrs::parse("10.0.0.0/8").unwrap().as_slice(),
            [net("10.0.0.0/8")]
        );
        let dual = ClusterCidrs::parse("fd00::/8, 10.0.0.0/8").unwrap();
        assert_eq!(*dual, [net("fd00::/8"), net("10.0.0.0/8")]);
        assert_eq!(format!("{dual:?}"), "[fd00::/8, 10.0.0.0/8]");
    }

    #[test]
    fn cluster_cidrs_refuse_what_routes_cannot_use() {
        assert_eq!(
            ClusterCidrs::parse("10.0.0.0/33"),
            Err(ClusterCidrsError::NotACidr("10.0.0.0/33".into()))
        );
        assert_eq!(
            ClusterCidrs::parse("10.0.0.0/16,fd00::/48,banana"),
            Err(ClusterCidrsError::NotACidr("banana".into()))
        );
        assert_eq!(
            ClusterCidrs::parse("10.0.0.0/16,fd00::/48,10.1.0.0/16"),
            Err(ClusterCidrsError::TooMany(3))
        );
        assert_eq!(
            ClusterCidrs::parse(" 10.0.0.0/16,10.1.0.0/16 "),
            Err(ClusterCidrsError::SameFamily(
                "10.0.0.0/16,10.1.0.0/16".into()
            ))
        );
        assert_eq!(
            ClusterCidrs::new(vec![net("fd00::/48"), net("fd01::/48")]),
            Err(ClusterCidrsError::SameFamily("fd00::/48,fd01::/48".into()))
        );
        assert_eq!(
            ClusterCidrs::try_from(vec![net("10.0.0.0/8"), net("fd00::/48"), net("fd01::/48")]),
            Err(ClusterCidrsError::TooMany(3))
        );
        assert!(ClusterCidrs::new(vec![net("10.0.0.0/8"), net("fd00::/48")]).is_ok());
    }
}
