package main

// The host state real nodes change, captured before the nodes start and put back when they stop: the
// sysctls the kubelet, the CNI plugins and kube-proxy write, the whole nftables ruleset (iptables here is
// iptables-nft: kube-proxy's and the CNI plugins' chains live there), the network links and the addresses
// of lo, the mounts, and the cgroups under each v1 hierarchy. `realkube down` compares the host with the
// capture afterwards and fails naming what differs.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// hostSysctls are the sysctls the nodes' components write.
var hostSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
	"net/ipv4/conf/all/route_localnet",
	"net/ipv4/conf/all/forwarding",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max",
	"net/ipv6/conf/all/forwarding",
}

// hostState is what the capture holds.
type hostState struct {
	Sysctls map[string]string `json:"sysctls"`
	Ruleset string            `json:"ruleset"`
	Links   []string          `json:"links"`
	LoAddrs []string          `json:"loAddrs"`
	Mounts  []string          `json:"mounts"`
	Cgroups []string          `json:"cgroups"`
	RunDirs []string          `json:"runDirs"`
}

// captureHost reads the host state.
func captureHost() (hostState, error) {
	state := hostState{Sysctls: map[string]string{}}
	for _, name := range hostSysctls {
		if data, err := os.ReadFile(filepath.Join("/proc/sys", name)); err == nil {
			state.Sysctls[name] = strings.TrimSpace(string(data))
		}
	}
	ruleset, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil {
		return state, fmt.Errorf("nft list ruleset: %w", err)
	}
	state.Ruleset = string(ruleset)
	state.Links = commandLines("ip", "-o", "link", "show")
	for i, link := range state.Links {
		// "N: name: <flags> ..." without the volatile index and counters.
		fields := strings.Fields(link)
		if len(fields) > 1 {
			state.Links[i] = strings.TrimSuffix(fields[1], ":")
		}
	}
	sort.Strings(state.Links)
	for _, line := range commandLines("ip", "-o", "addr", "show", "dev", "lo") {
		fields := strings.Fields(line)
		if len(fields) > 3 {
			state.LoAddrs = append(state.LoAddrs, fields[3])
		}
	}
	sort.Strings(state.LoAddrs)
	state.Mounts = mountPoints()
	state.Cgroups = cgroupDirs()
	state.RunDirs = globAll("/run/containerd", "/run/netns", "/var/lib/cni", "/etc/cni")
	return state, nil
}

// commandLines runs a command and returns its non-empty output lines (none when it fails).
func commandLines(name string, args ...string) []string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return nil
	}
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// mountPoints lists the mount points, sorted.
func mountPoints() []string {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 1 {
			points = append(points, fields[1])
		}
	}
	sort.Strings(points)
	return points
}

// cgroupHierarchies are the mounted v1 hierarchies (or the v2 root).
func cgroupHierarchies() []string {
	var dirs []string
	for _, point := range mountPoints() {
		if strings.HasPrefix(point, "/sys/fs/cgroup/") || point == "/sys/fs/cgroup" {
			if _, err := os.Stat(filepath.Join(point, "cgroup.procs")); err == nil {
				dirs = append(dirs, point)
			}
		}
	}
	return dirs
}

// cgroupDirs lists the top-level cgroups of every hierarchy.
func cgroupDirs() []string {
	var dirs []string
	for _, root := range cgroupHierarchies() {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(root, e.Name()))
			}
		}
	}
	sort.Strings(dirs)
	return dirs
}

// globAll lists the paths that exist among these and their direct children.
func globAll(paths ...string) []string {
	var found []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
			children, _ := filepath.Glob(filepath.Join(p, "*"))
			found = append(found, children...)
		}
	}
	sort.Strings(found)
	return found
}

func (s hostState) save(path string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

func loadHostState(path string) (hostState, error) {
	var s hostState
	data, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

// restoreHost puts back what the nodes changed: sysctls, the nftables ruleset, links and lo addresses that
// were not there, mounts and cgroups that were not there, and the run directories the nodes created.
func restoreHost(before hostState) []error {
	var errs []error
	now, err := captureHost()
	if err != nil {
		return []error{err}
	}
	for _, point := range reverse(missingFrom(before.Mounts, now.Mounts)) {
		// A lazy unmount is refused for a namespace file (nsfs), so it is only the fallback.
		if err := syscall.Unmount(point, 0); err != nil {
			if err := syscall.Unmount(point, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("umount %s: %w", point, err))
			}
		}
	}
	for _, link := range missingFrom(before.Links, now.Links) {
		name, _, _ := strings.Cut(link, "@")
		if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", name, err, strings.TrimSpace(string(out))))
		}
	}
	for _, addr := range missingFrom(before.LoAddrs, now.LoAddrs) {
		if out, err := exec.Command("ip", "addr", "delete", addr, "dev", "lo").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip addr delete %s: %v: %s", addr, err, strings.TrimSpace(string(out))))
		}
	}
	if now.Ruleset != before.Ruleset {
		restore := exec.Command("nft", "-f", "-")
		restore.Stdin = strings.NewReader("flush ruleset\n" + before.Ruleset)
		if out, err := restore.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft restore: %v: %s", err, strings.TrimSpace(string(out))))
		}
	}
	for name, value := range before.Sysctls {
		if now.Sysctls[name] != value {
			if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s: %w", name, err))
			}
		}
	}
	for _, dir := range missingFrom(before.Cgroups, now.Cgroups) {
		if err := removeCgroup(dir); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dir := range reverse(missingFrom(before.RunDirs, now.RunDirs)) {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// removeCgroup kills what runs in a cgroup and removes it with its children, deepest first.
func removeCgroup(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for _, d := range dirs {
		killProcs(filepath.Join(d, "cgroup.procs"))
	}
	// A killed process leaves its cgroup once it has exited.
	for _, d := range dirs {
		for i := 0; i < 100 && hasProcs(filepath.Join(d, "cgroup.procs")); i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, d := range reverse(dirs) {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing cgroup %s: %w", d, err)
		}
	}
	return nil
}

// hasProcs reports whether a cgroup.procs file lists a process.
func hasProcs(procs string) bool {
	data, err := os.ReadFile(procs)
	return err == nil && strings.TrimSpace(string(data)) != ""
}

// killProcs sends SIGKILL to the processes listed in a cgroup.procs file.
func killProcs(procs string) {
	data, err := os.ReadFile(procs)
	if err != nil {
		return
	}
	for _, pid := range strings.Fields(string(data)) {
		_ = exec.Command("kill", "-9", pid).Run()
	}
}

// hostDifferences names what differs between two captures.
func hostDifferences(before, after hostState) []string {
	var diffs []string
	for name, value := range before.Sysctls {
		if after.Sysctls[name] != value {
			diffs = append(diffs, fmt.Sprintf("sysctl %s: %s, was %s", name, after.Sysctls[name], value))
		}
	}
	if after.Ruleset != before.Ruleset {
		diffs = append(diffs, "the nftables ruleset differs")
	}
	for _, pair := range []struct {
		what          string
		before, after []string
	}{
		{"link", before.Links, after.Links},
		{"address on lo", before.LoAddrs, after.LoAddrs},
		{"mount", before.Mounts, after.Mounts},
		{"cgroup", before.Cgroups, after.Cgroups},
		{"path", before.RunDirs, after.RunDirs},
	} {
		for _, added := range missingFrom(pair.before, pair.after) {
			diffs = append(diffs, fmt.Sprintf("%s %s was added", pair.what, added))
		}
		for _, removed := range missingFrom(pair.after, pair.before) {
			diffs = append(diffs, fmt.Sprintf("%s %s was removed", pair.what, removed))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// missingFrom lists the items of now that base lacks, in order.
func missingFrom(base, now []string) []string {
	have := map[string]bool{}
	for _, b := range base {
		have[b] = true
	}
	var out []string
	for _, n := range now {
		if !have[n] {
			out = append(out, n)
		}
	}
	return out
}

func reverse(items []string) []string {
	out := make([]string, len(items))
	for i, item := range items {
		out[len(items)-1-i] = item
	}
	return out
}
