// Command echo-server is the echo server of the test pods' image, at /bin/echo-server (images.go): busybox
// has no UDP server that answers. build.sh builds it as realkube-echo beside the realkube binary. It is test
// tooling only.
//
//	echo-server [--tcp PORT] [--udp PORT]
//
// On TCP it sends every byte of a connection back and closes the connection after the client's EOF. On UDP it
// answers each datagram to its sender with "HOSTNAME PAYLOAD", so that a test sees which pod answered. It
// listens on every address, and exits 0 on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// maxDatagram bounds the payload of a UDP datagram read: the largest UDP payload fits.
const maxDatagram = 64 << 10

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: echo-server [--tcp PORT] [--udp PORT]")
		flag.PrintDefaults()
	}
	tcpPort := flag.Int("tcp", 0, "echo every TCP connection on this port")
	udpPort := flag.Int("udp", 0, `answer every UDP datagram on this port with "HOSTNAME PAYLOAD"`)
	flag.Parse()
	if flag.NArg() > 0 || (*tcpPort == 0 && *udpPort == 0) || !validPort(*tcpPort) || !validPort(*udpPort) {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*tcpPort, *udpPort); err != nil {
		fmt.Fprintf(os.Stderr, "echo-server: %v\n", err)
		os.Exit(1)
	}
}

// validPort accepts 0 (the protocol is not served) and the TCP and UDP ports.
func validPort(port int) bool {
	return port >= 0 && port <= 65535
}

// run serves the requested ports until SIGTERM or SIGINT (nil) or until a listener fails.
func run(tcpPort, udpPort int) error {
	// Signals are caught before listening: a pod deleted right after its start still exits 0.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	hostname, err := os.Hostname()
	if err != nil {
		return err
	}
	failed := make(chan error, 2)
	var serving []string
	if tcpPort != 0 {
		listener, err := net.Listen("tcp", fmt.Sprintf(":%d", tcpPort))
		if err != nil {
			return err
		}
		go func() { failed <- serveTCP(listener) }()
		serving = append(serving, fmt.Sprintf("TCP port %d (echo)", tcpPort))
	}
	if udpPort != 0 {
		conn, err := net.ListenPacket("udp", fmt.Sprintf(":%d", udpPort))
		if err != nil {
			return err
		}
		go func() { failed <- serveUDP(conn, hostname) }()
		serving = append(serving, fmt.Sprintf("UDP port %d (hostname and payload)", udpPort))
	}
	fmt.Fprintf(os.Stderr, "echo-server %s on %s\n", hostname, strings.Join(serving, " and "))
	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "echo-server stopping on %s\n", sig)
		return nil
	case err := <-failed:
		return err
	}
}

// serveTCP echoes each connection's bytes back until the client's EOF, then closes the connection.
func serveTCP(listener net.Listener) error {
	for {
		conn, err := listener.Accept()
		if err != nil {
			return fmt.Errorf("accepting TCP connections: %w", err)
		}
		go func() {
			defer conn.Close()
			// io.Copy moves the bytes through a bounded buffer (or a kernel pipe) as they arrive.
			_, _ = io.Copy(conn, conn)
		}()
	}
}

// serveUDP answers each datagram to its sender with the hostname, a space and the datagram's payload. One
// buffer holds the reply: the prefix, then the payload read right after it.
func serveUDP(conn net.PacketConn, hostname string) error {
	prefix := hostname + " "
	buf := make([]byte, len(prefix)+maxDatagram)
	copy(buf, prefix)
	for {
		n, from, err := conn.ReadFrom(buf[len(prefix):])
		if err != nil {
			return fmt.Errorf("reading UDP datagrams: %w", err)
		}
		if _, err := conn.WriteTo(buf[:len(prefix)+n], from); err != nil {
			// A reply can fail alone (a payload near the UDP limit grows too large); the server goes on.
			fmt.Fprintf(os.Stderr, "echo-server: answering %s: %v\n", from, err)
		}
	}
}
