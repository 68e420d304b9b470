// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

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

// TestKrewManifest renders plugins/krew/hpmount.yaml with the digests of
// real archives and checks what krew needs of each linux platform: the
// release's archive URI, its sha256, and a bin the archive holds.
func TestKrewManifest(t *testing.T) {
	tmpl, err := os.ReadFile("../plugins/krew/hpmount.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	digests := map[string]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		var b bytes.Buffer
		if err := WriteKrewArchive(&b, []byte("binary for "+arch), []byte("license"), time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		d := sha256.Sum256(b.Bytes())
		digests[arch] = hex.EncodeToString(d[:])
		fmt.Fprintf(&sums, "%s  %s\n", digests[arch], KrewArchive("linux", arch))
	}
	out, err := RenderKrewManifest(tmpl, "v1.2.3", strings.NewReader(sums.String()))
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(out, &p); err != nil {
		t.Fatalf("rendered manifest: %v\n%s", err, out)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "hpmount" || p.Spec.Version != "v1.2.3" || p.Spec.ShortDescription == "" {
		t.Errorf("header: %+v", p)
	}
	if len(p.Spec.Platforms) != 2 {
		t.Fatalf("%d platforms, want linux amd64 and arm64", len(p.Spec.Platforms))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		pl := p.Spec.Platforms[i]
		wantURI := "https://github.com/hpmount/hpmount/releases/download/v1.2.3/" + KrewArchive("linux", arch)
		if pl.Selector.MatchLabels["os"] != "linux" || pl.Selector.MatchLabels["arch"] != arch || pl.URI != wantURI || pl.SHA256 != digests[arch] {
			t.Errorf("platform %d: %+v, want linux/%s at %s with sha256 %s", i, pl, arch, wantURI, digests[arch])
		}
		if pl.Bin != "kubectl-hpmount" || len(pl.Files) == 0 || pl.Files[0].From != "kubectl-hpmount" {
			t.Errorf("platform %d: bin %q files %+v, want kubectl-hpmount from the archive", i, pl.Bin, pl.Files)
		}
	}
	if _, err := RenderKrewManifest(tmpl, "v1.2.3", strings.NewReader(sums.String()[:strings.Index(sums.String(), "\n")+1])); err == nil || !strings.Contains(err.Error(), "arm64") {
		t.Errorf("arm64 missing from SHA256SUMS: error %v, want one naming it", err)
	}
}

// TestKrewArchive: the archive holds kubectl-hpmount (executable) and
// LICENSE, and the same inputs give the same bytes.
func TestKrewArchive(t *testing.T) {
	var a, b bytes.Buffer
	for _, w := range []*bytes.Buffer{&a, &b} {
		if err := WriteKrewArchive(w, []byte("bin"), []byte("lic"), time.Unix(1700000000, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two writes differ")
	}
	gz, err := gzip.NewReader(&a)
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
	if want := "kubectl-hpmount 755 bin,LICENSE 644 lic"; strings.Join(got, ",") != want {
		t.Errorf("archive %q, want %q", strings.Join(got, ","), want)
	}
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
