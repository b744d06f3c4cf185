//! libFuzzer entry for the `cidr_lists` target (its contract: `ccm_fuzz::targets::cidr_lists`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::cidr_lists::check(data));
