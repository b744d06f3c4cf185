//! The cloud-controller-manager daemon: registers the cloud providers compiled in (Cargo features) and
//! runs the application.
//!
//! With the `jemalloc` feature (a default) the daemon allocates through jemalloc, configured
//! (`.cargo/config.toml`) with one arena and to hand freed pages back to the system at once: the informer
//! caches are built from many short-lived list and watch buffers, and with the system allocator the holes
//! they leave keep the resident size well above the live heap.

use std::process::ExitCode;

#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
