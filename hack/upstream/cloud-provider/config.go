package main

import (
	"fmt"
	"hash/fnv"
	"net"
	"os"

	"sigs.k8s.io/yaml"
)

// config is the part of the fake provider's cloud-config (providers/fake/src/config.rs) this peer models.
// Fields it cannot model (fault injection other than latency) are refused, so that a scenario never runs
// against a cloud that differs from the one the Rust fake would present.
type config struct {
	Region                string                 `json:"region"`
	Zones                 []string               `json:"zones"`
	InstanceTypes         []string               `json:"instanceTypes"`
	DefaultInstanceType   string                 `json:"defaultInstanceType"`
	AutoDiscover          *bool                  `json:"autoDiscover"`
	DiscoveredExternalIPs bool                   `json:"discoveredExternalIPs"`
	Instances             []instanceConfig       `json:"instances"`
	LoadBalancerCIDR      string                 `json:"loadBalancerCIDR"`
	ClusterID             string                 `json:"clusterID"`
	ClusterName           string                 `json:"clusterName"`
	MasterAddress         string                 `json:"masterAddress"`
	AdminAddress          string                 `json:"adminAddress"`
	CSIDriver             string                 `json:"csiDriver"`
	Volumes               []volumeConfig         `json:"volumes"`
	Seed                  uint64                 `json:"seed"`
	Faults                map[string]faultConfig `json:"faults"`
	// PreciseLatency asks the Rust fake to wake each call at its deadline instead of on its runtime's
	// millisecond timer; Go's time.Sleep already does, so it changes nothing here.
	PreciseLatency bool `json:"preciseLatency"`
}

type instanceConfig struct {
	Name       string            `json:"name"`
	ProviderID string            `json:"providerID"`
	ID         string            `json:"id"`
	Type       string            `json:"type"`
	Zone       string            `json:"zone"`
	Addresses  []addressConfig   `json:"addresses"`
	State      string            `json:"state"`
	Labels     map[string]string `json:"labels"`
}

type addressConfig struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

type volumeConfig struct {
	Name string `json:"name"`
	Zone string `json:"zone"`
}

type faultConfig struct {
	ErrorRate    float64 `json:"errorRate"`
	Kind         string  `json:"kind"`
	RetryAfterMs uint64  `json:"retryAfterMs"`
	LatencyMs    uint64  `json:"latencyMs"`
}

// readConfig parses and defaults the cloud-config at path ("" gives every default, as in the Rust fake).
func readConfig(path string) (*config, error) {
	cfg := &config{}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading the fake cloud config: %w", err)
		}
		if err := yaml.UnmarshalStrict(data, cfg); err != nil {
			return nil, fmt.Errorf("invalid fake cloud config: %w", err)
		}
	}
	if cfg.Region == "" {
		cfg.Region = "fake-region-1"
	}
	if len(cfg.Zones) == 0 {
		cfg.Zones = []string{cfg.Region + "a", cfg.Region + "b", cfg.Region + "c"}
	}
	if len(cfg.InstanceTypes) == 0 {
		cfg.InstanceTypes = []string{"fake.small", "fake.medium", "fake.large"}
	}
	if cfg.DefaultInstanceType == "" {
		cfg.DefaultInstanceType = cfg.InstanceTypes[0]
	}
	if cfg.AutoDiscover == nil {
		yes := true
		cfg.AutoDiscover = &yes
	}
	if cfg.LoadBalancerCIDR == "" {
		cfg.LoadBalancerCIDR = "198.51.100.0/24"
	}
	if cfg.ClusterName == "" {
		cfg.ClusterName = "kubernetes"
	}
	if cfg.MasterAddress == "" {
		cfg.MasterAddress = "127.0.0.1"
	}
	if cfg.CSIDriver == "" {
		cfg.CSIDriver = "fake.csi.cloud"
	}
	if _, _, err := net.ParseCIDR(cfg.LoadBalancerCIDR); err != nil {
		return nil, fmt.Errorf("invalid fake cloud config: loadBalancerCIDR: %w", err)
	}
	for op, f := range cfg.Faults {
		deterministic := f.ErrorRate == 0 || (f.ErrorRate == 1 && (f.Kind == "" || f.Kind == "provider"))
		if !deterministic || (op == "*" && f.ErrorRate != 0) || (op != "*" && f.LatencyMs != 0) {
			return nil, fmt.Errorf("invalid fake cloud config: faults[%s]: this peer models a latency for every "+
				"operation (\"*\") and operations that always fail (errorRate 1, kind provider)", op)
		}
	}
	if len(cfg.Volumes) != 0 {
		return nil, fmt.Errorf("invalid fake cloud config: volumes: this peer labels CSI volumes only")
	}
	return cfg, nil
}

// fails is whether every call of op fails.
func (c *config) fails(op string) bool {
	return c.Faults[op].ErrorRate == 1
}

// latency is the delay of every cloud call: the "*" fault's latency.
func (c *config) latency() uint64 {
	return c.Faults["*"].LatencyMs
}

// autoZone is the zone of an auto-discovered instance: the Rust fake's stable hash (FNV-1a, 64 bits) of
// key, modulo the number of zones.
func (c *config) autoZone(key string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return c.Zones[h.Sum64()%uint64(len(c.Zones))]
}
