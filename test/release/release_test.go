// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/hpmount/hpmount/test/manifests"
	"github.com/hpmount/hpmount/test/repo"
)

const testCommit = "0123456789abcdef0123456789abcdef01234567"

// testDate is the release date of the tests: any fixed time.
var testDate = time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// testVersion is the version the chart's image.tag names, or any version
// when it names none: Build refuses a chart that deploys another image.
func testVersion(t *testing.T, repo string) string {
	t.Helper()
	var values struct {
		Image struct{ Tag string } `json:"image"`
	}
	if err := readYAML(filepath.Join(repo, "deploy", "chart", "values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Tag != "" {
		return values.Image.Tag
	}
	return "v9.8.7-test.1"
}

// TestRelease builds the release twice into two folders and compares them
// byte for byte, then checks what each artefact says about itself and runs
// the image. The second build recompiles nothing (go's build cache) but
// links, packs and packages again: each is a step that could stamp a time
// or a path.
func TestRelease(t *testing.T) {
	repo := repoRoot(t)
	opts := Options{RepoDir: repo, Version: testVersion(t, repo), Commit: testCommit, Date: testDate}
	var files [2][]string
	var dirs [2]string
	for i := range dirs {
		dirs[i] = t.TempDir()
		o := opts
		o.OutDir = dirs[i]
		var err error
		if files[i], err = Build(context.Background(), o); err != nil {
			t.Fatalf("build %d: %v", i+1, err)
		}
	}
	t.Run("Reproducible", func(t *testing.T) { compareTrees(t, dirs[0], dirs[1], files) })
	t.Run("Contents", func(t *testing.T) { checkContents(t, dirs[0], files[0], opts) })
	t.Run("Sums", func(t *testing.T) { checkSums(t, dirs[0], files[0]) })
	t.Run("SBOM", func(t *testing.T) { checkSBOM(t, dirs[0], repo, opts) })
	t.Run("Provenance", func(t *testing.T) { checkProvenance(t, dirs[0], files[0], opts) })
	t.Run("Chart", func(t *testing.T) { checkChart(t, dirs[0], opts) })
	t.Run("Image", func(t *testing.T) { checkImage(t, dirs[0], opts) })
}

func compareTrees(t *testing.T, a, b string, files [2][]string) {
	if strings.Join(files[0], "\n") != strings.Join(files[1], "\n") {
		t.Fatalf("the builds wrote different files:\n%v\n%v", files[0], files[1])
	}
	for _, f := range files[0] {
		da, errA := os.ReadFile(filepath.Join(a, f))
		db, errB := os.ReadFile(filepath.Join(b, f))
		if errA != nil || errB != nil {
			t.Fatalf("read %s: %v, %v", f, errA, errB)
		}
		if !bytes.Equal(da, db) {
			t.Errorf("%s differs between two builds of the same inputs (%d and %d bytes)", f, len(da), len(db))
		}
		sa, _ := os.Stat(filepath.Join(a, f))
		sb, _ := os.Stat(filepath.Join(b, f))
		if sa.Mode() != sb.Mode() {
			t.Errorf("%s: mode %v and %v", f, sa.Mode(), sb.Mode())
		}
	}
}

func checkContents(t *testing.T, dist string, files []string, opts Options) {
	have := map[string]bool{}
	for _, f := range files {
		have[f] = true
	}
	want := []string{SumsName, "image/index.json", "image/oci-layout",
		"chart/" + manifests.IndexName, "chart/hpmount-" + strings.TrimPrefix(opts.Version, "v") + ".tgz"}
	cmds, err := Commands(opts.RepoDir)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, KrewManifestName, ProvenanceName)
	for _, c := range cmds {
		for _, p := range PlatformsOf(c) {
			want = append(want, BinaryName(c, p), BinaryName(c, p)+SBOMSuffix)
			if c == Plugin {
				want = append(want, krewArchiveName(p))
			}
			checkTarget(t, filepath.Join(dist, BinaryName(c, p)), p)
		}
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("release lacks %s; it has %v", w, files)
		}
	}
	if n := len(PlatformsOf(Plugin)); n != 6 {
		t.Errorf("the plugin is built for %d platforms, want linux, darwin and windows on amd64 and arm64", n)
	}
}

// checkTarget checks that the binary at path was built for p, as it
// records itself.
func checkTarget(t *testing.T, path string, p Platform) {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	got := map[string]string{}
	for _, s := range info.Settings {
		got[s.Key] = s.Value
	}
	if got["GOOS"] != p.OS || got["GOARCH"] != p.Arch || got["CGO_ENABLED"] != "0" {
		t.Errorf("%s was built for %s/%s (CGO_ENABLED=%s), want %s", filepath.Base(path), got["GOOS"], got["GOARCH"], got["CGO_ENABLED"], p)
	}
}

// checkProvenance: the statement names every other artefact with its
// digest, and the source, toolchain and parameters it was built from.
func checkProvenance(t *testing.T, dist string, files []string, opts Options) {
	data, err := os.ReadFile(filepath.Join(dist, ProvenanceName))
	if err != nil {
		t.Fatal(err)
	}
	var st Statement
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != StatementType || st.PredicateType != ProvenanceType || st.Predicate.RunDetails.Builder.ID != BuilderID {
		t.Errorf("statement header: %s %s %s", st.Type, st.PredicateType, st.Predicate.RunDetails.Builder.ID)
	}
	subjects := map[string]string{}
	for _, s := range st.Subject {
		subjects[s.Name] = s.Digest["sha256"]
	}
	for _, f := range files {
		if f == ProvenanceName || f == SumsName || f == KrewManifestName {
			if _, ok := subjects[f]; ok {
				t.Errorf("the provenance names %s, written after it", f)
			}
			continue
		}
		got, err := manifests.FileDigest(filepath.Join(dist, f))
		if err != nil || subjects[f] != got {
			t.Errorf("%s: the provenance says sha256 %q, the file is %s (%v)", f, subjects[f], got, err)
		}
	}
	bd := st.Predicate.BuildDefinition
	if bd.ExternalParameters["version"] != opts.Version || bd.ExternalParameters["commit"] != opts.Commit ||
		bd.ExternalParameters["sourceDateEpoch"] != fmt.Sprint(opts.Date.Unix()) {
		t.Errorf("external parameters %v, want version %s, commit %s, date %d", bd.ExternalParameters, opts.Version, opts.Commit, opts.Date.Unix())
	}
	if len(bd.ResolvedDependencies) != 2 || bd.ResolvedDependencies[0].Digest["gitCommit"] != opts.Commit ||
		bd.ResolvedDependencies[1].URI != "pkg:golang/toolchain@"+runtime.Version() {
		t.Errorf("resolved dependencies %+v, want the commit %s and %s", bd.ResolvedDependencies, opts.Commit, runtime.Version())
	}
}

func checkSums(t *testing.T, dist string, files []string) {
	data, err := os.ReadFile(filepath.Join(dist, SumsName))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(dist, KrewManifestName))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	// Every file but the sums themselves and the krew manifest, which
	// holds sums.
	if len(lines) != len(files)-2 {
		t.Fatalf("%s has %d lines for %d files", SumsName, len(lines), len(files)-2)
	}
	for _, l := range lines {
		sum, name, ok := strings.Cut(l, "  ")
		if !ok {
			t.Fatalf("%s line %q: not sha256sum's format", SumsName, l)
		}
		got, err := manifests.FileDigest(filepath.Join(dist, name))
		if err != nil || got != sum {
			t.Errorf("%s: %s says %s, the file is %s (%v)", name, SumsName, sum, got, err)
		}
		if strings.HasSuffix(name, ".tar.gz") && !strings.Contains(string(manifest), "sha256: "+sum) {
			t.Errorf("%s does not give %s's sha256 %s", KrewManifestName, name, sum)
		}
	}
}

func checkSBOM(t *testing.T, dist, repo string, opts Options) {
	path := filepath.Join(dist, BinaryName(Agent, Platform{"linux", runtime.GOARCH}))
	var doc bom
	data, err := os.ReadFile(path + SBOMSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	sum, _ := manifests.FileDigest(path)
	mc := doc.Metadata.Component
	if doc.BOMFormat != "CycloneDX" || mc.Version != opts.Version || len(mc.Hashes) != 1 || mc.Hashes[0].Content != sum {
		t.Errorf("SBOM metadata: %+v, binary sha256 %s", doc.Metadata, sum)
	}
	// Modules the agent cannot be built without, at go.mod's versions.
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	purls := map[string]bool{}
	for _, c := range doc.Components {
		purls[c.PURL] = true
	}
	for _, mod := range []string{"github.com/spf13/cobra", "k8s.io/client-go", "golang.org/x/sys"} {
		v := moduleVersion(t, string(gomod), mod)
		if p := purl(mod, v); !purls[p] {
			t.Errorf("SBOM lacks %s", p)
		}
	}
	if !purls[purl("stdlib", runtime.Version())] {
		t.Errorf("SBOM lacks the standard library at %s", runtime.Version())
	}
}

func moduleVersion(t *testing.T, gomod, path string) string {
	for _, l := range strings.Split(gomod, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	t.Fatalf("go.mod does not require %s", path)
	return ""
}

func checkChart(t *testing.T, dist string, opts Options) {
	var index struct {
		Generated time.Time `json:"generated"`
		Entries   map[string][]struct {
			Version, AppVersion, Digest string
			URLs                        []string `json:"urls"`
		} `json:"entries"`
	}
	if err := readYAML(filepath.Join(dist, ChartRepoDir, manifests.IndexName), &index); err != nil {
		t.Fatal(err)
	}
	e := index.Entries["hpmount"]
	if len(e) != 1 || !index.Generated.Equal(opts.Date) {
		t.Fatalf("index: %+v", index)
	}
	archive := filepath.Join(dist, ChartRepoDir, e[0].URLs[0])
	sum, err := manifests.FileDigest(archive)
	if err != nil || sum != e[0].Digest || e[0].AppVersion != opts.Version || "v"+e[0].Version != opts.Version {
		t.Errorf("index entry %+v; archive sha256 %s (%v)", e[0], sum, err)
	}
	checkArchiveTimes(t, archive, opts.Date)
	c, err := loader.Load(archive)
	if err != nil {
		t.Fatalf("helm's loader: %v", err)
	}
	if c.Metadata.AppVersion != opts.Version || len(c.Templates) == 0 || c.Schema == nil {
		t.Errorf("the packaged chart: appVersion %q, %d templates, schema %d bytes", c.Metadata.AppVersion, len(c.Templates), len(c.Schema))
	}
}

// checkArchiveTimes: two builds in the same second would hide a clock
// time (chartutil.Save stamps time.Now), so every time is checked.
func checkArchiveTimes(t *testing.T, path string, date time.Time) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.Header.ModTime.IsZero() {
		t.Errorf("%s: gzip header time %v", path, zr.Header.ModTime)
	}
	tr := tar.NewReader(zr)
	n := 0
	for h, err := tr.Next(); !errors.Is(err, io.EOF); h, err = tr.Next() {
		if err != nil {
			t.Fatal(err)
		}
		if n++; !h.ModTime.Equal(date) {
			t.Errorf("%s: %s has time %v, want %v", path, h.Name, h.ModTime, date)
		}
	}
	if n == 0 {
		t.Errorf("%s: no entries", path)
	}
}

func TestChartVersionRefusesAnotherImage(t *testing.T) {
	for _, tc := range []struct {
		tag     string
		wantErr bool
	}{{"", false}, {"v1.2.3", false}, {"v1.2.2", true}} {
		t.Run("tag="+tc.tag, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "Chart.yaml"), "apiVersion: v2\nname: hpmount\nversion: 0.0.1\nappVersion: v0.0.1\n")
			write(t, filepath.Join(dir, "values.yaml"), "image:\n  repository: r\n  tag: \""+tc.tag+"\"\n")
			err := setChartVersion(dir, "v1.2.3")
			if (err != nil) != tc.wantErr {
				t.Fatalf("setChartVersion: %v, want error %v", err, tc.wantErr)
			}
			var md struct{ Version, AppVersion string }
			if err := readYAML(filepath.Join(dir, "Chart.yaml"), &md); err != nil {
				t.Fatal(err)
			}
			if !tc.wantErr && (md.Version != "1.2.3" || md.AppVersion != "v1.2.3") {
				t.Errorf("Chart.yaml: %+v", md)
			}
		})
	}
}

func TestOptionsRefused(t *testing.T) {
	ok := Options{RepoDir: ".", OutDir: "dist", Version: "v1.0.0", Commit: "c", Date: testDate}
	for _, tc := range []struct {
		name   string
		change func(*Options)
	}{
		{"no v", func(o *Options) { o.Version = "1.0.0" }},
		{"two parts", func(o *Options) { o.Version = "v1.0" }},
		{"describe", func(o *Options) { o.Version = "3fba855-dirty" }},
		{"no commit", func(o *Options) { o.Commit = "" }},
		{"no date", func(o *Options) { o.Date = time.Time{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.change(&o)
			if err := o.validate(); err == nil {
				t.Errorf("%+v accepted", o)
			}
		})
	}
	if err := ok.validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
