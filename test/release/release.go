// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hpmount/hpmount/cli"
)

// Platform is one operating system and architecture a release is built for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// Platforms are the targets of every command: Harvester ships both.
var Platforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}

// PlatformsOf are command c's targets: the kubectl plugin's
// (cli.KrewPlatforms) add the operators' workstations.
func PlatformsOf(c string) []Platform {
	if c != Plugin {
		return Platforms
	}
	var out []Platform
	for _, p := range cli.KrewPlatforms {
		out = append(out, Platform{p.OS, p.Arch})
	}
	return out
}

// Source, License and Title name the project in the image's annotations
// and the SBOMs.
const (
	Source  = "https://github.com/hpmount/hpmount"
	License = "Apache-2.0"
	Title   = "hpmount"
)

// Agent is the command the image runs.
const Agent = "hpmount"

// Options are a release's inputs; the same Options on the same source give
// the same bytes.
type Options struct {
	// RepoDir is the module root (holding go.mod, cmd/ and deploy/).
	RepoDir string
	// OutDir receives the release; it must be empty or absent.
	OutDir string
	// Version is vMAJOR.MINOR.PATCH, optionally with a -prerelease.
	Version string
	// Commit is the revision built, as the binaries and image report it.
	Commit string
	// Date is the commit's time: every timestamp in the release.
	Date time.Time
	// Go is the go command; empty means "go" from $PATH.
	Go string
}

// versionRE is a SemVer 2.0 version with a v; the chart gets it without.
var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func (o Options) validate() error {
	var errs []error
	if !versionRE.MatchString(o.Version) {
		errs = append(errs, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH[-PRERELEASE]", o.Version))
	}
	if o.Commit == "" {
		errs = append(errs, errors.New("commit is empty"))
	}
	if o.Date.IsZero() {
		errs = append(errs, errors.New("date is zero: set SOURCE_DATE_EPOCH"))
	}
	if o.RepoDir == "" || o.OutDir == "" {
		errs = append(errs, errors.New("repository and output folders are required"))
	}
	return errors.Join(errs...)
}

// Build writes the release described in the package documentation into
// opts.OutDir and returns the files written, relative to it, sorted.
func Build(ctx context.Context, opts Options) ([]string, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.Date = opts.Date.UTC()
	if err := emptyDir(opts.OutDir); err != nil {
		return nil, err
	}
	commands, err := Commands(opts.RepoDir)
	if err != nil {
		return nil, err
	}
	agents := map[Platform]string{}
	for _, c := range commands {
		for _, p := range PlatformsOf(c) {
			path, err := buildBinary(ctx, opts, c, p)
			if err != nil {
				return nil, err
			}
			if err := writeSBOM(path, opts); err != nil {
				return nil, err
			}
			switch c {
			case Agent:
				agents[p] = path
			case Plugin:
				if err := writeKrewArchive(opts, path, p); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := writeImage(filepath.Join(opts.OutDir, ImageDir), agents, opts); err != nil {
		return nil, err
	}
	if _, err := ChartRepo(filepath.Join(opts.RepoDir, "deploy"), filepath.Join(opts.OutDir, ChartRepoDir), opts.Version, opts.Date); err != nil {
		return nil, err
	}
	if err := writeProvenance(opts, agents[Platforms[0]]); err != nil {
		return nil, err
	}
	files, err := writeSums(opts.OutDir)
	if err != nil {
		return nil, err
	}
	if err := writeKrewManifest(opts); err != nil {
		return nil, err
	}
	files = append(files, KrewManifestName)
	slices.Sort(files)
	return files, nil
}

// Folders of the release.
const (
	ImageDir     = "image"
	ChartRepoDir = "chart"
	SumsName     = "SHA256SUMS"
)

// emptyDir makes dir, refusing one that holds anything: a stale file of an
// older release would land in SHA256SUMS.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err == nil && len(entries) > 0 {
		return fmt.Errorf("output folder %q is not empty", dir)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// Commands are the main packages under cmd/, by folder name.
func Commands(repoDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(repoDir, "cmd"))
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	var cmds []string
	for _, e := range entries {
		if e.IsDir() {
			cmds = append(cmds, e.Name())
		}
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("no command under %q", filepath.Join(repoDir, "cmd"))
	}
	return cmds, nil
}

// SourceDate is $SOURCE_DATE_EPOCH (reproducible-builds.org's variable)
// or else the time of the repository's HEAD commit.
func SourceDate(ctx context.Context, repoDir string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		out, err := git(ctx, repoDir, "log", "-1", "--format=%ct")
		if err != nil {
			return time.Time{}, fmt.Errorf("commit time (or set SOURCE_DATE_EPOCH): %w", err)
		}
		s = out
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("source date %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// Revision is HEAD's full hash, with "-dirty" when tracked files differ
// from it: the image's revision annotation must not claim a commit that
// was not what was built.
func Revision(ctx context.Context, repoDir string) (string, error) {
	head, err := git(ctx, repoDir, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	status, err := git(ctx, repoDir, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", err
	}
	if status != "" {
		head += "-dirty"
	}
	return head, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s in %q: %w", strings.Join(args, " "), dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}
