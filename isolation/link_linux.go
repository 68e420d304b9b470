// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// FollowLinkBeneath reads the symlink at rel beneath root, which must be a
// link the kubelet made (such as pods/<uid>/volumeDevices/<plugin>/<pv>), and
// opens its target with how, provided the target is an absolute path inside
// one of rootPaths, the spellings of root's host path (the kubelet writes
// its links with the root as configured, which may be a symlink to where
// the root really is). The target is then resolved like any other path
// beneath root: no further symlink is followed.
func FollowLinkBeneath(root *os.File, rootPaths []string, rel string, how How) (*os.File, error) {
	inside, err := ReadLinkBeneath(root, rootPaths, rel)
	if err != nil {
		return nil, err
	}
	return OpenBeneath(root, inside, how)
}

// ReadLinkBeneath reads the symlink at rel beneath root (its directories
// resolved without following any link) and returns its target relative to
// root, provided the target is an absolute, clean path inside one of
// rootPaths. A caller that requires one exact target compares it and opens
// that path with OpenBeneath: the link is read once.
func ReadLinkBeneath(root *os.File, rootPaths []string, rel string) (string, error) {
	dir, name := path.Split(rel)
	parent := root
	if dir != "" {
		p, err := OpenBeneath(root, strings.TrimSuffix(dir, "/"), How{Flags: unix.O_PATH | unix.O_DIRECTORY})
		if err != nil {
			return "", err
		}
		defer p.Close()
		parent = p
	}
	if err := checkRelative(name); err != nil {
		return "", fmt.Errorf("read link %q beneath %q: %w", rel, root.Name(), err)
	}
	target, err := readlinkat(int(parent.Fd()), name)
	if err != nil {
		return "", fmt.Errorf("read link %q beneath %q: %w", rel, root.Name(), err)
	}
	var inside string
	for _, rp := range rootPaths {
		if inside, err = relativeInside(rp, target); err == nil {
			return inside, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("%w: no root path to resolve %q against", ErrUnsafePath, target)
	}
	return "", fmt.Errorf("link %q beneath %q: %w", rel, root.Name(), err)
}

// relativeInside returns target relative to root when target is an absolute,
// clean path strictly below root.
func relativeInside(root, target string) (string, error) {
	if !filepath.IsAbs(target) {
		return "", fmt.Errorf("%w: target %q is not absolute", ErrUnsafePath, target)
	}
	clean := filepath.Clean(target)
	rel, err := filepath.Rel(filepath.Clean(root), clean)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: target %q is outside %q", ErrUnsafePath, target, root)
	}
	return rel, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			if err == unix.EINVAL {
				return "", fmt.Errorf("not a symlink: %w", err)
			}
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", fmt.Errorf("link target too long: %w", unix.ENAMETOOLONG)
}
