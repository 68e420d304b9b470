// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"fmt"
	"strings"
)

// MaxNameLen is the kernel's NAME_MAX: the longest one path component.
const MaxNameLen = 255

// ValidName refuses s unless it is one plain path component that a tenant
// or the API may have shaped: non-empty, not "." or "..", no "/" or NUL, no
// control character, at most max bytes. what names s in the error. A
// refusal wraps ErrUnsafePath.
//
// It is the one check of a name that is about to be resolved beneath a
// directory fd: a volume's target in hotplug-disks, a pod UID or a PV name
// below the kubelet root.
func ValidName(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty: %w", what, ErrUnsafePath)
	case s == "." || s == "..":
		return fmt.Errorf("%s %q: %w: not a file name", what, s, ErrUnsafePath)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %q: %w: contains NUL", what, s, ErrUnsafePath)
	case strings.IndexByte(s, '/') >= 0:
		return fmt.Errorf("%s %q: %w: contains \"/\"", what, s, ErrUnsafePath)
	case strings.IndexFunc(s, isControl) >= 0:
		// No name KubeVirt or the kubelet makes has one (volume names are
		// DNS labels on the attachment pod); a newline or escape in a
		// file name forges lines in logs, Events and diag's table.
		return fmt.Errorf("%s %q: %w: contains a control character", what, s, ErrUnsafePath)
	case len(s) > max:
		return fmt.Errorf("%s %.40q...: %w: %d bytes, at most %d", what, s, ErrUnsafePath, len(s), max)
	}
	return nil
}

// isControl reports whether r is an ASCII control character (C0 or DEL).
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
