// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hpmount/hpmount/test/manifests"
)

// ProvenanceName is the release's provenance: one in-toto statement whose
// subjects are every other artefact, written before SHA256SUMS so that the
// sums list it too.
const ProvenanceName = "hpmount.intoto.json"

// The in-toto statement and SLSA provenance types the statement uses.
const (
	StatementType  = "https://in-toto.io/Statement/v1"
	ProvenanceType = "https://slsa.dev/provenance/v1"
	// BuildType names this package's build: the parameters below say
	// everything it reads besides the source and the Go toolchain.
	BuildType = Source + "/test/release@v1"
	// BuilderID is the command that ran it.
	BuilderID = Source + "/test/release/cmd/release"
)

// Statement is an in-toto v1 statement of SLSA v1 provenance, with the
// fields this release fills.
type Statement struct {
	Type          string     `json:"_type"`
	Subject       []Subject  `json:"subject"`
	PredicateType string     `json:"predicateType"`
	Predicate     Provenance `json:"predicate"`
}

// Subject is one artefact, by its path in the release and its digest.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Provenance is SLSA v1's predicate: how the subjects were built.
type Provenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

// BuildDefinition is the build's inputs. ExternalParameters are the
// release's Options; InternalParameters the build's fixed settings.
type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   map[string]string    `json:"externalParameters"`
	InternalParameters   map[string]string    `json:"internalParameters"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
}

// ResourceDescriptor names a dependency: the source and the toolchain.
type ResourceDescriptor struct {
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest,omitempty"`
}

// RunDetails says who built it. No start or end time: they would differ
// between two builds of the same inputs.
type RunDetails struct {
	Builder struct {
		ID string `json:"id"`
	} `json:"builder"`
}

// writeProvenance writes ProvenanceName over every file already in the
// release folder. Nothing signs it: offline, a signature would need a key
// this build does not hold; the operator's signing step can sign it as is.
func writeProvenance(opts Options, agent string) error {
	files, err := Files(opts.OutDir)
	if err != nil {
		return err
	}
	goVersion, err := toolchain(agent)
	if err != nil {
		return err
	}
	st := Statement{Type: StatementType, PredicateType: ProvenanceType}
	for _, f := range files {
		sum, err := manifests.FileDigest(filepath.Join(opts.OutDir, f))
		if err != nil {
			return err
		}
		st.Subject = append(st.Subject, Subject{Name: f, Digest: map[string]string{"sha256": sum}})
	}
	st.Predicate.BuildDefinition = BuildDefinition{
		BuildType: BuildType,
		ExternalParameters: map[string]string{"version": opts.Version, "commit": opts.Commit,
			"sourceDateEpoch": fmt.Sprint(opts.Date.Unix())},
		InternalParameters: map[string]string{"CGO_ENABLED": "0", "GOAMD64": "v1", "GOARM64": "v8.0",
			"flags": "-trimpath -buildvcs=false -ldflags=-s -w -buildid="},
		ResolvedDependencies: []ResourceDescriptor{
			{URI: "git+" + Source + "@" + opts.Commit, Digest: commitDigest(opts.Commit)},
			{URI: "pkg:golang/toolchain@" + goVersion},
		},
	}
	st.Predicate.RunDetails.Builder.ID = BuilderID
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(opts.OutDir, ProvenanceName), append(b, '\n'), 0o644)
}

// commitDigest is the source's digest: a commit hash, and none for a tree
// with uncommitted changes (Revision's "-dirty"), which no commit names.
func commitDigest(commit string) map[string]string {
	if strings.HasSuffix(commit, "-dirty") {
		return nil
	}
	return map[string]string{"gitCommit": commit}
}

// toolchain is the Go release that built binary, as it records itself.
func toolchain(binary string) (string, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return "", fmt.Errorf("toolchain of %q: %w", binary, err)
	}
	return info.GoVersion, nil
}
