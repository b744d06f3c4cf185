// Command upstream-aws-ccm runs kubernetes/cloud-provider-aws's AWS cloud provider (package
// k8s.io/cloud-provider-aws/pkg/providers/v1, unmodified, from its Go module) in k8s.io/cloud-provider's
// cloud-controller-manager command, wired as upstream's aws-cloud-controller-manager main wires it: the
// tagging controller registered (off by default) with its "tagging controller" flags. It is a test peer:
// the AWS provider's moto tests run it against moto and a real kube-apiserver to compare what it creates
// with what this project's provider does, and the flag-set tests compare its flags and cloud-config keys.
// Never shipped.
package main

import (
	"reflect"

	"ccm.test/upstream/flagset"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider-aws/pkg/controllers/tagging"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"
	awsconfig "k8s.io/cloud-provider-aws/pkg/providers/v1/config"
	"k8s.io/cloud-provider/app"
	appconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as a release binary has them
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/klog/v2"
)

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()

	ccmOptions, err := options.NewCloudControllerManagerOptions()
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

	command := app.NewCloudControllerManagerCommand(ccmOptions, initializeCloud, controllerInitializers,
		controllerAliases, fss, wait.NeverStop)
	flagset.PrintIfAsked(command, map[string]any{"cloudConfig": cloudConfigKeys()})
	if err := command.Execute(); err != nil {
		klog.Fatalf("unable to execute command: %v", err)
	}
}

// cloudConfigKeys lists the keys of each section of the provider's cloud config (the fields of its config
// struct, which gcfg matches by name), with their Go types.
func cloudConfigKeys() map[string]map[string]string {
	fields := func(t reflect.Type) map[string]string {
		out := map[string]string{}
		for i := 0; i < t.NumField(); i++ {
			out[t.Field(i).Name] = t.Field(i).Type.String()
		}
		return out
	}
	config := reflect.TypeOf(awsconfig.CloudConfig{})
	global, _ := config.FieldByName("Global")
	override, _ := config.FieldByName("ServiceOverride")
	return map[string]map[string]string{
		"Global":          fields(global.Type),
		"ServiceOverride": fields(override.Type.Elem().Elem()),
	}
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
