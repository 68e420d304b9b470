// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
)

// readBatch is how many directory entries are read at a time.
const readBatch = 256

// ReadTargets lists the entries of a launcher's hotplug-disks directory
// that could be hpmount's (IsTargetName), with their types as the
// directory reports them (no stat), sorted by name. The launcher can write
// into that directory: it is read in batches, names that cannot be
// volumes are passed over, and past MaxTargets the listing stops and
// reports truncated, so that a million names cost one pass, not a million
// stats on every reconcile.
func ReadTargets(dir *os.File) (entries []fs.DirEntry, truncated bool, err error) {
	return readTargets(dir, IsTargetName)
}

// ReadFileTargets is ReadTargets of the entries named as a filesystem
// volume's target (<volume>.img, FileTargetVolume). It is the listing
// mount.Attacher.Observe is handed.
func ReadFileTargets(dir *os.File) ([]fs.DirEntry, error) {
	entries, _, err := readTargets(dir, func(name string) bool {
		_, ok := FileTargetVolume(name)
		return ok && IsTargetName(name)
	})
	return entries, err
}

// ReadDirTargets is ReadTargets of the entries named as a directory
// volume's target (a valid volume name, DirTargetName). It is the listing
// mount.Attacher.ObserveDirs is handed.
func ReadDirTargets(dir *os.File) ([]fs.DirEntry, error) {
	entries, _, err := readTargets(dir, func(name string) bool { return ValidName(name) == nil })
	return entries, err
}

// readTargets lists the entries of dir that keep accepts, as ReadTargets
// describes.
func readTargets(dir *os.File, keep func(name string) bool) (entries []fs.DirEntry, truncated bool, err error) {
	for {
		batch, err := dir.ReadDir(readBatch)
		for _, e := range batch {
			if !keep(e.Name()) {
				continue
			}
			if len(entries) == MaxTargets {
				truncated = true
				break
			}
			entries = append(entries, e)
		}
		if errors.Is(err, io.EOF) || truncated || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("list %q: %w", dir.Name(), err)
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return entries, truncated, nil
}
