//! The cloud providers this build of the daemon carries (Cargo features `aws`, `digitalocean`, `fake`), for
//! the binary and for its tests.

use cloud_provider::Registry;

/// A registry with every provider compiled in.
pub fn registry() -> Registry {
    #[allow(unused_mut)]
    let mut registry = Registry::new();
    #[cfg(feature = "aws")]
    provider_aws::register(&mut registry);
    #[cfg(feature = "digitalocean")]
    provider_digitalocean::register(&mut registry);
    #[cfg(feature = "fake")]
    provider_fake::register(&mut registry);
    registry
}
