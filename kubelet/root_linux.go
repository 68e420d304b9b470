// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// ResolveRoot resolves the configured kubelet root in ns, the host's mount
// namespace, where the kubelet and mountinfo see it. ns nil resolves in
// the caller's namespace (tests, or a caller already there).
func ResolveRoot(ns *isolation.MountNamespace, configured string) (Root, error) {
	if !filepath.IsAbs(configured) {
		return Root{}, fmt.Errorf("kubelet root %q is not an absolute path", configured)
	}
	configured = filepath.Clean(configured)
	var resolved string
	resolve := func() (err error) {
		resolved, err = filepath.EvalSymlinks(configured)
		return err
	}
	var err error
	if ns == nil {
		err = resolve()
	} else {
		err = ns.Do(resolve)
	}
	if err != nil {
		return Root{}, fmt.Errorf("resolve kubelet root %q in the host mount namespace: %w", configured, err)
	}
	return Root{Path: resolved, Configured: configured}, nil
}

// open opens the trusted root every lookup starts from. It is opened per
// call, in the caller's namespace, so that a root remounted meanwhile is
// seen as it is now.
func (r Root) open() (*os.File, error) {
	return isolation.OpenRoot(r.Path)
}

// Open opens the root directory, for callers that resolve their own paths
// beneath it with isolation.OpenBeneath.
func (r Root) Open() (*os.File, error) { return r.open() }

// LauncherDirs lists the pods under the pods directory that have a
// hotplug-disks directory, whether or not a VMI still wants them: what a
// deleted launcher left is found here.
func LauncherDirs(r Root) ([]LauncherDir, error) {
	root, err := r.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	uids, err := listDir(root, PodsDir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(uids)
	var dirs []LauncherDir
	for _, uid := range uids {
		dir, err := isolation.OpenBeneath(root, HotplugDisksDir(uid), isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
		if err != nil {
			continue // no hotplug-disks (not a launcher), or not a plain directory
		}
		names, _ := dir.Readdirnames(1)
		dir.Close()
		dirs = append(dirs, LauncherDir{UID: uid, Empty: len(names) == 0})
	}
	return dirs, nil
}

// TargetNames is the set of entry names in the launcher's hotplug-disks,
// every kind of entry ReadTargets lists; empty when the directory is
// gone.
func TargetNames(r Root, launcherUID string) (map[string]bool, error) {
	root, err := r.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := isolation.OpenBeneath(root, HotplugDisksDir(launcherUID), isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	entries, _, err := ReadTargets(dir)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", dir.Name(), err)
	}
	names := make(map[string]bool, len(entries))
	for _, en := range entries {
		names[en.Name()] = true
	}
	return names, nil
}
