// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"sigs.k8s.io/yaml"

	"github.com/hpmount/hpmount/test/manifests"
)

// ChartRepo writes the Helm chart repository of deployDir's chart into
// outDir, as manifests.PackageChart does (helm's loader and chartutil.Save,
// then index.yaml), but reproducibly: chartutil.Save stamps each archive
// entry with the clock, so the archive is rewritten with date on every
// entry, and the index with date and the new digest. A version other than
// "" sets the chart's version (without the v) and appVersion, as helm
// package --version --app-version do; the chart's image.tag, when set,
// must then be that version. It returns the archive's path.
func ChartRepo(deployDir, outDir, version string, date time.Time) (string, error) {
	tmp, err := os.MkdirTemp("", "hpmount-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	chartDir := filepath.Join(tmp, manifests.ChartDir)
	if err := os.CopyFS(chartDir, os.DirFS(filepath.Join(deployDir, manifests.ChartDir))); err != nil {
		return "", fmt.Errorf("copy chart: %w", err)
	}
	if version != "" {
		if err := setChartVersion(chartDir, version); err != nil {
			return "", err
		}
	}
	packed, err := manifests.PackageChart(tmp, filepath.Join(tmp, "repo"), date.UTC())
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	archive := filepath.Join(outDir, filepath.Base(packed))
	if err := restampTgz(packed, archive, date); err != nil {
		return "", err
	}
	return archive, reindex(filepath.Join(tmp, "repo", manifests.IndexName), filepath.Join(outDir, manifests.IndexName), archive)
}

// setChartVersion sets Chart.yaml's version and appVersion and checks
// values.yaml's image.tag against them.
func setChartVersion(chartDir, version string) error {
	path := filepath.Join(chartDir, "Chart.yaml")
	var md chart.Metadata
	if err := readYAML(path, &md); err != nil {
		return err
	}
	md.Version, md.AppVersion = strings.TrimPrefix(version, "v"), version
	data, err := yaml.Marshal(&md)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	var values struct {
		Image struct {
			Tag string `json:"tag"`
		} `json:"image"`
	}
	if err := readYAML(filepath.Join(chartDir, "values.yaml"), &values); err != nil {
		return err
	}
	if tag := values.Image.Tag; tag != "" && tag != version {
		return fmt.Errorf("chart's image.tag is %q, not the release version %q: the chart would deploy another image (set it, or default it to .Chart.AppVersion)", tag, version)
	}
	return nil
}

func readYAML(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %q: %w", path, err)
	}
	return nil
}

// restampTgz copies the gzipped tar at src to dst with every entry's time
// set to date; names, modes, contents and the gzip header helm writes stay.
func restampTgz(src, dst string, date time.Time) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return fmt.Errorf("read %q: %w", src, err)
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	zw := gzip.NewWriter(out)
	zw.Header = gzip.Header{Comment: zr.Header.Comment, Extra: zr.Header.Extra, Name: zr.Header.Name, OS: zr.Header.OS}
	if err := copyTar(tar.NewReader(zr), tar.NewWriter(zw), date); err != nil {
		return fmt.Errorf("restamp %q: %w", src, err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return out.Close()
}

func copyTar(tr *tar.Reader, tw *tar.Writer, date time.Time) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		h.ModTime, h.AccessTime, h.ChangeTime, h.Format = date, time.Time{}, time.Time{}, tar.FormatUnknown
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// reindex writes the index at src to dst with each entry's digest that of
// archive (the index lists the one chart).
func reindex(src, dst, archive string) error {
	var index manifests.IndexFile
	if err := readYAML(src, &index); err != nil {
		return err
	}
	digest, err := manifests.FileDigest(archive)
	if err != nil {
		return err
	}
	for _, versions := range index.Entries {
		for i := range versions {
			versions[i].Digest = digest
		}
	}
	data, err := yaml.Marshal(index)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
