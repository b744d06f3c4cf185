//! One module per fuzz target; each exposes `check(&[u8])`.

pub mod admission_review;
pub mod aws_annotations;
pub mod aws_cloud_config;
pub mod cidr_lists;
pub mod do_annotations;
pub mod do_cloud_config;
pub mod durations;
pub mod fake_cloud_config;
pub mod provider_ids;
pub mod target_node_labels;
