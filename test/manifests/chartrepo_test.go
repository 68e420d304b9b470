// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

// repoVar is the variable the example Addon leaves for the operator's
// chart repository URL (envsubst).
const repoVar = "${HPMOUNT_CHART_REPO}"

// TestChartRepository packages deploy/chart as `make chart-package` does,
// serves the folder on loopback with net/http, and resolves the example
// Addon against it as helm-controller would: index.yaml at the Addon's
// repo, the entry of its chart and version, the archive at the entry's URL
// (relative to the repo) with the entry's digest. The archive holds exactly
// deploy/chart's files under <name>/ (Chart.yaml re-encoded, as `helm
// package` writes it), and helm's loader loads it.
func TestChartRepository(t *testing.T) {
	dir := t.TempDir()
	archive, err := PackageChart(deployPath(t), dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The folder is served below a path, as a static host may, so the
	// archive's relative URL must resolve against the repository, not the
	// host's root.
	srv := httptest.NewServer(http.StripPrefix("/charts/hpmount", http.FileServer(http.Dir(dir))))
	t.Cleanup(srv.Close)
	a := readAddon(t)
	repo := strings.ReplaceAll(a.Spec.Repo, repoVar, srv.URL+"/charts/hpmount")

	var index IndexFile
	if err := yaml.UnmarshalStrict(get(t, repo+"/"+IndexName), &index); err != nil {
		t.Fatalf("%s: %v", IndexName, err)
	}
	entries := index.Entries[a.Spec.Chart]
	if index.APIVersion != "v1" || index.Generated.IsZero() || len(index.Entries) != 1 || len(entries) != 1 {
		t.Fatalf("index: apiVersion %q generated %v, entries %v; want v1 with one entry for chart %q", index.APIVersion, index.Generated, slices.Collect(maps.Keys(index.Entries)), a.Spec.Chart)
	}
	e := entries[0]
	sum := sha256.Sum256(readFile(t, archive))
	if e.Name != a.Spec.Chart || e.Version != a.Spec.Version || e.APIVersion != "v2" || e.Created.IsZero() ||
		e.Digest != hex.EncodeToString(sum[:]) || !slices.Equal(e.URLs, []string{filepath.Base(archive)}) {
		t.Fatalf("index entry %+v (urls %v, digest %s); want %s %s, digest %x, urls [%s]",
			e.Metadata, e.URLs, e.Digest, a.Spec.Chart, a.Spec.Version, sum, filepath.Base(archive))
	}

	base, err := url.Parse(repo + "/")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := url.Parse(e.URLs[0])
	if err != nil {
		t.Fatal(err)
	}
	tgz := get(t, base.ResolveReference(ref).String())
	if got := sha256.Sum256(tgz); hex.EncodeToString(got[:]) != e.Digest {
		t.Fatalf("downloaded archive has sha256 %x, the index says %s", got, e.Digest)
	}
	if c, err := loader.LoadArchive(bytes.NewReader(tgz)); err != nil || c.Metadata.Version != a.Spec.Version {
		t.Fatalf("helm's loader on the archive: %v, %v", c, err)
	}
	want := chartFiles(t, deployPath(t, ChartDir))
	got := archiveFiles(t, tgz, e.Name+"/")
	// `helm package` writes Chart.yaml from the parsed metadata, without
	// the generated header's comments: it must say the same.
	var gotMeta, wantMeta chart.Metadata
	if err := yaml.UnmarshalStrict(got["Chart.yaml"], &gotMeta); err != nil || yaml.UnmarshalStrict(want["Chart.yaml"], &wantMeta) != nil ||
		!reflect.DeepEqual(gotMeta, wantMeta) {
		t.Errorf("archive's Chart.yaml says %+v (%v), deploy/chart's %+v", gotMeta, err, wantMeta)
	}
	delete(want, "Chart.yaml")
	delete(got, "Chart.yaml")
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if !bytes.Equal(got[name], want[name]) {
			t.Errorf("archive's %s differs from deploy/chart's (or is missing)", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("archive holds %s, which deploy/chart does not", name)
		}
	}
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", u, resp.Status, err)
	}
	return data
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// chartFiles is every file under dir, by slash path relative to it.
func chartFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err == nil {
			files[filepath.ToSlash(rel)] = readFile(t, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// archiveFiles is every regular file of a .tgz, by path with prefix cut;
// a file outside prefix fails the test.
func archiveFiles(t *testing.T, tgz []byte, prefix string) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	tr, files := tar.NewReader(zr), map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		name, ok := strings.CutPrefix(h.Name, prefix)
		if h.Typeflag != tar.TypeReg || !ok {
			t.Fatalf("archive entry %s (type %c) is not a file under %s", h.Name, h.Typeflag, prefix)
		}
		if files[name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}
