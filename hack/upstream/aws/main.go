// Command upstream-aws-ccm is kubernetes/cloud-provider-aws's aws-cloud-controller-manager, built from its
// Go module and unmodified: the same command, controllers (with upstream's tagging controller registered and
// disabled by default) and cloud initializer as upstream's cmd/aws-cloud-controller-manager, whose package
// main cannot be imported. It is a test peer: the AWS provider's moto tests run it against moto and a real
// kube-apiserver to compare what it creates with what this project's provider does. Never shipped.
package main

import (
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider-aws/pkg/controllers/tagging"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream registers them
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/klog/v2"
)

// main wires the command as upstream's main does.
func main() {
	logs.InitLogs()
	defer logs.FlushLogs()

	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("unable to initialize command options: %v", err)
	}

	controllerInitializers := app.DefaultInitFuncConstructors
	taggingControllerWrapper := tagging.ControllerWrapper{}
	fss := cliflag.NamedFlagSets{}
	taggingControllerWrapper.Options.AddFlags(fss.FlagSet("tagging controller"))
	controllerInitializers[tagging.TaggingControllerKey] = app.ControllerInitFuncConstructor{
		InitContext: app.ControllerInitContext{ClientName: tagging.TaggingControllerClientName},
		Constructor: taggingControllerWrapper.StartTaggingControllerWrapper,
	}
	app.ControllersDisabledByDefault.Insert(tagging.TaggingControllerKey)

	controllerAliases := names.CCMControllerAliases()
	controllerAliases[tagging.TaggingControllerKey] = tagging.TaggingControllerKey

	command := app.NewCloudControllerManagerCommand(opts, cloudInitializer, controllerInitializers,
		controllerAliases, fss, wait.NeverStop)
	if err := command.Execute(); err != nil {
		klog.Fatalf("unable to execute command: %v", err)
	}
}

// cloudInitializer is upstream's: the provider registered by awsv1 (the v1 provider when --cloud-provider is
// empty), built from --cloud-config, and a cluster ID required unless --allow-untagged-cloud.
func cloudInitializer(config *cloudcontrollerconfig.CompletedConfig) cloudprovider.Interface {
	cloudConfig := config.ComponentConfig.KubeCloudShared.CloudProvider
	providerName := cloudConfig.Name
	if providerName == "" {
		providerName = awsv1.ProviderName
	}
	if providerName != awsv1.ProviderName {
		klog.Fatalf("unknown cloud provider %s, only 'aws' and 'aws/v2' are supported", providerName)
	}

	cloud, err := cloudprovider.InitCloudProvider(providerName, cloudConfig.CloudConfigFile)
	if err != nil {
		klog.Fatalf("Cloud provider could not be initialized: %v", err)
	}
	if cloud == nil {
		klog.Fatalf("Cloud provider is nil")
	}

	if !cloud.HasClusterID() {
		if config.ComponentConfig.KubeCloudShared.AllowUntaggedCloud {
			klog.Warning("detected a cluster without a ClusterID.  A ClusterID will be required in the future.  Please tag your cluster to avoid any future issues")
		} else {
			klog.Fatalf("no ClusterID found.  A ClusterID is required for the cloud provider to function properly.  This check can be bypassed by setting the allow-untagged-cloud option")
		}
	}
	return cloud
}
