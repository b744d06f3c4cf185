//! libFuzzer entry for the `fake_cloud_config` target (its contract: `ccm_fuzz::targets::fake_cloud_config`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::fake_cloud_config::check(data));
