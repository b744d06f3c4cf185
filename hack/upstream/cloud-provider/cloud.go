package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
)

// providerName is the name and provider-ID scheme the Rust fake provider uses.
const providerName = "fake"

// instance is one machine of the modelled cloud.
type instance struct {
	name, id, instanceType, zone string
	running, auto                bool
	addresses                    []v1.NodeAddress
	labels                       map[string]string
}

// cloud is k8s.io/cloud-provider's fake cloud with the instance and load-balancer model of the Rust fake
// provider, so that upstream's controllers and ours see the same cloud. Zones, clusters and routes are
// upstream's fake as it is.
type cloud struct {
	*fake.Cloud
	cfg     *config
	latency time.Duration

	mu        sync.Mutex
	instances map[string]*instance // by instance ID
	byName    map[string]string    // node name -> instance ID
	deadIDs   map[string]bool      // terminated: never auto-discovered again
	deadNames map[string]bool
	lbs       map[string]*loadBalancer // by load-balancer name
	calls     map[string]uint64
}

// loadBalancer is one load balancer, in the JSON shape of the Rust fake's admin API (GET /loadbalancers).
type loadBalancer struct {
	Name        string   `json:"name"`
	Cluster     string   `json:"cluster"`
	Service     string   `json:"service"`
	ServiceUID  string   `json:"serviceUid"`
	IP          string   `json:"ip"`
	Ports       []lbPort `json:"ports"`
	Nodes       []string `json:"nodes"`
	EnsureCount uint64   `json:"ensureCount"`
	UpdateCount uint64   `json:"updateCount"`
}

type lbPort struct {
	Name     *string `json:"name"`
	Protocol string  `json:"protocol"`
	Port     int32   `json:"port"`
	NodePort *int32  `json:"nodePort"`
}

// route is one route, in the JSON shape of the Rust fake's admin API (GET /routes).
type route struct {
	Name                string           `json:"name"`
	Cluster             string           `json:"cluster"`
	TargetNode          string           `json:"targetNode"`
	DestinationCIDR     string           `json:"destinationCIDR"`
	TargetNodeAddresses []v1.NodeAddress `json:"targetNodeAddresses"`
	Blackhole           bool             `json:"blackhole"`
}

var _ cloudprovider.InstancesV2 = (*cloud)(nil)
var _ cloudprovider.LoadBalancer = (*cloud)(nil)
var _ cloudprovider.PVLabeler = (*cloud)(nil)

func newCloud(cfg *config) (*cloud, error) {
	c := &cloud{
		Cloud: &fake.Cloud{
			Provider:          providerName,
			EnableInstancesV2: true,
			RouteMap:          map[string]*fake.Route{},
			ClusterList:       []string{cfg.ClusterName},
			MasterName:        cfg.MasterAddress,
			Zone:              cloudprovider.Zone{Region: cfg.Region, FailureDomain: cfg.Zones[0]},
			RequestDelay:      time.Duration(cfg.latency()) * time.Millisecond,
		},
		cfg:       cfg,
		latency:   time.Duration(cfg.latency()) * time.Millisecond,
		instances: map[string]*instance{},
		byName:    map[string]string{},
		deadIDs:   map[string]bool{},
		deadNames: map[string]bool{},
		lbs:       map[string]*loadBalancer{},
		calls:     map[string]uint64{},
	}
	for i, ic := range cfg.Instances {
		if err := c.addConfigured(ic); err != nil {
			return nil, fmt.Errorf("invalid fake cloud config: instances[%d]: %w", i, err)
		}
	}
	return c, nil
}

func (c *cloud) addConfigured(ic instanceConfig) error {
	id := ic.Name
	switch {
	case ic.ProviderID != "":
		parsed, err := parseProviderID(ic.ProviderID)
		if err != nil {
			return err
		}
		id = parsed
	case ic.ID != "":
		id = ic.ID
	}
	if ic.State == "terminated" {
		c.deadIDs[id], c.deadNames[ic.Name] = true, true
		return nil
	}
	inst := &instance{
		name: ic.Name, id: id, instanceType: ic.Type, zone: ic.Zone,
		running: ic.State != "stopped", labels: ic.Labels,
	}
	if inst.instanceType == "" {
		inst.instanceType = c.cfg.DefaultInstanceType
	}
	if inst.zone == "" {
		inst.zone = c.cfg.autoZone(ic.Name)
	}
	for _, a := range ic.Addresses {
		inst.addresses = append(inst.addresses, v1.NodeAddress{Type: v1.NodeAddressType(a.Type), Address: a.Address})
	}
	c.instances[id], c.byName[ic.Name] = inst, id
	return nil
}

func parseProviderID(providerID string) (string, error) {
	id, ok := strings.CutPrefix(providerID, providerName+"://")
	if !ok || id == "" {
		return "", fmt.Errorf("%q is not a fake cloud provider ID (fake://<instance>)", providerID)
	}
	return id, nil
}

// call counts one cloud operation, waits the configured latency and fails it when the config says so.
func (c *cloud) call(op string) error {
	time.Sleep(c.latency)
	c.mu.Lock()
	c.calls[op]++
	c.mu.Unlock()
	if c.cfg.fails(op) {
		return fmt.Errorf("injected fault: %s failed", op)
	}
	return nil
}

// callCounts is a copy of the per-operation counters.
func (c *cloud) callCounts() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.calls))
	for op, n := range c.calls {
		out[op] = n
	}
	return out
}

// resetCalls forgets the counted calls.
func (c *cloud) resetCalls() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = map[string]uint64{}
}

func (c *cloud) ProviderName() string { return providerName }

func (c *cloud) HasClusterID() bool { return c.cfg.ClusterID != "" }

func (c *cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c, true }

func (c *cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }

// resolve finds (or auto-discovers) the instance of a node, as the Rust fake does; nil when it is gone.
// The caller holds c.mu.
func (c *cloud) resolve(node *v1.Node) (*instance, error) {
	var id string
	if node.Spec.ProviderID != "" {
		parsed, err := parseProviderID(node.Spec.ProviderID)
		if err != nil {
			return nil, err
		}
		id = parsed
		if c.instances[id] == nil {
			if c.deadIDs[id] || !*c.cfg.AutoDiscover || c.byName[node.Name] != "" {
				return nil, nil
			}
			c.discover(id, node)
		}
	} else {
		id = c.byName[node.Name]
		if id == "" {
			if c.deadNames[node.Name] || !*c.cfg.AutoDiscover {
				return nil, nil
			}
			id = node.Name
			c.discover(id, node)
		}
	}
	inst := c.instances[id]
	if inst != nil && inst.auto && len(node.Status.Addresses) > 0 {
		inst.addresses = c.discoveredAddresses(node.Status.Addresses)
	}
	return inst, nil
}

func (c *cloud) discover(id string, node *v1.Node) {
	c.instances[id] = &instance{
		name: node.Name, id: id, instanceType: c.cfg.DefaultInstanceType, zone: c.cfg.autoZone(node.Name),
		running: true, auto: true, addresses: c.discoveredAddresses(node.Status.Addresses),
	}
	c.byName[node.Name] = id
}

// discoveredAddresses are the kubelet's and, with discoveredExternalIPs, 198.18.<c>.<d> for an InternalIP
// a.b.c.d when the kubelet reports no ExternalIP.
func (c *cloud) discoveredAddresses(kubelet []v1.NodeAddress) []v1.NodeAddress {
	out := append([]v1.NodeAddress(nil), kubelet...)
	if !c.cfg.DiscoveredExternalIPs {
		return out
	}
	for _, a := range kubelet {
		if a.Type == v1.NodeExternalIP {
			return out
		}
	}
	for _, a := range kubelet {
		if ip := net.ParseIP(a.Address).To4(); a.Type == v1.NodeInternalIP && ip != nil {
			return append(out, v1.NodeAddress{Type: v1.NodeExternalIP, Address: fmt.Sprintf("198.18.%d.%d", ip[2], ip[3])})
		}
	}
	return out
}

func (c *cloud) InstanceExists(_ context.Context, node *v1.Node) (bool, error) {
	if err := c.call("instance_exists"); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.resolve(node)
	return inst != nil, err
}

func (c *cloud) InstanceShutdown(_ context.Context, node *v1.Node) (bool, error) {
	if err := c.call("instance_shutdown"); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.resolve(node)
	if err != nil {
		return false, err
	}
	if inst == nil {
		return false, cloudprovider.InstanceNotFound
	}
	return !inst.running, nil
}

func (c *cloud) InstanceMetadata(_ context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := c.call("instance_metadata"); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.resolve(node)
	if err != nil {
		return nil, err
	}
	if inst == nil {
		return nil, cloudprovider.InstanceNotFound
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:       providerName + "://" + inst.id,
		InstanceType:     inst.instanceType,
		NodeAddresses:    append([]v1.NodeAddress(nil), inst.addresses...),
		Zone:             inst.zone,
		Region:           c.cfg.Region,
		AdditionalLabels: inst.labels,
	}, nil
}

func (c *cloud) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	if err := c.call("get_load_balancer"); err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lb := c.lbs[c.GetLoadBalancerName(ctx, clusterName, service)]
	if lb == nil {
		return nil, false, nil
	}
	return lbStatus(lb.IP), true, nil
}

// EnsureLoadBalancer gives each load balancer the lowest free address of loadBalancerCIDR (or the Service's
// spec.loadBalancerIP), as the Rust fake does.
func (c *cloud) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := c.call("ensure_load_balancer"); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	name := c.GetLoadBalancerName(ctx, clusterName, service)
	lb := c.lbs[name]
	if lb == nil {
		lb = &loadBalancer{Name: name}
	}
	if want := net.ParseIP(service.Spec.LoadBalancerIP); want != nil {
		lb.IP = want.String()
	} else if lb.IP == "" {
		ip, err := c.freeAddress()
		if err != nil {
			return nil, err
		}
		lb.IP = ip.String()
	}
	lb.Cluster, lb.Service, lb.ServiceUID = clusterName, service.Namespace+"/"+service.Name, string(service.UID)
	lb.Ports = lb.Ports[:0]
	for _, p := range service.Spec.Ports {
		port := lbPort{Protocol: string(p.Protocol), Port: p.Port}
		if p.Name != "" {
			port.Name = &p.Name
		}
		if p.NodePort != 0 {
			port.NodePort = &p.NodePort
		}
		lb.Ports = append(lb.Ports, port)
	}
	lb.Nodes = nodeNames(nodes)
	lb.EnsureCount++
	c.lbs[name] = lb
	return lbStatus(lb.IP), nil
}

func (c *cloud) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	if err := c.call("update_load_balancer"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	name := c.GetLoadBalancerName(ctx, clusterName, service)
	lb := c.lbs[name]
	if lb == nil {
		return fmt.Errorf("load balancer %s of service %s/%s does not exist", name, service.Namespace, service.Name)
	}
	lb.Nodes = nodeNames(nodes)
	lb.UpdateCount++
	return nil
}

func (c *cloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	if err := c.call("ensure_load_balancer_deleted"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.lbs, c.GetLoadBalancerName(ctx, clusterName, service))
	return nil
}

// loadBalancers is a copy of every load balancer, by name.
func (c *cloud) loadBalancers() []loadBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]loadBalancer, 0, len(c.lbs))
	for _, lb := range c.lbs {
		out = append(out, *lb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// routes is every route of upstream's fake route table.
func (c *cloud) routes() []route {
	c.Lock.Lock()
	defer c.Lock.Unlock()
	out := []route{}
	for _, r := range c.RouteMap {
		out = append(out, route{
			Name: r.Route.Name, Cluster: r.ClusterName, TargetNode: string(r.Route.TargetNode),
			DestinationCIDR: r.Route.DestinationCIDR, TargetNodeAddresses: r.Route.TargetNodeAddresses,
			Blackhole: r.Route.Blackhole,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func nodeNames(nodes []*v1.Node) []string {
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names
}

func (c *cloud) freeAddress() (net.IP, error) {
	_, network, _ := net.ParseCIDR(c.cfg.LoadBalancerCIDR)
	base := network.IP.To4()
	if base == nil {
		return nil, fmt.Errorf("loadBalancerCIDR %s: this peer allocates IPv4 addresses only", c.cfg.LoadBalancerCIDR)
	}
	ones, bits := network.Mask.Size()
	first, size := binary.BigEndian.Uint32(base), uint32(1)<<(bits-ones)
	used := map[string]bool{}
	for _, lb := range c.lbs {
		used[lb.IP] = true
	}
	for offset := uint32(1); offset+1 < size; offset++ {
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, first+offset)
		if !used[ip.String()] {
			return ip, nil
		}
	}
	return nil, fmt.Errorf("the load-balancer pool %s is exhausted", c.cfg.LoadBalancerCIDR)
}

func lbStatus(ip string) *v1.LoadBalancerStatus {
	vip := v1.LoadBalancerIPModeVIP
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip, IPMode: &vip}}}
}

// GetLabelsForVolume labels the volumes of the configured CSI driver with a zone chosen like the Rust
// fake's (the volume's "zone" attribute when it names a zone, else a hash of the volume handle).
func (c *cloud) GetLabelsForVolume(_ context.Context, pv *v1.PersistentVolume) (map[string]string, error) {
	if err := c.call("get_labels_for_volume"); err != nil {
		return nil, err
	}
	csi := pv.Spec.CSI
	if csi == nil || csi.Driver != c.cfg.CSIDriver {
		return nil, nil
	}
	zone := c.cfg.autoZone(csi.VolumeHandle)
	for _, z := range c.cfg.Zones {
		if z == csi.VolumeAttributes["zone"] {
			zone = z
		}
	}
	return map[string]string{
		v1.LabelTopologyZone: zone, v1.LabelFailureDomainBetaZone: zone,
		v1.LabelTopologyRegion: c.cfg.Region, v1.LabelFailureDomainBetaRegion: c.cfg.Region,
	}, nil
}
