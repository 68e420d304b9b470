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
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// checkImage reads the layout as a registry client would (index.json, the
// image index, this machine's manifest, its configuration and layer, each
// blob checked against its digest), checks the annotations, unpacks the
// layer into a root filesystem and runs the image's entrypoint there with
// `version` and `diag --help`.
func checkImage(t *testing.T, dist string, opts Options) {
	layout := filepath.Join(dist, ImageDir)
	var top, index Index
	readJSON(t, filepath.Join(layout, "index.json"), &top)
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != opts.Version {
		t.Fatalf("index.json: %+v", top)
	}
	readBlob(t, layout, top.Manifests[0], &index)
	if len(index.Manifests) != len(Platforms) {
		t.Fatalf("image index has %d manifests, want one per platform: %+v", len(index.Manifests), index)
	}
	var m Manifest
	for _, d := range index.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			readBlob(t, layout, d, &m)
		}
	}
	if len(m.Layers) != 1 {
		t.Fatalf("manifest for linux/%s: %+v", runtime.GOARCH, m)
	}
	var cfg Config
	readBlob(t, layout, m.Config, &cfg)
	want := Annotations(opts)
	for _, got := range []map[string]string{index.Annotations, m.Annotations, cfg.Config.Labels} {
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s is %q, want %q", k, got[k], v)
			}
		}
	}
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	unpackLayer(t, layout, m.Layers[0], cfg.RootFS.DiffIDs, rootfs)
	out := runImage(t, rootfs, cfg.Config, "version")
	if !strings.Contains(out, "version: "+opts.Version+"\n") || !strings.Contains(out, "revision: "+opts.Commit+"\n") {
		t.Errorf("the image's version says\n%s\nwant version %s, revision %s", out, opts.Version, opts.Commit)
	}
	out = runImage(t, rootfs, cfg.Config, "diag", "--help")
	if !strings.Contains(out, "hpmount diag") {
		t.Errorf("the image's diag --help says\n%s", out)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
}

// blob reads the blob d describes and checks its size and digest.
func blob(t *testing.T, layout string, d Descriptor) []byte {
	t.Helper()
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", hexSum))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexSum || int64(len(data)) != d.Size {
		t.Fatalf("blob %s: %d bytes, sha256 %x; the descriptor says %d bytes", d.Digest, len(data), sum, d.Size)
	}
	return data
}

func readBlob(t *testing.T, layout string, d Descriptor, v any) {
	t.Helper()
	if err := json.Unmarshal(blob(t, layout, d), v); err != nil {
		t.Fatalf("decode %s (%s): %v", d.Digest, d.MediaType, err)
	}
}

// unpackLayer extracts the gzipped layer into dir, checking the
// uncompressed tar against the configuration's diff_id.
func unpackLayer(t *testing.T, layout string, d Descriptor, diffIDs []string, dir string) {
	t.Helper()
	if d.MediaType != MediaLayer || len(diffIDs) != 1 {
		t.Fatalf("layer %+v, diff_ids %v", d, diffIDs)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, layout, d)))
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(tarball); "sha256:"+hex.EncodeToString(sum[:]) != diffIDs[0] {
		t.Fatalf("layer's tar is sha256:%x, the diff_id says %s", sum, diffIDs[0])
	}
	if err := untar(bytes.NewReader(tarball), dir); err != nil {
		t.Fatal(err)
	}
}

// untar extracts folders and regular files, the only kinds the layer has.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, os.FileMode(h.Mode).Perm())
		case tar.TypeReg:
			err = writeFrom(path, tr, os.FileMode(h.Mode).Perm())
		default:
			err = fmt.Errorf("layer entry %q: unexpected type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(path string, r io.Reader, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
