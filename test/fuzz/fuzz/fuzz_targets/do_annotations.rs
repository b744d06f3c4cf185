//! libFuzzer entry for the `do_annotations` target (its contract: `ccm_fuzz::targets::do_annotations`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::do_annotations::check(data));
