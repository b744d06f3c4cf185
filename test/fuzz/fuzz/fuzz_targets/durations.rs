//! libFuzzer entry for the `durations` target (its contract: `ccm_fuzz::targets::durations`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::durations::check(data));
