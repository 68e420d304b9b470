// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sort"
	"time"
)

// Image names on the node; pods use them with imagePullPolicy Never.
const (
	PauseImage   = "docker.io/hpmount/pause:test"
	BusyboxImage = "docker.io/hpmount/busybox:test"
)

// OCI media types of the images the node imports.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Image is a single-layer image: its files, its name and its command.
type Image struct {
	// Name is the full reference, e.g. docker.io/hpmount/busybox:test.
	Name       string
	Entrypoint []string
	Cmd        []string
	Files      []File
}

// File is one entry of the layer: a regular file with Data, a directory
// (Dir) or a symlink (Link).
type File struct {
	Path string // relative, e.g. bin/busybox
	Data []byte
	Mode int64
	Dir  bool
	Link string
}

// epoch is every entry's time: the same files make the same digests.
var epoch = time.Unix(0, 0)

// WriteOCI writes img as an OCI image layout tar (oci-layout, index.json and
// the blobs) that `ctr images import` reads; the index names the image by
// the annotations containerd and the OCI spec use.
func WriteOCI(w io.Writer, img Image) error {
	layer, err := layerTar(img.Files)
	if err != nil {
		return fmt.Errorf("layer of %q: %w", img.Name, err)
	}
	layerDesc := descriptor(mediaLayer, layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.Entrypoint, "Cmd": img.Cmd},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc["digest"].(string)}},
	})
	if err != nil {
		return err
	}
	configDesc := descriptor(mediaConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaManifest,
		"config": configDesc, "layers": []any{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := descriptor(mediaManifest, manifest)
	manifestDesc["annotations"] = map[string]string{
		"io.containerd.image.name":          img.Name,
		"org.opencontainers.image.ref.name": img.Name,
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaIndex, "manifests": []any{manifestDesc},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []File{
		{Path: "oci-layout", Data: []byte(`{"imageLayoutVersion":"1.0.0"}`), Mode: 0o644},
		{Path: "index.json", Data: index, Mode: 0o644},
		{Path: "blobs/", Dir: true, Mode: 0o755},
		{Path: "blobs/sha256/", Dir: true, Mode: 0o755},
	}
	for _, blob := range [][]byte{layer, config, manifest} {
		entries = append(entries, File{Path: "blobs/sha256/" + hexDigest(blob), Data: blob, Mode: 0o644})
	}
	if err := writeEntries(tw, entries); err != nil {
		return fmt.Errorf("image %q: %w", img.Name, err)
	}
	return tw.Close()
}

// layerTar is the uncompressed layer, entries sorted by path.
func layerTar(files []File) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := writeEntries(tw, sorted); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeEntries(tw *tar.Writer, files []File) error {
	for _, f := range files {
		h := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag = tar.TypeDir
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar header %q: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return fmt.Errorf("tar data %q: %w", f.Path, err)
		}
	}
	return nil
}

func hexDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, blob []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": "sha256:" + hexDigest(blob), "size": len(blob)}
}
