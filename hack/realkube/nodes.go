package main

// Real nodes beside the control plane (`up --nodes N`): each node is a kubelet (`--cloud-provider=external`,
// so it registers with the uninitialized taint and waits for a cloud-controller-manager) with a containerd
// of its own, an address of its own on lo (10.99.0.N), a client certificate of its own (system:node:NAME, so
// the Node authorizer and NodeRestriction apply) and a cgroup of its own (/NAME in every hierarchy). One
// kube-proxy (iptables mode) serves them all: they share the host's network. A kube-scheduler places pods.
//
// Node N's pod network is the pod CIDR node-ipam gives it: the kubelet hands it to containerd, which writes
// the node's CNI configuration (a bridge and host-local addresses) from a template. The nodes start one after
// the other, so node-1 gets the first CIDR.
//
// It needs root, changes the host (sysctls, nftables, links, addresses on lo, mounts, cgroups) and puts
// every change back when it stops (see host.go). One cluster with nodes at a time per host.
//
// The control endpoint (control.go; `realkube node`) stops and starts a node's kubelet: the tests' stand-in
// for a machine that went down.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// nodeIPPrefix is the prefix of the nodes' addresses on lo: node N is 10.99.0.N.
	nodeIPPrefix = "10.99.0."
	// defaultClusterCIDR is the pods' range node-ipam divides into /24 per node.
	defaultClusterCIDR = "10.244.0.0/16"
	// nodesLock keeps a second cluster with nodes off the host.
	nodesLock = "/run/realkube-nodes.lock"
	// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
	cniBinDir = "/usr/lib/cni"
)

// nodeSpec is one node's name, address and directories.
type nodeSpec struct {
	index int
	name  string
	ip    string
	// dir holds its persistent files (containerd's root, the kubelet's root, certificates, configs).
	dir string
	// run holds its sockets and runtime state (short paths: socket names are limited to 108 bytes).
	run string
}

func (n nodeSpec) path(name string) string    { return filepath.Join(n.dir, name) }
func (n nodeSpec) runPath(name string) string { return filepath.Join(n.run, name) }
func (n nodeSpec) socket() string             { return n.runPath("containerd.sock") }

// runRoot is the cluster's directory under /run.
func runRoot(l layout) string {
	dir, err := filepath.Abs(l.dir)
	if err != nil {
		dir = l.dir
	}
	sum := sha256.Sum256([]byte(dir))
	return "/run/realkube-" + hex.EncodeToString(sum[:4])
}

func nodeSpecs(l layout, count int) []nodeSpec {
	specs := make([]nodeSpec, count)
	for i := range specs {
		name := fmt.Sprintf("node-%d", i+1)
		specs[i] = nodeSpec{
			index: i + 1,
			name:  name,
			ip:    nodeIPPrefix + strconv.Itoa(i+1),
			dir:   filepath.Join(l.dir, "nodes", name),
			run:   filepath.Join(runRoot(l), name),
		}
	}
	return specs
}

// nodeSet is the running nodes of one cluster.
type nodeSet struct {
	l       layout
	opts    *serveOptions
	pki     pkiFiles
	server  string
	admin   *adminClients
	specs   []nodeSpec
	mu      sync.Mutex
	kubelet map[string]*component
	others  []*component
}

// startNodes prepares the host and starts the nodes, kube-proxy and kube-scheduler; it returns once every
// node is registered and Ready. On an error, what was started is stopped and the host restored.
func startNodes(ctx context.Context, l layout, opts *serveOptions, pki pkiFiles, server string, admin *adminClients) (set *nodeSet, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("--nodes needs root: the nodes' kubelets and containerds change the host (they are undone on stop)")
	}
	for _, tool := range []string{"containerd", "runc", "ctr", "nft", "ip", "iptables", "conntrack", filepath.Join(cniBinDir, "bridge")} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("--nodes needs %s (Debian: make real-nodes-deps): %w", tool, err)
		}
	}
	if err := takeNodesLock(); err != nil {
		return nil, err
	}
	before, err := captureHost()
	if err != nil {
		releaseNodesLock()
		return nil, err
	}
	if err := before.save(l.path("host-state.json")); err != nil {
		releaseNodesLock()
		return nil, err
	}
	set = &nodeSet{l: l, opts: opts, pki: pki, server: server, admin: admin,
		specs: nodeSpecs(l, opts.nodes), kubelet: map[string]*component{}}
	defer func() {
		if err != nil {
			set.stop()
		}
	}()
	if err := writeImages(l.path("images.tar")); err != nil {
		return set, err
	}
	ca, err := loadKeyPair(pki.caCert, pki.caKey)
	if err != nil {
		return set, err
	}
	scheduler, err := set.identity(ca, "kube-scheduler", "system:kube-scheduler", nil)
	if err != nil {
		return set, err
	}
	if err := set.startOther("kube-scheduler", "", "kube-scheduler",
		"--kubeconfig="+scheduler, "--authentication-kubeconfig="+scheduler, "--authorization-kubeconfig="+scheduler,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"); err != nil {
		return set, err
	}
	for _, node := range set.specs {
		if err := set.startNode(ctx, ca, node); err != nil {
			return set, fmt.Errorf("node %s: %w", node.name, err)
		}
	}
	if err := set.startProxy(ca); err != nil {
		return set, err
	}
	if err := set.waitReady(ctx); err != nil {
		return set, err
	}
	return set, nil
}

// identity writes a client certificate and kubeconfig for user (of groups) and returns the kubeconfig.
func (s *nodeSet) identity(ca *keyPair, name, user string, groups []string) (string, error) {
	pair, err := newCertificate(ca, certificateSpec{commonName: user, organizations: groups})
	if err != nil {
		return "", err
	}
	certPath := filepath.Join(s.l.path("pki"), name+".crt")
	keyPath := filepath.Join(s.l.path("pki"), name+".key")
	if err := os.WriteFile(certPath, pair.certPEM, 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(keyPath, pair.keyPEM, 0o600); err != nil {
		return "", err
	}
	kubeconfig := s.l.path(name + ".kubeconfig")
	return kubeconfig, writeCertKubeconfig(kubeconfig, s.server, s.pki.caCert, certPath, keyPath, user)
}

// startOther starts a component that runs as long as the nodes (kube-scheduler, kube-proxy, containerd).
func (s *nodeSet) startOther(name, binary string, args ...string) error {
	c, err := startProcess(s.l, name, binary, args...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.others = append(s.others, c)
	s.mu.Unlock()
	return nil
}

// startNode sets up one node and starts its containerd and kubelet; it returns once the Node is registered.
func (s *nodeSet) startNode(ctx context.Context, ca *keyPair, node nodeSpec) error {
	for _, dir := range []string{node.dir, node.run, node.path("cni"), node.path("kubelet")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if out, err := exec.Command("ip", "addr", "add", node.ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("adding %s to lo: %v: %s", node.ip, err, strings.TrimSpace(string(out)))
	}
	if err := makeNodeCgroup(node.name); err != nil {
		return err
	}
	if err := s.startContainerd(ctx, node); err != nil {
		return err
	}
	kubeconfig, err := s.identity(ca, node.name, "system:node:"+node.name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	if err := os.WriteFile(node.path("kubelet.yaml"), []byte(kubeletConfig(node, s.pki.caCert)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(node.path("kubelet.kubeconfig"), mustRead(kubeconfig), 0o600); err != nil {
		return err
	}
	if err := s.startKubelet(node); err != nil {
		return err
	}
	return poll(ctx, s.running(), "node "+node.name+" registered", 2*time.Minute, func() (bool, error) {
		_, err := s.admin.clientset.CoreV1().Nodes().Get(ctx, node.name, metav1.GetOptions{})
		return err == nil, nil
	})
}

// running is every process of the nodes, for the wait loops' early failure.
func (s *nodeSet) running() []*component {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]*component(nil), s.others...)
	for _, k := range s.kubelet {
		out = append(out, k)
	}
	return out
}

func mustRead(path string) []byte {
	data, _ := os.ReadFile(path)
	return data
}

// makeNodeCgroup creates /NAME in every hierarchy (cpuset's needs its cpus and mems set first).
func makeNodeCgroup(name string) error {
	for _, root := range cgroupHierarchies() {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			if parent, err := os.ReadFile(filepath.Join(root, file)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, file), parent, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
				}
			}
		}
	}
	return nil
}

// startContainerd starts the node's containerd and imports the images into it.
func (s *nodeSet) startContainerd(ctx context.Context, node nodeSpec) error {
	if err := os.WriteFile(node.path("cni-template.json"), []byte(cniTemplate(node)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(node.path("containerd.toml"), []byte(containerdConfig(node)), 0o644); err != nil {
		return err
	}
	if err := s.startOther("containerd-"+node.name, "containerd", "--config", node.path("containerd.toml")); err != nil {
		return err
	}
	err := poll(ctx, s.running(), "containerd of "+node.name, time.Minute, func() (bool, error) {
		return exec.Command("ctr", "--address", node.socket(), "version").Run() == nil, nil
	})
	if err != nil {
		return err
	}
	out, err := exec.Command("ctr", "--address", node.socket(), "-n", "k8s.io", "images", "import", s.l.path("images.tar")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing the images: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startKubelet starts (or starts again) the node's kubelet.
func (s *nodeSet) startKubelet(node nodeSpec) error {
	c, err := startProcess(s.l, "kubelet-"+node.name, "",
		"kubelet",
		"--config="+node.path("kubelet.yaml"),
		"--kubeconfig="+node.path("kubelet.kubeconfig"),
		"--root-dir="+node.path("kubelet"),
		"--hostname-override="+node.name,
		"--node-ip="+node.ip,
		"--cloud-provider=external",
		"--v=1",
	)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.kubelet[node.name] = c
	s.mu.Unlock()
	return nil
}

// stopKubelet stops the node's kubelet (its pods keep running, as on a machine whose kubelet died).
func (s *nodeSet) stopKubelet(name string) bool {
	s.mu.Lock()
	c := s.kubelet[name]
	delete(s.kubelet, name)
	s.mu.Unlock()
	if c == nil {
		return false
	}
	c.stop()
	return true
}

// startProxy starts the one kube-proxy of the nodes.
func (s *nodeSet) startProxy(ca *keyPair) error {
	kubeconfig, err := s.identity(ca, "kube-proxy", "system:kube-proxy", nil)
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 0.0.0.0:10256
`, kubeconfig, s.specs[0].name, s.opts.clusterCIDR)
	path := s.l.path("kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	return s.startOther("kube-proxy", "", "kube-proxy", "--config="+path, "--v=1")
}

// waitReady waits until every node is Ready.
func (s *nodeSet) waitReady(ctx context.Context) error {
	return poll(ctx, s.running(), "every node Ready", 2*time.Minute, func() (bool, error) {
		nodes, err := s.admin.clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= len(s.specs), nil
	})
}

// stop stops the nodes and restores the host; it logs what could not be restored.
func (s *nodeSet) stop() {
	for _, node := range s.specs {
		s.stopKubelet(node.name)
	}
	s.mu.Lock()
	others := s.others
	s.others = nil
	s.mu.Unlock()
	for i := len(others) - 1; i >= 0; i-- {
		others[i].stop()
	}
	for _, node := range s.specs {
		killShims(node.socket())
	}
	if errs := restoreFromCapture(s.l); len(errs) > 0 {
		for _, err := range errs {
			fmt.Printf("restoring the host: %v\n", err)
		}
	}
	releaseNodesLock()
}

// restoreFromCapture restores the host from DIR/host-state.json and reports what still differs.
func restoreFromCapture(l layout) []error {
	before, err := loadHostState(l.path("host-state.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return []error{err}
	}
	errs := restoreHost(before)
	_ = os.RemoveAll(runRoot(l))
	after, err := captureHost()
	if err != nil {
		return append(errs, err)
	}
	for _, d := range hostDifferences(before, after) {
		errs = append(errs, errors.New(d))
	}
	if len(errs) == 0 {
		_ = os.Remove(l.path("host-state.json"))
		fmt.Println("the host is as it was before the nodes started")
	}
	return errs
}

// killShims kills the containerd shims (and so their containers) of a node's containerd.
func killShims(socket string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.Contains(args[0], "containerd-shim") && strings.Contains(string(cmdline), socket) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func takeNodesLock() error {
	if pid, alive := nodesLockHolder(); alive {
		return fmt.Errorf("another realkube with nodes runs (pid %d, %s): one per host", pid, nodesLock)
	}
	return os.WriteFile(nodesLock, []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// nodesLockHolder is the process named in the lock, and whether it runs.
func nodesLockHolder() (int, bool) {
	data, err := os.ReadFile(nodesLock)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid, err == nil && processAlive(pid)
}

func releaseNodesLock() { _ = os.Remove(nodesLock) }

// releaseStaleNodesLock removes the lock of a supervisor that died without releasing it.
func releaseStaleNodesLock() {
	if _, alive := nodesLockHolder(); !alive {
		releaseNodesLock()
	}
}

// kubeletConfig is the node's KubeletConfiguration: cgroupfs under /NAME, listening on the node's address,
// webhook authentication and authorization, no swap or cgroup v1 refusal, eviction thresholds a test host
// meets, and oomScoreAdj 0 (nothing here may lower it).
func kubeletConfig(node nodeSpec, caCert string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: %[1]s
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[2]s
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: /%[3]s
containerRuntimeEndpoint: unix://%[4]s
failSwapOn: false
failCgroupV1: false
oomScoreAdj: 0
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "10Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
serializeImagePulls: false
nodeLeaseDurationSeconds: 12
nodeStatusUpdateFrequency: 4s
nodeStatusReportFrequency: 1m
`, node.ip, caCert, node.name, node.socket())
}

// containerdConfig is the node's containerd: its own root, state, socket and runc root; the CRI plugin with
// the local pause image, oom_score_adj left alone, and the CNI configuration written from the template.
func containerdConfig(node nodeSpec) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    conf_template = %[9]q
`, node.path("containerd"), node.runPath("containerd"), node.socket(), node.path("opt"), pauseImage,
		node.runPath("runc"), cniBinDir, node.path("cni"), node.path("cni-template.json"))
}

// cniTemplate is the node's CNI configuration, with containerd filling in the node's pod CIDR: a bridge of
// its own (rk-brN), host-local addresses, masquerade, hairpin (a pod reaching itself through a Service),
// and port maps.
func cniTemplate(node nodeSpec) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "realkube-%[1]s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "rk-br%[2]d",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %[3]q,
        "ranges": [{{range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$range}}"}]{{end}}],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, node.name, node.index, node.runPath("ipam"))
}

// routes adds the nodes' part of the control endpoint (control.go): stop and start a kubelet, list nodes.
func (s *nodeSet) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /nodes/{name}/kubelet/{action}", func(w http.ResponseWriter, r *http.Request) {
		node, ok := s.spec(r.PathValue("name"))
		if !ok {
			http.Error(w, "no such node", http.StatusNotFound)
			return
		}
		switch r.PathValue("action") {
		case "stop":
			s.stopKubelet(node.name)
		case "start":
			s.mu.Lock()
			_, running := s.kubelet[node.name]
			s.mu.Unlock()
			if !running {
				if err := s.startKubelet(node); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
			}
		default:
			http.Error(w, "actions: stop, start", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, _ *http.Request) {
		type nodeInfo struct {
			Name           string `json:"name"`
			IP             string `json:"ip"`
			KubeletRunning bool   `json:"kubeletRunning"`
		}
		var out []nodeInfo
		s.mu.Lock()
		for _, n := range s.specs {
			_, running := s.kubelet[n.name]
			out = append(out, nodeInfo{n.name, n.ip, running})
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

func (s *nodeSet) spec(name string) (nodeSpec, bool) {
	for _, n := range s.specs {
		if n.name == name {
			return n, true
		}
	}
	return nodeSpec{}, false
}

// runNode is `realkube node --dir DIR stop-kubelet|start-kubelet NAME`.
func runNode(args []string) error {
	fs := newFlagSet("node")
	dir := fs.String("dir", "", "directory given to up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if *dir == "" || len(rest) != 2 {
		return errors.New("usage: realkube node --dir DIR stop-kubelet|start-kubelet NAME")
	}
	action := strings.TrimSuffix(rest[0], "-kubelet")
	_, err := controlRequest(*dir, http.MethodPost, fmt.Sprintf("/nodes/%s/kubelet/%s", rest[1], action), nil)
	return err
}
