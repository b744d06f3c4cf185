//! The cloud-controller-manager daemon: registers the cloud providers compiled in (Cargo features) and
//! runs the application.

use std::process::ExitCode;

fn main() -> ExitCode {
    #[allow(unused_mut)]
    let mut registry = cloud_provider::Registry::new();
    #[cfg(feature = "aws")]
    provider_aws::register(&mut registry);
    #[cfg(feature = "digitalocean")]
    provider_digitalocean::register(&mut registry);
    #[cfg(feature = "fake")]
    provider_fake::register(&mut registry);
    ccm_app::run_main(registry)
}
