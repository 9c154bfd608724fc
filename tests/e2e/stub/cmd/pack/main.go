// Command pack writes the stub images as docker-archive tarballs (manifest.json, repositories, the
// config and one layer), which `ctr -n k8s.io images import` reads (containerd 1.6 and 2.x) with
// no Docker and no registry. Every tarball is deterministic: the same binary gives the same bytes.
//
// Usage: pack -binary STUB -images images.json -out DIR
// It writes DIR/<name>.tar per entry and prints one line per tarball: `<name>.tar REF [REF...]`.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// links: every program name the stub stands in for, where the real images have it (PATH lookups
// of the rendered command, and the entrypoints images.json mirrors). The stub dispatches on argv[0].
var links = []string{
	"/usr/local/bin/vllm",
	"/usr/local/bin/sglang",
	"/usr/bin/python3",
	"/usr/bin/python",
	"/usr/local/bin/envoy",
	"/usr/local/bin/vllm-router",
	"/epp",
	"/app/pd-sidecar",
}

var dirs = []string{"app", "etc", "tmp", "usr", "usr/bin", "usr/local", "usr/local/bin", "var", "var/run"}

type image struct {
	Name       string   `json:"name"`
	Entrypoint []string `json:"entrypoint"`
	Refs       []string `json:"refs"`
}

// normalize names a reference as containerd and the kubelet do: docker.io/ for Docker Hub names,
// library/ for official images, :latest when untagged.
func normalize(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if !found {
		ref = "docker.io/library/" + ref
	} else if !strings.ContainsAny(first, ".:") && first != "localhost" {
		ref = "docker.io/" + ref
	}
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") && !strings.Contains(ref, "@") {
		ref += ":latest"
	}
	return ref
}

var epoch = time.Unix(0, 0).UTC()

func layer(binary []byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) {
		h.ModTime, h.Uname, h.Gname, h.Format = epoch, "root", "root", tar.FormatPAX
		must(tw.WriteHeader(h))
	}
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777 // the engines write only to /tmp (and emptyDirs): any uid may
		}
		hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode})
	}
	hdr(&tar.Header{Typeflag: tar.TypeReg, Name: "stub", Mode: 0o755, Size: int64(len(binary))})
	_, err := tw.Write(binary)
	must(err)
	// Go's resolver: files, then DNS (the kubelet mounts /etc/hosts and /etc/resolv.conf).
	nss := []byte("hosts: files dns\n")
	hdr(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/nsswitch.conf", Mode: 0o644, Size: int64(len(nss))})
	_, err = tw.Write(nss)
	must(err)
	for _, l := range links {
		hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(l, "/"), Linkname: "/stub", Mode: 0o777})
	}
	must(tw.Close())
	return buf.Bytes()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func pack(out string, img image, layerTar []byte, label string) []string {
	layerID := digest(layerTar)
	arch := os.Getenv("GOARCH")
	if arch == "" {
		arch = runtime.GOARCH
	}
	config := map[string]any{
		"architecture": arch,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Entrypoint": img.Entrypoint,
			"WorkingDir": "/",
			"Labels":     map[string]string{"ai.gpustack.modeldeployment.e2e.stub": label, "ai.gpustack.modeldeployment.e2e.image": img.Name},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
		"history": []any{map[string]any{"created": epoch.Format(time.RFC3339), "created_by": "tests/e2e/stub/build.sh"}},
	}
	configJSON, err := json.Marshal(config)
	must(err)
	configID := digest(configJSON)
	var refs []string
	repositories := map[string]map[string]string{}
	for _, r := range img.Refs {
		n := normalize(r)
		refs = append(refs, n)
		repo, tag := n[:strings.LastIndex(n, ":")], n[strings.LastIndex(n, ":")+1:]
		if repositories[repo] == nil {
			repositories[repo] = map[string]string{}
		}
		repositories[repo][tag] = layerID
	}
	manifest := []any{map[string]any{"Config": configID + ".json", "RepoTags": refs, "Layers": []string{layerID + "/layer.tar"}}}
	manifestJSON, err := json.Marshal(manifest)
	must(err)
	reposJSON, err := json.Marshal(repositories)
	must(err)

	path := filepath.Join(out, img.Name+".tar")
	f, err := os.Create(path)
	must(err)
	tw := tar.NewWriter(f)
	file := func(name string, body []byte) {
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: epoch}))
		_, err := tw.Write(body)
		must(err)
	}
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: layerID + "/", Mode: 0o755, ModTime: epoch}))
	file(layerID+"/VERSION", []byte("1.0"))
	file(layerID+"/layer.tar", layerTar)
	file(configID+".json", configJSON)
	file("manifest.json", manifestJSON)
	file("repositories", reposJSON)
	must(tw.Close())
	must(f.Close())
	return refs
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "pack:", err)
		os.Exit(1)
	}
}

func main() {
	binary := flag.String("binary", "", "the static stub binary")
	images := flag.String("images", "", "images.json")
	out := flag.String("out", "", "output directory")
	label := flag.String("label", "", "a label value identifying this build (the source hash)")
	flag.Parse()
	if *binary == "" || *images == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	bin, err := os.ReadFile(*binary)
	must(err)
	raw, err := os.ReadFile(*images)
	must(err)
	var doc struct {
		Images []image `json:"images"`
	}
	must(json.Unmarshal(raw, &doc))
	must(os.MkdirAll(*out, 0o755))
	layerTar := layer(bin)
	for _, img := range doc.Images {
		refs := pack(*out, img, layerTar, *label)
		fmt.Printf("%s.tar %s\n", img.Name, strings.Join(refs, " "))
	}
}
