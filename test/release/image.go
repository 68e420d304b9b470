// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// OCI media types (image-spec v1.1).
const (
	MediaIndex    = "application/vnd.oci.image.index.v1+json"
	MediaManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaConfig   = "application/vnd.oci.image.config.v1+json"
	MediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// AgentPath is the agent's path in the image, its entrypoint; the
// DaemonSet gives only args.
const AgentPath = "/usr/local/bin/hpmount"

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *OCIPlatform      `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// OCIPlatform is a descriptor's platform in an image index.
type OCIPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

// Index is an OCI image index, and the layout's index.json.
type Index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []Descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        Descriptor        `json:"config"`
	Layers        []Descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Config is the part of an OCI image configuration the image sets.
type Config struct {
	Created      string      `json:"created"`
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Variant      string      `json:"variant,omitempty"`
	Config       ImageConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []History `json:"history"`
}

// History is one step of how the image was made.
type History struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// ImageConfig is what a runtime takes from the image to run it.
type ImageConfig struct {
	User       string            `json:"User"`
	Env        []string          `json:"Env"`
	Entrypoint []string          `json:"Entrypoint"`
	Cmd        []string          `json:"Cmd"`
	Labels     map[string]string `json:"Labels"`
}

// Annotations are the org.opencontainers.image annotations of the index
// and of each manifest, and the labels of each configuration.
func Annotations(opts Options) map[string]string {
	const p = "org.opencontainers.image."
	return map[string]string{
		p + "title":       Title,
		p + "description": "Node agent for KubeVirt volume hotplug: mounts hotplugged volumes into virt-launcher pods",
		p + "version":     opts.Version,
		p + "revision":    opts.Commit,
		p + "source":      Source,
		p + "url":         Source,
		p + "licenses":    License,
		p + "created":     opts.Date.UTC().Format(time.RFC3339),
	}
}

// blobs collects an image layout's blobs by digest.
type blobs map[string][]byte

func (b blobs) add(mediaType string, data []byte) Descriptor {
	sum := sha256.Sum256(data)
	d := Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
	b[d.Digest] = data
	return d
}

func (b blobs) addJSON(mediaType string, v any) (Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	return b.add(mediaType, data), nil
}

// writeImage writes the OCI image layout of the agents (one static binary
// per platform) into dir. The layout's index.json names one image index,
// tagged with the version (org.opencontainers.image.ref.name), that holds
// one manifest per platform.
func writeImage(dir string, agents map[Platform]string, opts Options) error {
	b := blobs{}
	index := Index{SchemaVersion: 2, MediaType: MediaIndex, Annotations: Annotations(opts)}
	for _, p := range Platforms {
		path, ok := agents[p]
		if !ok {
			return fmt.Errorf("no %s binary for %s", Agent, p)
		}
		d, err := imageManifest(b, path, p, opts)
		if err != nil {
			return err
		}
		index.Manifests = append(index.Manifests, d)
	}
	top, err := b.addJSON(MediaIndex, index)
	if err != nil {
		return err
	}
	top.Annotations = map[string]string{"org.opencontainers.image.ref.name": opts.Version}
	return writeLayout(dir, b, Index{SchemaVersion: 2, MediaType: MediaIndex, Manifests: []Descriptor{top}})
}

// imageManifest adds the layer, configuration and manifest of one
// platform's image to b and returns the manifest's descriptor.
func imageManifest(b blobs, agent string, p Platform, opts Options) (Descriptor, error) {
	bin, err := os.ReadFile(agent)
	if err != nil {
		return Descriptor{}, err
	}
	tarball, err := layerTar(bin, opts.Date)
	if err != nil {
		return Descriptor{}, fmt.Errorf("layer of %s: %w", p, err)
	}
	gz, err := gzipped(tarball)
	if err != nil {
		return Descriptor{}, err
	}
	layer := b.add(MediaLayer, gz)
	created := opts.Date.UTC().Format(time.RFC3339)
	cfg := Config{Created: created, Architecture: p.Arch, OS: p.OS, Variant: variant(p)}
	cfg.Config = ImageConfig{
		User:       "0:0",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint: []string{AgentPath}, Cmd: []string{"agent"},
		Labels: Annotations(opts),
	}
	diffID := sha256.Sum256(tarball)
	cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{"sha256:" + hex.EncodeToString(diffID[:])}
	cfg.History = []History{{created, "hpmount release " + opts.Version + ": " + AgentPath}}
	config, err := b.addJSON(MediaConfig, cfg)
	if err != nil {
		return Descriptor{}, err
	}
	m := Manifest{SchemaVersion: 2, MediaType: MediaManifest, Config: config,
		Layers: []Descriptor{layer}, Annotations: Annotations(opts)}
	d, err := b.addJSON(MediaManifest, m)
	d.Platform = &OCIPlatform{Architecture: p.Arch, OS: p.OS, Variant: variant(p)}
	return d, err
}

// variant is the platform's variant as registries and runtimes match it:
// arm64 images say v8.
func variant(p Platform) string {
	if p.Arch == "arm64" {
		return "v8"
	}
	return ""
}

// layerTar is the layer: the agent and the folders above it, and an empty
// /tmp, owned by root, every time the release date.
func layerTar(agent []byte, date time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []*tar.Header{
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/local/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/local/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: AgentPath[1:], Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(agent))},
	}
	for _, h := range entries {
		h.ModTime, h.Format = date, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header %q: %w", h.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(agent); err != nil {
				return nil, fmt.Errorf("tar data %q: %w", h.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipped compresses data with no name and no time in the gzip header.
func gzipped(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLayout writes an OCI image layout: oci-layout, index.json and
// blobs/sha256/<hex>.
func writeLayout(dir string, b blobs, index Index) error {
	blobDir := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return err
	}
	for digest, data := range b {
		if err := os.WriteFile(filepath.Join(blobDir, digest[len("sha256:"):]), data, 0o644); err != nil {
			return fmt.Errorf("write blob %s: %w", digest, err)
		}
	}
	top, err := json.Marshal(index)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), top, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}
