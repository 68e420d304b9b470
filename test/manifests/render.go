// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"
	"path/filepath"
	"runtime"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// DeployDir is the absolute path of the repository's deploy/ folder, found
// from this source file so that tests of any package can use it.
func DeployDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("locate deploy dir: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy"), nil
}

// Render builds the kustomization in dir (e.g. deploy/ or
// deploy/monitoring/) with kustomize's default options and returns the
// multi-document YAML that `kustomize build dir` prints.
func Render(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %q: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %q: encode YAML: %w", dir, err)
	}
	return out, nil
}
