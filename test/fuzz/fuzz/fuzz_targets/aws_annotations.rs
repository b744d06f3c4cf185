//! libFuzzer entry for the `aws_annotations` target (its contract: `ccm_fuzz::targets::aws_annotations`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::aws_annotations::check(data));
