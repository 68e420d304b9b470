// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// A Helm chart repository is a folder served over HTTP: an index.yaml and
// the packaged charts it lists (helm's "chart repository guide"). PackageChart
// writes one for deploy/chart, so an operator can serve it from any static
// host and name it in the Harvester Addon's spec.repo.

// IndexFile is a chart repository's index.yaml, as helm's pkg/repo
// (helm.sh/helm/v3 v3.21.4, IndexFile) writes and reads it. pkg/repo itself
// is not imported: it pulls in helm's OCI registry client.
type IndexFile struct {
	APIVersion string                    `json:"apiVersion"`
	Generated  time.Time                 `json:"generated"`
	Entries    map[string][]ChartVersion `json:"entries"`
}

// ChartVersion is one chart version in an index: the chart's Chart.yaml
// fields inline, where to download it (URLs, relative to the repository
// URL or absolute), when it was indexed and the sha256 of its archive.
type ChartVersion struct {
	*chart.Metadata
	URLs    []string  `json:"urls"`
	Created time.Time `json:"created,omitempty"`
	Digest  string    `json:"digest,omitempty"`
}

// IndexName is the file a chart repository serves its index as.
const IndexName = "index.yaml"

// PackageChart packages deploy/chart into outDir as `helm package` does
// (helm's loader, then chartutil.Save: <name>-<version>.tgz) and writes
// outDir/index.yaml listing it with a URL relative to the repository, so
// the folder works wherever it is served. It returns the archive's path.
func PackageChart(deployDir, outDir string, now time.Time) (string, error) {
	c, err := loader.LoadDir(filepath.Join(deployDir, ChartDir))
	if err != nil {
		return "", fmt.Errorf("load chart %q: %w", filepath.Join(deployDir, ChartDir), err)
	}
	archive, err := chartutil.Save(c, outDir)
	if err != nil {
		return "", fmt.Errorf("package chart into %q: %w", outDir, err)
	}
	digest, err := FileDigest(archive)
	if err != nil {
		return "", err
	}
	index := IndexFile{APIVersion: "v1", Generated: now, Entries: map[string][]ChartVersion{
		c.Name(): {{Metadata: c.Metadata, URLs: []string{filepath.Base(archive)}, Created: now, Digest: digest}},
	}}
	data, err := yaml.Marshal(index)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", IndexName, err)
	}
	if err := os.WriteFile(filepath.Join(outDir, IndexName), data, 0o644); err != nil {
		return "", fmt.Errorf("write %q: %w", filepath.Join(outDir, IndexName), err)
	}
	return archive, nil
}

// FileDigest is the hex sha256 of a file, the index's digest (helm's
// provenance.DigestFile); the release's SHA256SUMS uses it too.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("digest %q: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
