// Command upstream-ccm is k8s.io/cloud-provider's cloud-controller-manager, unmodified, with a fake cloud
// that models the same instances and load balancers as this project's fake provider. It is a test peer:
// the differential controller suite and the benchmark run the same scenarios against it and against the
// Rust daemon. Never shipped.
package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"

	"ccm.test/upstream/flagset"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	appconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format, as in upstream's sample
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in upstream's sample
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/klog/v2"
)

func main() {
	ccmOptions, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("unable to initialize command options: %v", err)
	}
	command := app.NewCloudControllerManagerCommand(ccmOptions, initializeCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	flagset.PrintIfAsked(command, nil)
	os.Exit(cli.Run(command))
}

// initializeCloud builds the fake cloud from --cloud-config and, with adminAddress, serves its call
// counters, load balancers and routes (GET and DELETE /calls, GET /loadbalancers and /routes: the Rust fake's admin API).
func initializeCloud(completed *appconfig.CompletedConfig) cloudprovider.Interface {
	shared := completed.ComponentConfig.KubeCloudShared
	if shared.CloudProvider.Name != providerName {
		klog.Fatalf("this test peer only knows --cloud-provider=%s", providerName)
	}
	cfg, err := readConfig(shared.CloudProvider.CloudConfigFile)
	if err != nil {
		klog.Fatalf("%v", err)
	}
	c, err := newCloud(cfg)
	if err != nil {
		klog.Fatalf("%v", err)
	}
	if !c.HasClusterID() && !shared.AllowUntaggedCloud {
		klog.Fatalf("no ClusterID found: set clusterID in the cloud-config or --allow-untagged-cloud")
	}
	if cfg.AdminAddress != "" {
		if err := serveAdmin(cfg.AdminAddress, c); err != nil {
			klog.Fatalf("fake cloud admin API: %v", err)
		}
	}
	return c
}

func serveAdmin(address string, c *cloud) error {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	serveJSON := func(path string, read func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(read())
		})
	}
	serveJSON("/calls", func() any { return c.callCounts() })
	mux.HandleFunc("DELETE /calls", func(w http.ResponseWriter, _ *http.Request) {
		c.resetCalls()
		w.WriteHeader(http.StatusNoContent)
	})
	serveJSON("/loadbalancers", func() any { return c.loadBalancers() })
	serveJSON("/routes", func() any { return c.routes() })
	klog.Infof("fake cloud admin API listening on %s", listener.Addr())
	go func() { _ = http.Serve(listener, mux) }()
	return nil
}
