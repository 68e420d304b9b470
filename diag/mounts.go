// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// Mount table sources for Options.MountSource.
const (
	MountSourceAuto      = "auto"
	MountSourceFindmnt   = "findmnt"
	MountSourceMountinfo = "mountinfo"
)

// FindmntColumns are the columns read from findmnt. OPT-FIELDS carries the
// peer group ids (shared:N, master:N) that PROPAGATION only names, and
// VFS-OPTIONS / FS-OPTIONS are mountinfo's per-mount and superblock options
// (OPTIONS is both joined).
const FindmntColumns = "ID,PARENT,MAJ:MIN,FSROOT,TARGET,SOURCE,FSTYPE,PROPAGATION,OPT-FIELDS,VFS-OPTIONS,FS-OPTIONS"

// FindmntArgs are the arguments of the findmnt run that reads the mount
// table of host.PID: a flat list (--list), untruncated, with SOURCE not
// suffixed by [FSROOT] (--nofsroot), every filesystem (--all). With a
// host.Proc other than /proc, the mountinfo file is named explicitly, since
// --task always reads /proc.
func FindmntArgs(host isolation.Host) []string {
	args := []string{"--json", "--list", "--notruncate", "--nofsroot", "--all"}
	if filepath.Clean(host.Proc) == "/proc" {
		args = append(args, "--task", strconv.Itoa(host.PID))
	} else {
		args = append(args, "--kernel", "--tab-file", host.MountInfo())
	}
	return append(args, "-o", FindmntColumns)
}

// LoadTable reads the mount table of host.PID with findmnt or from its
// mountinfo, as source says ("auto" prefers findmnt when it is installed),
// and returns it with the source actually used.
func LoadTable(ctx context.Context, source string, host isolation.Host) (*mountinfo.Table, string, error) {
	switch source {
	case MountSourceAuto, "":
		if _, err := exec.LookPath("findmnt"); err != nil {
			source = MountSourceMountinfo
		} else {
			source = MountSourceFindmnt
		}
	case MountSourceFindmnt, MountSourceMountinfo:
	default:
		return nil, "", fmt.Errorf("mount source %q: want %q, %q or %q", source, MountSourceAuto, MountSourceFindmnt, MountSourceMountinfo)
	}
	if source == MountSourceMountinfo {
		t, err := mountinfo.ReadTable(host.MountInfo())
		return t, source, err
	}
	mounts, err := RunFindmnt(ctx, host)
	if err != nil {
		return nil, source, err
	}
	return mountinfo.NewTable(mounts), source, nil
}

// RunFindmnt runs findmnt (see FindmntArgs) and parses its output.
func RunFindmnt(ctx context.Context, host isolation.Host) ([]mountinfo.Info, error) {
	args := FindmntArgs(host)
	cmd := exec.CommandContext(ctx, "findmnt", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("findmnt %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return ParseFindmnt(out)
}

// findmntEntry is one filesystem of `findmnt --json --list`. util-linux
// prints numbers as JSON numbers since 2.37 and as strings before, and null
// for empty columns, so every field is decoded loosely.
type findmntEntry struct {
	ID          json.RawMessage `json:"id"`
	Parent      json.RawMessage `json:"parent"`
	MajMin      *string         `json:"maj:min"`
	FSRoot      *string         `json:"fsroot"`
	Target      *string         `json:"target"`
	Source      *string         `json:"source"`
	FSType      *string         `json:"fstype"`
	Propagation *string         `json:"propagation"`
	OptFields   *string         `json:"opt-fields"`
	VFSOptions  *string         `json:"vfs-options"`
	FSOptions   *string         `json:"fs-options"`
}

// ParseFindmnt converts `findmnt --json --list` output with FindmntColumns
// into mount infos in findmnt's (the kernel's) order.
func ParseFindmnt(data []byte) ([]mountinfo.Info, error) {
	var doc struct {
		Filesystems []findmntEntry `json:"filesystems"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("decode findmnt json: %w", err)
	}
	if doc.Filesystems == nil {
		return nil, errors.New("decode findmnt json: no \"filesystems\" list")
	}
	out := make([]mountinfo.Info, 0, len(doc.Filesystems))
	for k, e := range doc.Filesystems {
		info, err := e.info()
		if err != nil {
			return nil, fmt.Errorf("findmnt filesystem %d: %w", k, err)
		}
		out = append(out, info)
	}
	return out, nil
}

func (e *findmntEntry) info() (mountinfo.Info, error) {
	var i mountinfo.Info
	var err error
	if i.ID, err = looseInt("id", e.ID); err != nil {
		return i, err
	}
	if i.Parent, err = looseInt("parent", e.Parent); err != nil {
		return i, err
	}
	if i.Major, i.Minor, err = mountinfo.ParseDev(str(e.MajMin)); err != nil {
		return i, fmt.Errorf("maj:min: %w", err)
	}
	i.Root, i.MountPoint = str(e.FSRoot), str(e.Target)
	i.Source, i.FSType = str(e.Source), str(e.FSType)
	i.Options, i.SuperOptions = str(e.VFSOptions), str(e.FSOptions)
	i.SetOptionalFields(strings.Fields(str(e.OptFields)))
	if e.OptFields == nil && strings.Contains(str(e.Propagation), "unbindable") {
		i.Unbindable = true
	}
	return i, nil
}

func looseInt(name string, raw json.RawMessage) (int, error) {
	s := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s %s is not a number", name, raw)
	}
	return n, nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// mountEntry renders m findmnt-style with the number of stacked mounts.
func mountEntry(m *mountinfo.Info, stacked int) *MountEntry {
	if m == nil {
		return nil
	}
	return &MountEntry{
		ID: m.ID, Source: m.Source, FSRoot: m.Root, Target: m.MountPoint, FSType: m.FSType,
		MajMin: m.Dev(), Propagation: m.Propagation(), Stacked: stacked,
	}
}

// SourceWithRoot is findmnt's SOURCE[FSROOT]: the root is shown only when
// it is not "/".
func (m *MountEntry) SourceWithRoot() string {
	if m == nil {
		return ""
	}
	if m.FSRoot == "" || m.FSRoot == "/" {
		return m.Source
	}
	return m.Source + "[" + m.FSRoot + "]"
}
