// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// krewPlugin is krew's Plugin (v1alpha2), strictly: a misspelt field of
// the manifest fails the test as it would fail krew's validation.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifest renders deploy/krew/hpmount.yaml with the digests of
// real archives and checks what krew needs of each platform: the
// release's archive URI, its sha256, and a bin the archive holds.
func TestKrewManifest(t *testing.T) {
	tmpl, err := os.ReadFile("../deploy/krew/hpmount.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	digests := map[KrewPlatform]string{}
	for _, p := range KrewPlatforms {
		var b bytes.Buffer
		if err := WriteKrewArchive(&b, p, []byte("binary for "+p.OS+"/"+p.Arch), []byte("license"), time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		d := sha256.Sum256(b.Bytes())
		digests[p] = hex.EncodeToString(d[:])
		fmt.Fprintf(&sums, "%s  %s\n", digests[p], p.Archive())
	}
	out, err := RenderKrewManifest(tmpl, "v1.2.3", strings.NewReader(sums.String()))
	if err != nil {
		t.Fatal(err)
	}
	var m krewPlugin
	if err := yaml.UnmarshalStrict(out, &m); err != nil {
		t.Fatalf("rendered manifest: %v\n%s", err, out)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "hpmount" || m.Spec.Version != "v1.2.3" || m.Spec.ShortDescription == "" {
		t.Errorf("header: %+v", m)
	}
	if len(m.Spec.Platforms) != len(KrewPlatforms) {
		t.Fatalf("%d platforms, want %d: %v", len(m.Spec.Platforms), len(KrewPlatforms), KrewPlatforms)
	}
	for i, p := range KrewPlatforms {
		pl := m.Spec.Platforms[i]
		wantURI := "https://github.com/hpmount/hpmount/releases/download/v1.2.3/" + KrewArchive(p.OS, p.Arch)
		if pl.Selector.MatchLabels["os"] != p.OS || pl.Selector.MatchLabels["arch"] != p.Arch || pl.URI != wantURI || pl.SHA256 != digests[p] {
			t.Errorf("platform %d: %+v, want %s/%s at %s with sha256 %s", i, pl, p.OS, p.Arch, wantURI, digests[p])
		}
		wantBin := map[string]string{"linux": "kubectl-hpmount", "darwin": "kubectl-hpmount", "windows": "kubectl-hpmount.exe"}[p.OS]
		if pl.Bin != wantBin || len(pl.Files) == 0 || pl.Files[0].From != wantBin {
			t.Errorf("platform %d: bin %q files %+v, want %s from the archive", i, pl.Bin, pl.Files, wantBin)
		}
	}
	first := sums.String()[:strings.Index(sums.String(), "\n")+1]
	if _, err := RenderKrewManifest(tmpl, "v1.2.3", strings.NewReader(first)); err == nil || !strings.Contains(err.Error(), "arm64") {
		t.Errorf("linux/arm64 missing from SHA256SUMS: error %v, want one naming it", err)
	}
}

// TestKrewArchive: the archive holds the plugin (executable, with .exe on
// Windows) and LICENSE, and the same inputs give the same bytes.
func TestKrewArchive(t *testing.T) {
	for _, tt := range []struct {
		p    KrewPlatform
		want string
	}{
		{KrewPlatform{"linux", "amd64"}, "kubectl-hpmount 755 bin,LICENSE 644 lic"},
		{KrewPlatform{"darwin", "arm64"}, "kubectl-hpmount 755 bin,LICENSE 644 lic"},
		{KrewPlatform{"windows", "amd64"}, "kubectl-hpmount.exe 755 bin,LICENSE 644 lic"},
	} {
		var a, b bytes.Buffer
		for _, w := range []*bytes.Buffer{&a, &b} {
			if err := WriteKrewArchive(w, tt.p, []byte("bin"), []byte("lic"), time.Unix(1700000000, 0)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("%v: two writes differ", tt.p)
		}
		if got := archiveEntries(t, &a); got != tt.want {
			t.Errorf("%v: archive %q, want %q", tt.p, got, tt.want)
		}
	}
}

// archiveEntries lists a .tar.gz's entries as "name mode data", comma
// separated.
func archiveEntries(t *testing.T, r io.Reader) string {
	t.Helper()
	gz, err := gzip.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got = append(got, fmt.Sprintf("%s %o %s", h.Name, h.Mode, data))
	}
	return strings.Join(got, ",")
}

func TestParseSHA256SUMS(t *testing.T) {
	d := strings.Repeat("ab", 32)
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{in: d + "  a.tar.gz\n" + d + " *b\n\n", want: map[string]string{"a.tar.gz": d, "b": d}},
		{in: "abc  a\n", wantErr: true},
		{in: d + "\n", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseSHA256SUMS(strings.NewReader(tt.in))
		if (err != nil) != tt.wantErr || (!tt.wantErr && fmt.Sprint(got) != fmt.Sprint(tt.want)) {
			t.Errorf("%q: %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
