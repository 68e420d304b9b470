// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/hpmount/hpmount/test/repo"
)

// DeployDir is the absolute path of the repository's deploy/ folder, found
// from the working directory (package repo) so that tests of any package,
// and the tools make runs from the top, can use it.
func DeployDir() (string, error) { return repo.Dir("deploy") }

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
