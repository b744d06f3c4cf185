package main

// up, down and serve: the life cycle of one control plane, kept in one directory.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The Service cluster IP range, the same as the in-memory test API server's.
const serviceClusterIPRange = "10.96.0.0/12"

// layout is where one cluster keeps its files.
type layout struct {
	dir string
}

func (l layout) path(name string) string      { return filepath.Join(l.dir, name) }
func (l layout) pidFile() string              { return l.path("realkube.pid") }
func (l layout) readyFile() string            { return l.path("ready") }
func (l layout) adminKubeconfig() string      { return l.path("admin.kubeconfig") }
func (l layout) controllerKubeconfig() string { return l.path("controller-manager.kubeconfig") }
func (l layout) auditLog() string             { return l.path("audit.log") }
func (l layout) auditPolicy() string          { return l.path("audit-policy.yaml") }
func (l layout) logFile(component string) string {
	return l.path(component + ".log")
}

// auditPolicy logs every request at the Metadata level, without the RequestReceived stage.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
`

// newFlagSet is a flag set of a subcommand that returns its errors.
func newFlagSet(name string) *flag.FlagSet {
	return flag.NewFlagSet(name, flag.ContinueOnError)
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// serveOptions are the flags shared by up and serve.
type serveOptions struct {
	dir             string
	manifests       stringList
	serviceAccounts stringList
	extraAPIServer  stringList
	// nodes is how many real nodes to start (see nodes.go); clusterCIDR their pods' range.
	nodes       int
	clusterCIDR string
}

func (o *serveOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "", "directory of the cluster's files (PKI, kubeconfigs, logs, etcd data)")
	fs.Var(&o.manifests, "manifest", "a manifest to apply once the cluster is ready (repeatable)")
	fs.Var(&o.serviceAccounts, "service-account", "NAMESPACE/NAME of a ServiceAccount to write a kubeconfig for, as NAME.kubeconfig (repeatable)")
	fs.Var(&o.extraAPIServer, "apiserver-arg", "an extra kube-apiserver flag, e.g. --v=4 (repeatable)")
	fs.IntVar(&o.nodes, "nodes", 0, "real nodes to start (kubelet, containerd; one kube-proxy): needs root, restored on down")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", defaultClusterCIDR, "with --nodes: the pods' range, a /24 per node")
}

func (o *serveOptions) args() []string {
	args := []string{"--dir", o.dir}
	for _, m := range o.manifests {
		args = append(args, "--manifest", m)
	}
	for _, sa := range o.serviceAccounts {
		args = append(args, "--service-account", sa)
	}
	for _, a := range o.extraAPIServer {
		args = append(args, "--apiserver-arg", a)
	}
	return append(args, "--nodes", strconv.Itoa(o.nodes), "--cluster-cidr", o.clusterCIDR)
}

func parseServeOptions(name string, args []string) (*serveOptions, error) {
	opts := &serveOptions{}
	fs := newFlagSet(name)
	opts.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if opts.dir == "" {
		return nil, errors.New("--dir is required")
	}
	if opts.nodes < 0 || opts.nodes > 9 {
		return nil, errors.New("--nodes takes 0 to 9")
	}
	dir, err := filepath.Abs(opts.dir)
	if err != nil {
		return nil, err
	}
	opts.dir = dir
	for i, m := range opts.manifests {
		abs, err := filepath.Abs(m)
		if err != nil {
			return nil, err
		}
		opts.manifests[i] = abs
	}
	for _, sa := range opts.serviceAccounts {
		if _, _, err := splitServiceAccount(sa); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

// runUp starts the supervisor in the background and waits until the cluster is ready.
func runUp(args []string) error {
	opts, err := parseServeOptions("up", args)
	if err != nil {
		return err
	}
	l := layout{opts.dir}
	if pid, alive := runningPID(l); alive {
		return fmt.Errorf("a cluster already runs in %s (pid %d); stop it with: realkube down --dir %s", l.dir, pid, l.dir)
	}
	// Every run starts from an empty directory: new PKI, new etcd data, new logs. Only a directory an earlier
	// run made (or an empty one) is ever emptied.
	if err := ensureOwnDirectory(l); err != nil {
		return err
	}
	if err := os.RemoveAll(l.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.Create(l.logFile("realkube"))
	if err != nil {
		return err
	}
	defer log.Close()
	supervisor := exec.Command(self, append([]string{"serve"}, opts.args()...)...)
	supervisor.Stdout, supervisor.Stderr = log, log
	supervisor.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := supervisor.Start(); err != nil {
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	if err := os.WriteFile(l.pidFile(), []byte(strconv.Itoa(supervisor.Process.Pid)), 0o644); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- supervisor.Wait() }()

	started := time.Now()
	deadline := time.After(10 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the control plane stopped while starting (%v); logs in %s:\n%s", err, l.dir, tailLogs(l))
		case <-deadline:
			_ = supervisor.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("the cluster was not ready within 10 minutes; logs in %s:\n%s", l.dir, tailLogs(l))
		case <-tick.C:
			if _, err := os.Stat(l.readyFile()); err == nil {
				fmt.Printf("realkube: ready in %.1fs (pid %d)\n", time.Since(started).Seconds(), supervisor.Process.Pid)
				fmt.Printf("  admin kubeconfig: %s\n", l.adminKubeconfig())
				for _, node := range nodeSpecs(l, opts.nodes) {
					fmt.Printf("  node %s: %s (kubelet log %s)\n", node.name, node.ip, l.logFile("kubelet-"+node.name))
				}
				for _, sa := range opts.serviceAccounts {
					_, name, _ := splitServiceAccount(sa)
					fmt.Printf("  %s kubeconfig: %s\n", sa, l.path(name+".kubeconfig"))
				}
				fmt.Printf("  logs: %s/*.log; stop with: realkube down --dir %s\n", l.dir, l.dir)
				return nil
			}
		}
	}
}

// ensureOwnDirectory refuses a directory that exists, is not empty and holds no realkube log.
func ensureOwnDirectory(l layout) error {
	entries, err := os.ReadDir(l.dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(l.logFile("realkube")); err != nil {
		return fmt.Errorf("%s is not empty and was not made by realkube; choose another --dir", l.dir)
	}
	return nil
}

// runDown stops the supervisor of a directory, which stops its components.
func runDown(args []string) error {
	fs := newFlagSet("down")
	dir := fs.String("dir", "", "directory given to up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	l := layout{*dir}
	if pid, alive := runningPID(l); alive {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		// Nodes take longer: their pods stop, and the host is restored.
		for i := 0; i < 1200 && processAlive(pid); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if processAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		fmt.Printf("realkube: stopped the cluster in %s\n", l.dir)
	} else {
		fmt.Printf("realkube: no cluster runs in %s\n", l.dir)
	}
	_ = os.Remove(l.pidFile())
	releaseStaleNodesLock()
	// The supervisor restores the host when its nodes stop; if it could not (killed, or the machine
	// restarted under it), do it here. Either way, what still differs from the capture is an error.
	if errs := restoreFromCapture(l); len(errs) > 0 {
		for _, err := range errs {
			fmt.Printf("realkube: the host is not as it was: %v\n", err)
		}
		return fmt.Errorf("%d differences from the host as it was before the nodes started", len(errs))
	}
	return nil
}

func runningPID(l layout) (int, bool) {
	data, err := os.ReadFile(l.pidFile())
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, processAlive(pid)
}

func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie (exited, not yet reaped) counts as gone.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat))
	return len(fields) < 3 || fields[2] != "Z"
}

// tailLogs returns the last lines of every component's log.
func tailLogs(l layout) string {
	var b strings.Builder
	components := []string{"realkube", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"}
	entries, _ := filepath.Glob(l.path("kubelet-*.log"))
	for _, e := range entries {
		components = append(components, strings.TrimSuffix(filepath.Base(e), ".log"))
	}
	for _, c := range components {
		data, err := os.ReadFile(l.logFile(c))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", l.logFile(c), strings.Join(lines, "\n"))
	}
	return b.String()
}

// component is a running child process.
type component struct {
	name string
	cmd  *exec.Cmd
	// done is closed when the process has exited; err is then its exit.
	done chan struct{}
	err  error
	// stopping marks an exit that was asked for (stop), which is not a failure.
	stopping atomic.Bool
}

// unexpectedExits receives one line per component that exited without being stopped: the supervisor ends
// on the first (see waitForEnd).
var unexpectedExits = make(chan string, 64)

// startComponent runs this binary as one component, logging to its own file. The child dies with the
// supervisor (a kill -9 of the supervisor leaves nothing behind).
func startComponent(l layout, name string, args ...string) (*component, error) {
	return startProcess(l, name, "", append([]string{name}, args...)...)
}

// startProcess runs binary (this binary when empty) with args as the process logging to NAME.log (appended
// to: a component started again keeps the log of its earlier runs).
func startProcess(l layout, name, binary string, args ...string) (*component, error) {
	if binary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		binary = self
	}
	log, err := os.OpenFile(l.logFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &component{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
		log.Close()
		if !c.stopping.Load() {
			select {
			case unexpectedExits <- fmt.Sprintf("%s exited: %v", name, c.err):
			default:
			}
		}
	}()
	return c, nil
}

// exited reports whether the process has exited, and how.
func (c *component) exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// stop asks the component to stop and waits (SIGKILL after 20 s).
func (c *component) stop() { c.stopWithin(20 * time.Second) }

// stopWithin sends SIGTERM and waits, sending SIGKILL after grace.
func (c *component) stopWithin(grace time.Duration) {
	c.stopping.Store(true)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

// runServe runs the control plane in the foreground until SIGTERM/SIGINT or until a component fails. The
// control endpoint (control.go) restarts components and injects faults meanwhile.
func runServe(args []string) error {
	opts, err := parseServeOptions("serve", args)
	if err != nil {
		return err
	}
	l := layout{opts.dir}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	pki, err := generatePKI(l.path("pki"))
	if err != nil {
		return fmt.Errorf("generating the PKI: %w", err)
	}
	ports := map[string]int{}
	for _, name := range []string{"etcd-client", "etcd-peer", "apiserver"} {
		if ports[name], err = freePort(); err != nil {
			return err
		}
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", ports["apiserver"])
	if err := writeCertKubeconfig(l.adminKubeconfig(), server, pki.caCert, pki.adminCert, pki.adminKey, "kubernetes-admin"); err != nil {
		return err
	}
	if err := writeCertKubeconfig(l.controllerKubeconfig(), server, pki.caCert, pki.controllerCert, pki.controllerKey, "system:kube-controller-manager"); err != nil {
		return err
	}
	p := &plane{l: l, server: server, etcdURL: fmt.Sprintf("http://127.0.0.1:%d", ports["etcd-client"]),
		args: map[string][]string{}, proxies: map[string]*faultProxy{}}
	defer p.stop()

	p.args["etcd"] = []string{
		"--data-dir", l.path("etcd"),
		"--client-port", strconv.Itoa(ports["etcd-client"]),
		"--peer-port", strconv.Itoa(ports["etcd-peer"]),
	}
	if err := p.start("etcd"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, p.running(), p.etcdURL+"/health", nil, 60*time.Second); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	fmt.Println("etcd is ready")

	if err := os.WriteFile(l.auditPolicy(), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	p.args["kube-apiserver"] = apiServerArgs(l, pki, ports, opts)
	if err := p.start("kube-apiserver"); err != nil {
		return err
	}
	if p.admin, err = newAdminClients(l.adminKubeconfig()); err != nil {
		return err
	}
	if err := p.waitAPIServer(ctx, 3*time.Minute); err != nil {
		return err
	}
	fmt.Println("kube-apiserver is ready")

	p.args["kube-controller-manager"] = controllerManagerArgs(l, pki, opts)
	if err := p.start("kube-controller-manager"); err != nil {
		return err
	}
	if err := bootstrap(ctx, l, p.admin, opts, p.running()); err != nil {
		return err
	}
	if opts.nodes > 0 {
		nodes, err := startNodes(ctx, l, opts, pki, server, p.admin)
		if nodes != nil {
			defer nodes.stop()
		}
		if err != nil {
			return err
		}
		p.nodes = nodes
		fmt.Printf("%d nodes are Ready\n", opts.nodes)
	}
	if err := p.serveControl(); err != nil {
		return err
	}
	if err := os.WriteFile(l.readyFile(), []byte(server+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Println("the control plane is ready")

	return waitForEnd(ctx)
}

// waitForEnd blocks until a signal (a clean stop) or a component's exit that nobody asked for (an error).
func waitForEnd(ctx context.Context) error {
	select {
	case <-ctx.Done():
		fmt.Println("stopping")
		return nil
	case msg := <-unexpectedExits:
		return errors.New(msg)
	}
}

func apiServerArgs(l layout, pki pkiFiles, ports map[string]int, opts *serveOptions) []string {
	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", ports["etcd-client"]),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports["apiserver"]),
		"--cert-dir=" + l.path("pki"),
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.serviceAccountPub,
		"--service-account-signing-key-file=" + pki.serviceAccountKey,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		"--allow-privileged=true",
		// Every request, once, at the Metadata level: who asked for what, with which User-Agent, and the answer.
		"--audit-policy-file=" + l.auditPolicy(),
		"--audit-log-path=" + l.auditLog(),
		"--audit-log-format=json",
		// One file for the whole run (0 would mean the rotation library's default of 100 MB): the tests and
		// the benchmarks read the requests from it by offset.
		"--audit-log-maxsize=1048576",
		"--profiling=false",
		"--v=1",
	}
	if opts.nodes > 0 {
		// logs and exec reach the kubelets by their addresses (the node names resolve nowhere), as the
		// admin (the kubelets authorize the API server's requests by webhook).
		args = append(args, "--kubelet-preferred-address-types=InternalIP,Hostname",
			"--kubelet-client-certificate="+pki.adminCert, "--kubelet-client-key="+pki.adminKey)
	}
	return append(args, opts.extraAPIServer...)
}

func controllerManagerArgs(l layout, pki pkiFiles, opts *serveOptions) []string {
	// Only what a cloud-controller-manager's tests need of a control plane; the cloud controllers stay off.
	controllers := "namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller"
	var nodes []string
	if opts.nodes > 0 {
		// Real nodes need Services' EndpointSlices, the root CA in every namespace, the not-ready taints,
		// and pod CIDRs (which the CCM's route controller routes).
		controllers += ",endpointslice-controller,endpointslice-mirroring-controller,root-ca-certificate-publisher-controller," +
			"node-lifecycle-controller,node-ipam-controller"
		nodes = []string{
			// A node whose kubelet stopped is NotReady within seconds (the kubelets renew their leases
			// every 3 s), so lifecycle cases do not wait upstream's 40 s.
			"--node-monitor-period=1s",
			"--node-monitor-grace-period=15s",
			"--allocate-node-cidrs=true",
			"--cluster-cidr=" + opts.clusterCIDR,
			"--node-cidr-mask-size=24",
			"--service-cluster-ip-range=" + serviceClusterIPRange,
		}
	}
	args := []string{
		"--kubeconfig=" + l.controllerKubeconfig(),
		"--authentication-kubeconfig=" + l.controllerKubeconfig(),
		"--authorization-kubeconfig=" + l.controllerKubeconfig(),
		"--controllers=" + controllers,
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pki.serviceAccountKey,
		"--root-ca-file=" + pki.caCert,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--profiling=false",
		"--v=1",
	}
	return append(args, nodes...)
}
