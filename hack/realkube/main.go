// Command realkube runs a real Kubernetes control plane on loopback for the project's tests: etcd,
// kube-apiserver and a minimal kube-controller-manager, built from pinned Kubernetes modules, and kubectl of
// the same version. It is test tooling only; nothing here is linked into the shipped daemon.
//
// One binary holds every component; the first argument (or the name the binary is called by, so that a link
// named kubectl is kubectl) picks one:
//
//	realkube up --dir DIR [--manifest FILE]... [--service-account NS/NAME]... [--nodes N [--cluster-cidr CIDR]]
//	realkube down --dir DIR
//	realkube fault --dir DIR restart etcd|kube-apiserver | compact | proxy NAME [--mode MODE] [--latency D]
//	realkube kubectl ARGS...
//
// `up` starts a supervisor (`realkube serve`) in the background, which runs `realkube etcd`,
// `realkube kube-apiserver` and `realkube kube-controller-manager` as child processes, and returns once the
// cluster is ready: DIR/admin.kubeconfig (system:masters), and one DIR/NAME.kubeconfig per requested
// ServiceAccount with a token from the TokenRequest API. While the cluster runs, the supervisor serves a control
// endpoint on loopback (DIR/control.addr; control.go) that restarts etcd and kube-apiserver, compacts etcd
// and runs TCP fault proxies (faultproxy.go); `realkube fault` and `realkube node` are its command-line
// clients.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// command is one entry of the multi-call binary.
type command struct {
	name  string
	usage string
	run   func(args []string) error
}

var commands = []command{
	{"up", "start the control plane in the background and wait until it is ready", runUp},
	{"down", "stop the control plane started by up", runDown},
	{"serve", "supervise the control plane in the foreground (started by up)", runServe},
	{"etcd", "an embedded etcd server", runEtcd},
	{"kube-apiserver", "kube-apiserver", runAPIServer},
	{"kube-controller-manager", "kube-controller-manager", runControllerManager},
	{"kube-scheduler", "kube-scheduler (with --nodes)", runScheduler},
	{"kubelet", "a node's kubelet (with --nodes)", runKubelet},
	{"kube-proxy", "kube-proxy (with --nodes)", runProxy},
	{"node", "stop or start a node's kubelet: node --dir DIR stop-kubelet|start-kubelet NAME", runNode},
	{"fault", "restart etcd or kube-apiserver, compact etcd, or set a fault proxy: fault --dir DIR ...", runFault},
	{"kubectl", "kubectl", runKubectl},
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if lookup(name) == nil {
		if len(args) == 0 {
			usage()
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(os.Stderr, "realkube: unknown command %q\n", name)
		usage()
		os.Exit(2)
	}
	// The Kubernetes commands read os.Args (cobra, kubectl's plugin handling): present them as if the
	// component were its own binary.
	os.Args = append([]string{cmd.name}, args...)
	if err := cmd.run(args); err != nil {
		fmt.Fprintf(os.Stderr, "realkube %s: %v\n", cmd.name, err)
		os.Exit(1)
	}
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func usage() {
	var b strings.Builder
	b.WriteString("usage: realkube COMMAND [ARGS...]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-24s %s\n", c.name, c.usage)
	}
	fmt.Fprint(os.Stderr, b.String())
}
