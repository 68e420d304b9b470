// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	fix := flag.Bool("fix", false, "add the notice to the files that lack it")
	flag.Parse()
	if err := run(*fix, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "license:", err)
		os.Exit(1)
	}
}

func run(fix bool, paths []string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		if paths, err = sourceFiles(root); err != nil {
			return err
		}
	} else {
		for i, p := range paths {
			if paths[i], err = filepath.Abs(p); err != nil {
				return err
			}
		}
	}
	missing, err := check(paths, fix)
	if err != nil {
		return err
	}
	for _, m := range missing {
		if rel, err := filepath.Rel(root, m); err == nil {
			m = rel
		}
		fmt.Println(m)
	}
	if len(missing) > 0 && !fix {
		return fmt.Errorf("%d files lack the notice: go run ./test/license -fix", len(missing))
	}
	return nil
}

// check returns the files among paths that lack the notice, adding it to
// each when fix is set.
func check(paths []string, fix bool) ([]string, error) {
	var missing []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		s := StyleOf(filepath.ToSlash(p), data)
		if s == None || HasNotice(s, data) {
			continue
		}
		missing = append(missing, p)
		if fix {
			info, err := os.Stat(p)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(p, AddNotice(s, data), info.Mode().Perm()); err != nil {
				return nil, fmt.Errorf("add notice to %q: %w", p, err)
			}
		}
	}
	return missing, nil
}

// sourceFiles are git's tracked and untracked-but-not-ignored files below
// root, absolute, less deleted ones and testdata/ folders.
func sourceFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %q: %w", root, err)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		name := string(f)
		if name == "" || strings.Contains("/"+name, "/testdata/") {
			continue
		}
		p := filepath.Join(root, name)
		if info, err := os.Lstat(p); err != nil || !info.Mode().IsRegular() {
			continue
		}
		files = append(files, p)
	}
	return files, nil
}

// repoRoot is the repository's top folder.
func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
