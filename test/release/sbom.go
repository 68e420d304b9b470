// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// SBOMSuffix follows a binary's name to name its SBOM.
const SBOMSuffix = ".cdx.json"

// bom is the part of a CycloneDX 1.5 document (JSON) an SBOM of Go modules
// needs.
type bom struct {
	BOMFormat    string       `json:"bomFormat"`
	SpecVersion  string       `json:"specVersion"`
	SerialNumber string       `json:"serialNumber"`
	Version      int          `json:"version"`
	Metadata     bomMetadata  `json:"metadata"`
	Components   []component  `json:"components"`
	Dependencies []dependency `json:"dependencies"`
}

type bomMetadata struct {
	Timestamp string    `json:"timestamp"`
	Component component `json:"component"`
}

type component struct {
	BOMRef     string     `json:"bom-ref"`
	Type       string     `json:"type"`
	Name       string     `json:"name"`
	Version    string     `json:"version"`
	PURL       string     `json:"purl,omitempty"`
	Licenses   []license  `json:"licenses,omitempty"`
	Hashes     []hash     `json:"hashes,omitempty"`
	Properties []property `json:"properties,omitempty"`
}

type license struct {
	License struct {
		ID string `json:"id"`
	} `json:"license"`
}

type hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// writeSBOM writes the SBOM of the binary at path beside it.
func writeSBOM(path string, opts Options) error {
	doc, err := SBOM(path, opts.Version, opts.Date)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path+SBOMSuffix, append(data, '\n'), 0o644)
}

// SBOM describes the binary at path: the main module, at the release
// version, with the binary's
// sha256, and every module and the Go standard library linked into it, as
// the binary's own build information lists them (a replaced module is
// listed as its replacement, which is what was compiled).
func SBOM(path, version string, date time.Time) (any, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("build information of %q: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	main := component{
		Type: "application", Name: filepath.Base(path), Version: version,
		PURL:     purl(info.Main.Path, version),
		Licenses: []license{spdx(License)},
		Hashes:   []hash{{Alg: "SHA-256", Content: fmt.Sprintf("%x", sum)}},
		Properties: []property{{"go:module", info.Main.Path}, {"go:package", info.Path},
			{"go:toolchain", info.GoVersion}},
	}
	for _, s := range info.Settings {
		main.Properties = append(main.Properties, property{"go:build:" + s.Key, s.Value})
	}
	main.BOMRef = main.PURL
	comps := []component{{Type: "library", Name: "stdlib", Version: info.GoVersion, PURL: purl("stdlib", info.GoVersion)}}
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		c := component{Type: "library", Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version)}
		if m.Sum != "" {
			c.Properties = []property{{"go:sum", m.Sum}}
		}
		comps = append(comps, c)
	}
	sort.Slice(comps, func(i, j int) bool { return comps[i].PURL < comps[j].PURL })
	deps := dependency{Ref: main.BOMRef, DependsOn: []string{}}
	for i := range comps {
		comps[i].BOMRef = comps[i].PURL
		deps.DependsOn = append(deps.DependsOn, comps[i].BOMRef)
	}
	return bom{
		BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		SerialNumber: serialNumber(sum),
		Metadata:     bomMetadata{Timestamp: date.UTC().Format(time.RFC3339), Component: main},
		Components:   comps, Dependencies: []dependency{deps},
	}, nil
}

// purl is the package URL of a Go module (purl-spec's golang type): each
// path segment escaped, the version after @.
func purl(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	p := "pkg:golang/" + strings.Join(segs, "/")
	if version != "" {
		p += "@" + url.PathEscape(version)
	}
	return p
}

func spdx(id string) license {
	var l license
	l.License.ID = id
	return l
}

// serialNumber is a UUID (version 5 layout) from the binary's digest:
// another build of the same bytes gets the same number.
func serialNumber(sum [32]byte) string {
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
