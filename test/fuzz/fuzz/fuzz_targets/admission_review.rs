//! libFuzzer entry for the `admission_review` target (its contract: `ccm_fuzz::targets::admission_review`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::admission_review::check(data));
