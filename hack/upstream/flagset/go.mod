// Test tooling shared by the upstream peers: prints a peer's whole flag set (and what else it describes)
// for the Rust daemon's flag-set tests. Never linked into the shipped daemon.
module ccm.test/upstream/flagset

go 1.26.0

require (
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.10
	k8s.io/apiserver v0.37.0
)
