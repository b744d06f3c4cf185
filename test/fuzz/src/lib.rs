//! Fuzz targets over every parser of the daemon that reads outside input: Service annotations of the AWS and
//! DigitalOcean providers, the providers' cloud-configs, provider IDs, durations and `Retry-After` values,
//! target-node label lists, CIDR and IP lists, and the admission reviews of the webhook endpoint.
//!
//! Each target is a plain function from arbitrary bytes that runs its parsers and panics when one breaks its
//! contract: no parser may panic, and a value a parser accepts must round-trip (render it, parse it again, get
//! the same value) or re-validate. The functions are shared by two runners:
//! - `fuzz/` is a cargo-fuzz (libFuzzer) project with one binary per target (`make fuzz`);
//! - `tests/corpus.rs` replays every committed corpus file through its target, so `make test` checks every
//!   input the fuzzer ever kept, without libFuzzer.
//!
//! See `README.md` beside this crate for the input layouts, how to run the fuzzer and the recorded runs.

pub mod input;
pub mod targets;

/// A fuzz target: its name (the corpus directory and the cargo-fuzz binary) and its check.
#[derive(Clone, Copy)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// Runs the target's parsers over one input; panics when a contract is broken.
    pub check: fn(&[u8]),
}

/// Every target, in the order the fuzz README lists them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "aws_annotations",
        check: targets::aws_annotations::check,
    },
    Target {
        name: "do_annotations",
        check: targets::do_annotations::check,
    },
    Target {
        name: "aws_cloud_config",
        check: targets::aws_cloud_config::check,
    },
    Target {
        name: "do_cloud_config",
        check: targets::do_cloud_config::check,
    },
    Target {
        name: "fake_cloud_config",
        check: targets::fake_cloud_config::check,
    },
    Target {
        name: "provider_ids",
        check: targets::provider_ids::check,
    },
    Target {
        name: "durations",
        check: targets::durations::check,
    },
    Target {
        name: "target_node_labels",
        check: targets::target_node_labels::check,
    },
    Target {
        name: "admission_review",
        check: targets::admission_review::check,
    },
    Target {
        name: "cidr_lists",
        check: targets::cidr_lists::check,
    },
];
