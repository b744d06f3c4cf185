// Command upstream-aws-ccm runs kubernetes/cloud-provider-aws's AWS cloud provider (package
// k8s.io/cloud-provider-aws/pkg/providers/v1, unmodified, from its Go module) in k8s.io/cloud-provider's
// cloud-controller-manager command. It is a test peer: the AWS provider's moto tests run its service
// controller against moto and a real kube-apiserver to compare what it creates with what this project's
// provider does. Never shipped.
package main

import (
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"
	"k8s.io/cloud-provider/app"
	appconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as a release binary has them
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/klog/v2"
)

func main() {
	ccmOptions, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("cloud-controller-manager options: %v", err)
	}
	command := app.NewCloudControllerManagerCommand(ccmOptions, initializeCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(command))
}

// initializeCloud builds the provider awsv1 registers under its name from --cloud-config; a cluster ID is
// required unless --allow-untagged-cloud, as in upstream's release binary.
func initializeCloud(completed *appconfig.CompletedConfig) cloudprovider.Interface {
	shared := completed.ComponentConfig.KubeCloudShared
	name := shared.CloudProvider.Name
	if name == "" {
		name = awsv1.ProviderName
	}
	if name != awsv1.ProviderName {
		klog.Fatalf("this test peer only runs --cloud-provider=%s, not %q", awsv1.ProviderName, name)
	}
	cloud, err := cloudprovider.InitCloudProvider(name, shared.CloudProvider.CloudConfigFile)
	if err != nil || cloud == nil {
		klog.Fatalf("initializing the %s cloud provider: %v", name, err)
	}
	if !cloud.HasClusterID() && !shared.AllowUntaggedCloud {
		klog.Fatalf("no cluster ID: set KubernetesClusterID in the cloud-config or --allow-untagged-cloud")
	}
	return cloud
}
