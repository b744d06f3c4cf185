// Package flagset prints an upstream peer's command-line interface as JSON for the Rust daemon's flag-set
// tests: every flag as pflag knows it (hidden and deprecated ones included), the feature gates, and what
// else the peer describes (the AWS peer: its cloud-config keys).
package flagset

import (
	"encoding/json"
	"os"
	"sort"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Variable names the environment variable that makes the command print its flag set instead of running:
// the Rust daemon's flag-set test compares its own flags with it.
const Variable = "UPSTREAM_CCM_PRINT_FLAG_SET"

// flagDescription is one flag of the command as pflag knows it, hidden and deprecated ones included.
type flagDescription struct {
	Name       string `json:"name"`
	Shorthand  string `json:"shorthand,omitempty"`
	Type       string `json:"type"`
	Default    string `json:"default"`
	Hidden     bool   `json:"hidden,omitempty"`
	Deprecated string `json:"deprecated,omitempty"`
}

// gateDescription is one feature gate of --feature-gates.
type gateDescription struct {
	Name          string `json:"name"`
	Default       bool   `json:"default"`
	PreRelease    string `json:"preRelease"`
	LockToDefault bool   `json:"lockToDefault,omitempty"`
}

// PrintIfAsked prints the command's flags and feature gates, and each document of extra under its name, as
// one JSON document on stdout and exits when Variable is set.
func PrintIfAsked(command *cobra.Command, extra map[string]any) {
	if os.Getenv(Variable) == "" {
		return
	}
	var flags []flagDescription
	command.Flags().VisitAll(func(f *pflag.Flag) {
		flags = append(flags, flagDescription{
			Name: f.Name, Shorthand: f.Shorthand, Type: f.Value.Type(), Default: f.DefValue,
			Hidden: f.Hidden, Deprecated: f.Deprecated,
		})
	})
	var gates []gateDescription
	for name, spec := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		gates = append(gates, gateDescription{
			Name: string(name), Default: spec.Default, PreRelease: string(spec.PreRelease),
			LockToDefault: spec.LockToDefault,
		})
	}
	sort.Slice(gates, func(i, j int) bool { return gates[i].Name < gates[j].Name })
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	document := map[string]any{"flags": flags, "featureGates": gates}
	for name, value := range extra {
		document[name] = value
	}
	if err := encoder.Encode(document); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}
