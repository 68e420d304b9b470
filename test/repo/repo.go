// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package repo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Module is the module path of the checkout's go.mod.
const Module = "github.com/hpmount/hpmount"

// Root is the checkout's top folder: the nearest folder, from the working
// directory up, whose go.mod declares Module.
func Root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the hpmount checkout: %w", err)
	}
	return rootFrom(wd)
}

// Dir is the folder rel (slash-separated, such as "deploy") of the checkout.
func Dir(rel string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, filepath.FromSlash(rel)), nil
}

func rootFrom(dir string) (string, error) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && modulePath(data) == Module {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("find the hpmount checkout: no go.mod of %s in %q or above", Module, dir)
		}
	}
}

// modulePath is the path of go.mod's module directive, or "".
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}
