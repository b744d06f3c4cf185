package main

// The supervisor's control endpoint and the faults it injects: the reliability tests' handle on the control
// plane. It serves HTTP on loopback, its address in DIR/control.addr, for as long as the cluster runs:
//
//	POST /components/{etcd|kube-apiserver}/restart   stop (SIGTERM) and start again; answers once the API
//	                                                  server is ready, with the times of each step
//	POST /etcd/compact                                compact etcd's history to its current revision
//	POST /proxies/{name}                              a TCP fault proxy to the API server (faultproxy.go),
//	                                                  made once; answers its address, mode and counters
//	PUT  /proxies/{name}                              its mode: {"mode": "pass|blackhole|reset|cut-requests|
//	                                                  cut-responses", "latency": "2s"}
//
// and, with --nodes, the nodes' routes (nodes.go). `realkube fault` and `realkube node` are its command-line
// clients.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// plane is the running control plane: its restartable components, fault proxies and nodes.
type plane struct {
	l       layout
	server  string
	etcdURL string
	admin   *adminClients
	nodes   *nodeSet
	control *http.Server

	mu sync.Mutex
	// args of every component, by name, to start it again with the same flags.
	args map[string][]string
	// components in start order.
	components []*component
	proxies    map[string]*faultProxy
	// restarting serializes restarts.
	restarting sync.Mutex
}

// start starts the named component with its recorded flags.
func (p *plane) start(name string) error {
	c, err := startComponent(p.l, name, p.args[name]...)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, old := range p.components {
		if old.name == name {
			p.components[i] = c
			return nil
		}
	}
	p.components = append(p.components, c)
	return nil
}

// running is every component, for the wait loops' early failure.
func (p *plane) running() []*component {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*component(nil), p.components...)
}

func (p *plane) component(name string) (*component, bool) {
	for _, c := range p.running() {
		if c.name == name {
			return c, true
		}
	}
	return nil, false
}

// stop closes the control endpoint and the proxies, then stops the components in reverse order.
func (p *plane) stop() {
	if p.control != nil {
		_ = p.control.Close()
	}
	p.mu.Lock()
	proxies := p.proxies
	p.proxies = map[string]*faultProxy{}
	p.mu.Unlock()
	for _, proxy := range proxies {
		proxy.close()
	}
	running := p.running()
	for i := len(running) - 1; i >= 0; i-- {
		running[i].stop()
	}
}

// waitAPIServer waits until the API server answers /readyz.
func (p *plane) waitAPIServer(ctx context.Context, timeout time.Duration) error {
	if err := waitHTTP(ctx, p.running(), p.server+"/readyz", p.admin.http, timeout); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	return nil
}

// restartGrace is how long a restarted component may take to stop after SIGTERM before SIGKILL: a shortened
// termination grace period. kube-apiserver stops listening at once but waits for its long-running requests
// far longer.
const restartGrace = 5 * time.Second

// restartTimes are the steps of one restart, as seen by the supervisor.
type restartTimes struct {
	Component string    `json:"component"`
	Stopping  time.Time `json:"stopping"`
	Stopped   time.Time `json:"stopped"`
	Started   time.Time `json:"started"`
	// Ready is when the API server answered /readyz again (after an etcd restart too).
	Ready time.Time `json:"ready"`
}

// restart stops the component (SIGTERM, then SIGKILL after restartGrace, as an upgrade does), starts it again with the same flags and data,
// and waits until the API server is ready.
func (p *plane) restart(ctx context.Context, name string) (restartTimes, error) {
	p.restarting.Lock()
	defer p.restarting.Unlock()
	times := restartTimes{Component: name}
	if name != "etcd" && name != "kube-apiserver" {
		return times, fmt.Errorf("only etcd and kube-apiserver restart, not %q", name)
	}
	old, ok := p.component(name)
	if !ok {
		return times, fmt.Errorf("%s does not run", name)
	}
	times.Stopping = time.Now()
	old.stopWithin(restartGrace)
	times.Stopped = time.Now()
	if err := p.start(name); err != nil {
		return times, err
	}
	times.Started = time.Now()
	if name == "etcd" {
		if err := waitHTTP(ctx, p.running(), p.etcdURL+"/health", nil, time.Minute); err != nil {
			return times, fmt.Errorf("etcd: %w", err)
		}
	}
	if err := p.waitAPIServer(ctx, 3*time.Minute); err != nil {
		return times, err
	}
	times.Ready = time.Now()
	fmt.Printf("restarted %s: stopped in %s, ready %s after the start\n", name,
		times.Stopped.Sub(times.Stopping).Round(time.Millisecond), times.Ready.Sub(times.Started).Round(time.Millisecond))
	return times, nil
}

// compactEtcd compacts etcd's history to its current revision: every watch resuming from before it gets
// "required revision has been compacted" from etcd.
func (p *plane) compactEtcd(ctx context.Context) (int64, error) {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{p.etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	status, err := client.Get(ctx, "compact-revision-probe")
	if err != nil {
		return 0, fmt.Errorf("reading etcd's revision: %w", err)
	}
	revision := status.Header.Revision
	if _, err := client.Compact(ctx, revision, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("compacting etcd to revision %d: %w", revision, err)
	}
	fmt.Printf("compacted etcd to revision %d\n", revision)
	return revision, nil
}

// addProxy starts the named fault proxy; its connections to the API server come from its own loopback
// address (127.0.0.2, 127.0.0.3, ...), so the audit log tells its clients apart by source IP.
func (p *plane) addProxy(name string) (*faultProxy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if proxy, ok := p.proxies[name]; ok {
		return proxy, nil
	}
	if len(p.proxies) >= 200 {
		return nil, errors.New("at most 200 proxies")
	}
	source := net.IPv4(127, 0, 0, byte(2+len(p.proxies)))
	proxy, err := newFaultProxy(name, strings.TrimPrefix(p.server, "https://"), source)
	if err != nil {
		return nil, err
	}
	p.proxies[name] = proxy
	return proxy, nil
}

func (p *plane) proxy(name string) (*faultProxy, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	proxy, ok := p.proxies[name]
	return proxy, ok
}

// serveControl serves the control endpoint and writes its address to DIR/control.addr.
func (p *plane) serveControl() error {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /components/{name}/restart", func(w http.ResponseWriter, r *http.Request) {
		times, err := p.restart(r.Context(), r.PathValue("name"))
		reply(w, times, err)
	})
	mux.HandleFunc("POST /etcd/compact", func(w http.ResponseWriter, r *http.Request) {
		revision, err := p.compactEtcd(r.Context())
		reply(w, map[string]int64{"revision": revision}, err)
	})
	mux.HandleFunc("POST /proxies/{name}", func(w http.ResponseWriter, r *http.Request) {
		proxy, err := p.addProxy(r.PathValue("name"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, proxy.status(), nil)
	})
	mux.HandleFunc("PUT /proxies/{name}", func(w http.ResponseWriter, r *http.Request) {
		proxy, ok := p.proxy(r.PathValue("name"))
		if !ok {
			http.Error(w, "no such proxy", http.StatusNotFound)
			return
		}
		var setting proxySetting
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&setting); err != nil {
			http.Error(w, "a JSON body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := proxy.set(setting); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reply(w, proxy.status(), nil)
	})
	if p.nodes != nil {
		p.nodes.routes(mux)
	}
	p.control = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.control.Serve(listener) }()
	return os.WriteFile(p.l.path("control.addr"), []byte(listener.Addr().String()), 0o644)
}

// reply writes value as JSON, or err as a 500.
func reply(w http.ResponseWriter, value any, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(value)
}

// controlRequest sends one request to the control endpoint of the cluster in dir and returns the body.
func controlRequest(dir, method, path string, body []byte) ([]byte, error) {
	addr, err := os.ReadFile(filepath.Join(dir, "control.addr"))
	if err != nil {
		return nil, fmt.Errorf("no running cluster in %s: %w", dir, err)
	}
	req, err := http.NewRequest(method, "http://"+strings.TrimSpace(string(addr))+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 5 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// runFault is the command-line client of the faults:
//
//	realkube fault --dir DIR restart etcd|kube-apiserver
//	realkube fault --dir DIR compact
//	realkube fault --dir DIR proxy NAME [--mode MODE] [--latency DURATION]
func runFault(args []string) error {
	fs := newFlagSet("fault")
	dir := fs.String("dir", "", "directory given to up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	usage := errors.New("usage: realkube fault --dir DIR restart etcd|kube-apiserver | compact | proxy NAME [--mode MODE] [--latency D]")
	if *dir == "" || len(rest) == 0 {
		return usage
	}
	var out []byte
	var err error
	switch {
	case rest[0] == "restart" && len(rest) == 2:
		out, err = controlRequest(*dir, http.MethodPost, "/components/"+rest[1]+"/restart", nil)
	case rest[0] == "compact" && len(rest) == 1:
		out, err = controlRequest(*dir, http.MethodPost, "/etcd/compact", nil)
	case rest[0] == "proxy" && len(rest) >= 2:
		out, err = proxyCommand(*dir, rest[1], rest[2:])
	default:
		return usage
	}
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// proxyCommand creates the named proxy if needed and sets its mode when flags are given.
func proxyCommand(dir, name string, args []string) ([]byte, error) {
	fs := newFlagSet("proxy")
	mode := fs.String("mode", "", "pass, blackhole, reset, cut-requests or cut-responses")
	latency := fs.Duration("latency", 0, "delay of every chunk from the client to the API server")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	out, err := controlRequest(dir, http.MethodPost, "/proxies/"+name, nil)
	if err != nil || *mode == "" {
		return out, err
	}
	body, err := json.Marshal(proxySetting{Mode: proxyMode(*mode), Latency: latency.String()})
	if err != nil {
		return nil, err
	}
	return controlRequest(dir, http.MethodPut, "/proxies/"+name, body)
}
