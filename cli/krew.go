// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/template"
	"time"
)

// KrewPlatform is one operating system and architecture the plugin is
// released for.
type KrewPlatform struct{ OS, Arch string }

// KrewPlatforms are the plugin's platforms: the nodes' (linux) and the
// operators' workstations (darwin, windows), each on amd64 and arm64. The
// krew manifest lists each; the release builds each.
var KrewPlatforms = []KrewPlatform{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// Archive is the name of the plugin's archive for p, as the krew
// manifest's uri names it.
func (p KrewPlatform) Archive() string {
	return "kubectl-hpmount-" + p.OS + "-" + p.Arch + ".tar.gz"
}

// Binary is the plugin's file name in p's archive: kubectl finds a plugin
// on Windows only with the .exe suffix.
func (p KrewPlatform) Binary() string {
	if p.OS == "windows" {
		return "kubectl-hpmount.exe"
	}
	return "kubectl-hpmount"
}

// KrewArchive is the name of the plugin's archive for a platform.
func KrewArchive(os, arch string) string { return KrewPlatform{os, arch}.Archive() }

// WriteKrewArchive writes the .tar.gz krew installs from for p: the binary
// as p.Binary() and the license, with fixed owners, modes and mtime so
// that the same inputs give the same bytes.
func WriteKrewArchive(w io.Writer, p KrewPlatform, binary, license []byte, mtime time.Time) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{p.Binary(), 0o755, binary}, {"LICENSE", 0o644, license}} {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime.UTC(),
			Typeflag: tar.TypeReg, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("tar %q: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("tar %q: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

var sumLine = regexp.MustCompile(`^([0-9a-f]{64}) [ *](\S+)$`)

// ParseSHA256SUMS reads sha256sum's output format: name to hex digest.
func ParseSHA256SUMS(r io.Reader) (map[string]string, error) {
	sums := map[string]string{}
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" {
			continue
		}
		m := sumLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("SHA256SUMS line %d: %q is not \"<sha256>  <file>\"", n, line)
		}
		sums[m[2]] = m[1]
	}
	return sums, s.Err()
}

// RenderKrewManifest fills the manifest template (deploy/krew/hpmount.yaml)
// with the release's version and the archives' digests from SHA256SUMS; an
// archive missing from the sums is an error, never an empty sha256.
func RenderKrewManifest(tmpl []byte, version string, sums io.Reader) ([]byte, error) {
	digests, err := ParseSHA256SUMS(sums)
	if err != nil {
		return nil, err
	}
	t, err := template.New("krew").Option("missingkey=error").Parse(string(tmpl))
	if err != nil {
		return nil, fmt.Errorf("krew manifest template: %w", err)
	}
	var b bytes.Buffer
	err = t.Execute(&b, krewValues{Version: version, Platforms: KrewPlatforms, digests: digests})
	if err != nil {
		return nil, fmt.Errorf("krew manifest: %w", err)
	}
	return b.Bytes(), nil
}

type krewValues struct {
	Version   string
	Platforms []KrewPlatform
	digests   map[string]string
}

// SHA256 is the digest of archive, or an error naming it.
func (v krewValues) SHA256(archive string) (string, error) {
	if d, ok := v.digests[archive]; ok {
		return d, nil
	}
	return "", fmt.Errorf("no sha256 of %q in SHA256SUMS", archive)
}
