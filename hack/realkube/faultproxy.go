package main

// A TCP fault proxy between one client (a CCM replica) and the API server. TLS passes through untouched:
// the client talks to the API server, the proxy only decides what happens to the bytes. Modes:
//
//	pass           forward both ways; with a latency, every chunk from the client reaches the API server
//	               that much later (so every request is answered at least that much later)
//	blackhole      accept, and drop every byte both ways: the client's requests are never answered
//	reset          reset every open connection and every new one at once
//	cut-requests   drop what the client sends, forward what the API server sends
//	cut-responses  forward what the client sends, drop what the API server sends: requests arrive and are
//	               acted on, the client never learns of it
//
// A connection that lost bytes cannot carry TLS any further: when the proxy passes again, such connections
// are reset, as a partition's dead connections are when it heals.

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxyMode is what the proxy does with the bytes.
type proxyMode string

const (
	modePass         proxyMode = "pass"
	modeBlackhole    proxyMode = "blackhole"
	modeReset        proxyMode = "reset"
	modeCutRequests  proxyMode = "cut-requests"
	modeCutResponses proxyMode = "cut-responses"
)

// proxySetting is the body of PUT /proxies/{name}.
type proxySetting struct {
	Mode proxyMode `json:"mode"`
	// Latency is a Go duration ("2s"); empty is none.
	Latency string `json:"latency,omitempty"`
}

// proxyStatus is what GET /proxies/{name} answers.
type proxyStatus struct {
	Name string `json:"name"`
	// Address is where the client connects (the API server's address in its kubeconfig).
	Address string `json:"address"`
	// SourceIP is the address the proxy's connections to the API server come from.
	SourceIP string    `json:"sourceIP"`
	Mode     proxyMode `json:"mode"`
	Latency  string    `json:"latency"`
	Accepted uint64    `json:"accepted"`
	Open     int       `json:"open"`
	// Reset counts connections the proxy reset.
	Reset uint64 `json:"reset"`
	// Dropped counts the bytes dropped.
	Dropped uint64 `json:"dropped"`
}

// faultProxy listens on a loopback port and forwards to target.
type faultProxy struct {
	name     string
	target   string
	source   *net.TCPAddr
	listener net.Listener

	mu      sync.Mutex
	mode    proxyMode
	latency time.Duration
	conns   map[*proxiedConn]struct{}

	accepted, reset, dropped atomic.Uint64
}

// proxiedConn is one client connection and, unless it arrived during a blackhole, its upstream one.
type proxiedConn struct {
	client   *net.TCPConn
	upstream *net.TCPConn
	// lost is set once a byte was dropped.
	lost atomic.Bool
	once sync.Once
}

// chunk is bytes read from the client, with when they were read.
type chunk struct {
	data []byte
	read time.Time
}

func newFaultProxy(name, target string, source net.IP) (*faultProxy, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{name: name, target: target, source: &net.TCPAddr{IP: source}, listener: listener,
		mode: modePass, conns: map[*proxiedConn]struct{}{}}
	go p.acceptLoop()
	return p, nil
}

func (p *faultProxy) status() proxyStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return proxyStatus{Name: p.name, Address: p.listener.Addr().String(), SourceIP: p.source.IP.String(),
		Mode: p.mode, Latency: p.latency.String(), Accepted: p.accepted.Load(), Open: len(p.conns),
		Reset: p.reset.Load(), Dropped: p.dropped.Load()}
}

// state is the current mode and latency.
func (p *faultProxy) state() (proxyMode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency
}

// set changes the mode: reset closes every connection; passing again resets the ones that lost bytes.
func (p *faultProxy) set(setting proxySetting) error {
	var latency time.Duration
	if setting.Latency != "" {
		var err error
		if latency, err = time.ParseDuration(setting.Latency); err != nil || latency < 0 {
			return fmt.Errorf("latency: a non-negative Go duration, not %q", setting.Latency)
		}
	}
	switch setting.Mode {
	case modePass, modeBlackhole, modeReset, modeCutRequests, modeCutResponses:
	default:
		return fmt.Errorf("mode: pass, blackhole, reset, cut-requests or cut-responses, not %q", setting.Mode)
	}
	p.mu.Lock()
	p.mode, p.latency = setting.Mode, latency
	var victims []*proxiedConn
	for c := range p.conns {
		if setting.Mode == modeReset || (setting.Mode == modePass && (c.lost.Load() || c.upstream == nil)) {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		p.drop(c, true)
	}
	fmt.Printf("proxy %s: %s (latency %s), %d connections reset\n", p.name, setting.Mode, latency, len(victims))
	return nil
}

// close stops accepting and closes every connection.
func (p *faultProxy) close() {
	_ = p.listener.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*proxiedConn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		p.drop(c, false)
	}
}

func (p *faultProxy) acceptLoop() {
	for {
		conn, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		go p.handle(conn.(*net.TCPConn))
	}
}

// handle connects one client as the current mode says.
func (p *faultProxy) handle(client *net.TCPConn) {
	mode, _ := p.state()
	c := &proxiedConn{client: client}
	switch mode {
	case modeReset:
		p.resetConn(client)
		return
	case modeBlackhole:
		// Accepted, never connected upstream: the client's handshake goes unanswered.
		c.lost.Store(true)
	default:
		dialer := net.Dialer{LocalAddr: p.source, Timeout: 10 * time.Second}
		upstream, err := dialer.Dial("tcp", p.target)
		if err != nil {
			p.resetConn(client)
			return
		}
		c.upstream = upstream.(*net.TCPConn)
	}
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	if c.upstream == nil {
		go p.pump(c, client, nil, modeBlackhole)
		return
	}
	go p.pumpRequests(c)
	go p.pump(c, c.upstream, client, modeCutResponses)
}

// pumpRequests forwards the client's bytes, each chunk delayed by the latency of the moment it was read.
func (p *faultProxy) pumpRequests(c *proxiedConn) {
	chunks := make(chan chunk, 1024)
	// done ends the reader when the writer stops first (the API server closed its side).
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32*1024)
			n, err := c.client.Read(buf)
			if n > 0 {
				if p.dropping(modeCutRequests) {
					p.lose(c, n)
				} else {
					select {
					case chunks <- chunk{data: buf[:n], read: time.Now()}:
					case <-done:
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		if _, latency := p.state(); latency > 0 {
			time.Sleep(time.Until(ch.read.Add(latency)))
		}
		if _, err := c.upstream.Write(ch.data); err != nil {
			break
		}
	}
	p.drop(c, false)
}

// pump copies from → to (to nil: nowhere), dropping while the mode is blackhole or cut.
func (p *faultProxy) pump(c *proxiedConn, from, to *net.TCPConn, cut proxyMode) {
	buf := make([]byte, 32*1024)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if to == nil || p.dropping(cut) {
				p.lose(c, n)
			} else if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.drop(c, false)
}

// dropping is whether bytes of the direction that cut drops are dropped now.
func (p *faultProxy) dropping(cut proxyMode) bool {
	mode, _ := p.state()
	return mode == modeBlackhole || mode == cut
}

func (p *faultProxy) lose(c *proxiedConn, n int) {
	c.lost.Store(true)
	p.dropped.Add(uint64(n))
}

// drop closes both sides of c once (with a reset when asked) and forgets it.
func (p *faultProxy) drop(c *proxiedConn, reset bool) {
	c.once.Do(func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		if reset {
			p.resetConn(c.client)
		} else {
			_ = c.client.Close()
		}
		if c.upstream != nil {
			_ = c.upstream.Close()
		}
	})
}

// resetConn closes conn with a TCP reset.
func (p *faultProxy) resetConn(conn *net.TCPConn) {
	p.reset.Add(1)
	_ = conn.SetLinger(0)
	_ = conn.Close()
}
