// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hpmount/hpmount/cli"
)

// Plugin is the kubectl plugin's command folder under cmd/.
const Plugin = "kubectl-hpmount"

// KrewManifestName is the krew manifest written beside SHA256SUMS. It
// holds the archives' digests, so it cannot be among the sums itself.
const KrewManifestName = "hpmount.yaml"

// krewArchiveName is what krew downloads for one platform.
func krewArchiveName(p Platform) string { return cli.KrewArchive(p.OS, p.Arch) }

// writeKrewArchive packs the plugin's binary for p with the LICENSE, as
// krew installs it.
func writeKrewArchive(opts Options, binary string, p Platform) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	license, err := os.ReadFile(filepath.Join(opts.RepoDir, "LICENSE"))
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := cli.WriteKrewArchive(&b, cli.KrewPlatform{OS: p.OS, Arch: p.Arch}, bin, license, opts.Date); err != nil {
		return fmt.Errorf("krew archive for %s: %w", p, err)
	}
	return os.WriteFile(filepath.Join(opts.OutDir, krewArchiveName(p)), b.Bytes(), 0o644)
}

// writeKrewManifest fills deploy/krew/hpmount.yaml with the version and
// the archives' digests from the finished SHA256SUMS.
func writeKrewManifest(opts Options) error {
	tmpl, err := os.ReadFile(filepath.Join(opts.RepoDir, "deploy", "krew", KrewManifestName))
	if err != nil {
		return err
	}
	sums, err := os.Open(filepath.Join(opts.OutDir, SumsName))
	if err != nil {
		return err
	}
	defer sums.Close()
	out, err := cli.RenderKrewManifest(tmpl, opts.Version, sums)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(opts.OutDir, KrewManifestName), out, 0o644)
}
