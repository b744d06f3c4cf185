//! libFuzzer entry for the `provider_ids` target (its contract: `ccm_fuzz::targets::provider_ids`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::provider_ids::check(data));
