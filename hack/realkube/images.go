package main

// The container images of the nodes, made without a registry: one layer holding the host's static busybox
// (Debian's busybox-static) and its applets, and the echo server of hack/realkube/echo as /bin/echo-server
// (TCP echo; UDP answers with the hostname and the payload, which busybox has no server for), as two images in
// one docker-archive tarball that each node's containerd imports: the pod sandbox (`pause`: waits for
// SIGTERM) and `busybox` for test pods (`httpd`, `nc`, `sh`, `echo-server`). Pods use
// `imagePullPolicy: Never`.

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

const (
	// pauseImage is the sandbox image of every pod.
	pauseImage = "realkube.local/pause:1"
	// busyboxImage is the image test pods run.
	busyboxImage = "realkube.local/busybox:1"
	// busyboxPath is where Debian's busybox-static installs the static binary.
	busyboxPath = "/bin/busybox"
	// echoServerBinary is the static echo server build.sh builds beside the realkube binary.
	echoServerBinary = "realkube-echo"
)

// busyboxApplets are linked into the image's /bin.
var busyboxApplets = []string{
	"sh", "sleep", "httpd", "nc", "cat", "echo", "ls", "hostname", "env", "ps", "kill", "true", "false",
	"mkdir", "printf", "wget", "ip", "date", "grep",
}

// writeImages writes the docker-archive tarball of both images to path.
func writeImages(path string) error {
	binary, err := os.ReadFile(busyboxPath)
	if err != nil {
		return fmt.Errorf("the images need %s (Debian's busybox-static package): %w", busyboxPath, err)
	}
	echoServer, err := readEchoServer()
	if err != nil {
		return err
	}
	layer, err := busyboxLayer(binary, echoServer)
	if err != nil {
		return err
	}
	layerDigest := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(layerDigest[:])

	pauseConfig, err := imageConfig(diffID, []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}, nil)
	if err != nil {
		return err
	}
	busyboxConfig, err := imageConfig(diffID, nil, []string{"sh"})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal([]map[string]any{
		{"Config": "pause.json", "RepoTags": []string{pauseImage}, "Layers": []string{"layer.tar"}},
		{"Config": "busybox.json", "RepoTags": []string{busyboxImage}, "Layers": []string{"layer.tar"}},
	})
	if err != nil {
		return err
	}
	var archive bytes.Buffer
	w := tar.NewWriter(&archive)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"layer.tar", layer}, {"pause.json", pauseConfig}, {"busybox.json", busyboxConfig}, {"manifest.json", manifest},
	} {
		if err := writeTarFile(w, f.name, f.data, 0o644); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, archive.Bytes(), 0o644)
}

// readEchoServer reads the echo server from the directory of the running realkube binary.
func readEchoServer() ([]byte, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(filepath.Dir(self), echoServerBinary)
	binary, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the images need the echo server %s (built with realkube by hack/realkube/build.sh; run it): %w", path, err)
	}
	return binary, nil
}

// busyboxLayer is the image's only layer: /bin/busybox, its applets as symlinks, /bin/echo-server, /tmp and
// /www.
func busyboxLayer(binary, echoServer []byte) ([]byte, error) {
	var layer bytes.Buffer
	w := tar.NewWriter(&layer)
	for _, dir := range []string{"bin/", "tmp/", "www/"} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o1777, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	if err := writeTarFile(w, "bin/busybox", binary, 0o755); err != nil {
		return nil, err
	}
	if err := writeTarFile(w, "bin/echo-server", echoServer, 0o755); err != nil {
		return nil, err
	}
	for _, applet := range busyboxApplets {
		header := &tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: time.Unix(0, 0)}
		if err := w.WriteHeader(header); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return layer.Bytes(), nil
}

func writeTarFile(w *tar.Writer, name string, data []byte, mode int64) error {
	header := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0)}
	if err := w.WriteHeader(header); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// imageConfig is an OCI image configuration of the layer.
func imageConfig(diffID string, entrypoint, cmd []string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Env":        []string{"PATH=/bin"},
			"Entrypoint": entrypoint,
			"Cmd":        cmd,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
}
