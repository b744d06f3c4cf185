//! The example provider's cloud-controller-manager: register the provider, hand over to the app.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut registry = cloud_provider::Registry::new();
    if let Err(err) = example_provider::register(&mut registry) {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    ccm_app::run_main(registry)
}
