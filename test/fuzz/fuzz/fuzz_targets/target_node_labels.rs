//! libFuzzer entry for the `target_node_labels` target (its contract: `ccm_fuzz::targets::target_node_labels`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ccm_fuzz::targets::target_node_labels::check(data));
