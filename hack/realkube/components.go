package main

// The control-plane components, each run as its own process of this binary.

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json, as in the real binaries
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in the real binaries
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as in the real binaries
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanagerapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
)

// runEtcd runs a single-member etcd on loopback until SIGTERM or SIGINT.
func runEtcd(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory")
	clientPort := fs.Int("client-port", 0, "loopback port of the client API")
	peerPort := fs.Int("peer-port", 0, "loopback port of the peer API")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dataDir == "" || *clientPort == 0 || *peerPort == 0 {
		return fmt.Errorf("--data-dir, --client-port and --peer-port are required")
	}
	cfg := embed.NewConfig()
	cfg.Name = "realkube"
	cfg.Dir = *dataDir
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", *clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", *peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	// A test cluster's data is thrown away after the run: skip fsync, as envtest-style setups do.
	cfg.UnsafeNoFsync = true
	// Room for the scale benchmarks (100,000 nodes and their events, with history until the API server's
	// compaction) beyond etcd's 2 GiB default; the data lives on disk, not in a memory quota.
	cfg.QuotaBackendBytes = 8 << 30

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer server.Close()
	select {
	case <-server.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("etcd was not ready within 60s")
	}
	fmt.Fprintf(os.Stderr, "etcd ready on %s\n", clientURL.String())

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "etcd stopping on %s\n", sig)
		return nil
	case err := <-server.Err():
		return fmt.Errorf("etcd failed: %w", err)
	}
}

// runAPIServer runs kube-apiserver with the given flags.
func runAPIServer(_ []string) error {
	return exitWith(cli.Run(apiserverapp.NewAPIServerCommand()))
}

// runControllerManager runs kube-controller-manager with the given flags.
func runControllerManager(_ []string) error {
	return exitWith(cli.Run(controllermanagerapp.NewControllerManagerCommand()))
}

// runScheduler runs kube-scheduler with the given flags.
func runScheduler(_ []string) error {
	return exitWith(cli.Run(schedulerapp.NewSchedulerCommand()))
}

// runKubelet runs a kubelet with the given flags.
func runKubelet(_ []string) error {
	return exitWith(cli.Run(kubeletapp.NewKubeletCommand(context.Background())))
}

// runProxy runs kube-proxy with the given flags.
func runProxy(_ []string) error {
	return exitWith(cli.Run(proxyapp.NewProxyCommand()))
}

// runKubectl runs kubectl with the given arguments.
func runKubectl(_ []string) error {
	if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	return nil
}

// exitWith ends the process with a component's exit code (the component printed its own errors).
func exitWith(code int) error {
	os.Exit(code)
	return nil
}
