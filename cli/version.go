// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Build is what a binary says of itself: `version` prints it, and
// SECURITY.md asks reporters for it.
type Build struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	// Modified: the revision's tree had changes when it was built ("" when
	// the build does not say).
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// BuildOf is the build a binary was linked as: version and revision as
// the release set them with -ldflags "-X main.version=... -X
// main.commit=...", or, where a plain `go build` left their defaults
// ("dev", "unknown"), the module version and VCS revision Go stamped into
// the binary.
func BuildOf(version, revision string) Build {
	b := Build{Version: version, Revision: revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && b.Revision == "unknown":
			b.Revision = s.Value
		case s.Key == "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the text of `version` and of --version.
func (b Build) String() string {
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("version: %s\nrevision: %s\ngo: %s %s\n", b.Version, rev, b.GoVersion, b.Platform)
}

// VersionCommand is `version [-o text|json]` for the binary name of b.
func VersionCommand(name string, b Build) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, revision and Go version of " + name,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return b.write(cmd.OutOrStdout(), name, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func (b Build) write(w io.Writer, name, output string) error {
	switch output {
	case "text":
		_, err := fmt.Fprintf(w, "%s\n%s", name, b)
		return err
	case "json":
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(b)
	}
	return UsageError{Err: fmt.Errorf("unknown output format %q: want text or json", output)}
}

// SetVersion gives root a --version flag that prints b as `version` does.
func SetVersion(root *cobra.Command, b Build) {
	root.Version = b.Version
	root.SetVersionTemplate(root.Name() + "\n" + b.String())
}
