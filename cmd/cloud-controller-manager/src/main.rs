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
    ccm_app::run_main(cloud_controller_manager::registry())
}
