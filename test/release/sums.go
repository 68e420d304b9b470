// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hpmount/hpmount/test/manifests"
)

// writeSums writes SHA256SUMS in dir over every regular file below it, in
// the format `sha256sum -c` reads, sorted by path, and returns the paths.
func writeSums(dir string) ([]string, error) {
	files, err := Files(dir)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, f := range files {
		sum, err := manifests.FileDigest(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	if err := os.WriteFile(filepath.Join(dir, SumsName), []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", SumsName, err)
	}
	files = append(files, SumsName)
	sort.Strings(files)
	return files, nil
}

// Files lists the regular files below dir, slash-separated and sorted,
// SHA256SUMS left out.
func Files(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); rel != SumsName {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}
