// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command chartgen writes the Helm chart in deploy/chart from the kustomize
// render of deploy/ (test/manifests.GenerateChart): `go run ./test/chartgen`
// after any change under deploy/. test/manifests fails while the checked-in
// chart differs from what this writes.
//
// With -package DIR it instead packages deploy/chart as a Helm chart
// repository in DIR (test/release.ChartRepo over test/manifests.PackageChart:
// <name>-<version>.tgz and index.yaml), to serve from any static HTTP host
// for the Harvester Addon. Its times are the commit's (or
// $SOURCE_DATE_EPOCH), so the same commit packages to the same bytes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hpmount/hpmount/test/manifests"
	"github.com/hpmount/hpmount/test/release"
)

func main() {
	pkg := flag.String("package", "", "package deploy/chart as a Helm chart repository (a .tgz and index.yaml) in this folder")
	flag.Parse()
	if err := run(*pkg); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

func run(pkg string) error {
	deploy, err := manifests.DeployDir()
	if err != nil {
		return err
	}
	if pkg != "" {
		date, err := release.SourceDate(context.Background(), deploy)
		if err != nil {
			return err
		}
		archive, err := release.ChartRepo(deploy, pkg, "", date)
		if err != nil {
			return err
		}
		fmt.Printf("wrote %s and %s: serve %s over HTTP and set its URL as the Addon's spec.repo\n",
			archive, filepath.Join(pkg, manifests.IndexName), pkg)
		return nil
	}
	files, err := manifests.GenerateChart(deploy)
	if err != nil {
		return err
	}
	chart := filepath.Join(deploy, manifests.ChartDir)
	if err := removeStaleTemplates(chart, files); err != nil {
		return err
	}
	for name, data := range files {
		path := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	fmt.Printf("wrote %d files to %s\n", len(files), chart)
	return nil
}

// removeStaleTemplates deletes generated templates of objects deploy/ no
// longer has; every file in templates/ is generated.
func removeStaleTemplates(chart string, files map[string][]byte) error {
	entries, err := os.ReadDir(filepath.Join(chart, "templates"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := "templates/" + e.Name()
		if _, keep := files[name]; !keep && strings.HasSuffix(name, ".yaml") {
			if err := os.Remove(filepath.Join(chart, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
