// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"testing"

	"github.com/hpmount/hpmount/mountinfo"
)

// TestImageShows: the sameness Attach and diag judge a target's top mount
// by; what the table does not know of the image is not held against it.
func TestImageShows(t *testing.T) {
	vol := &mountinfo.Info{Major: 7, Minor: 3, Root: "/"}
	known := Image{Mount: vol, Root: "/pv/disk.img"}
	for _, tc := range []struct {
		name string
		im   Image
		top  mountinfo.Info
		want bool
	}{
		{"the image", known, mountinfo.Info{Major: 7, Minor: 3, Root: "/pv/disk.img"}, true},
		{"another device", known, mountinfo.Info{Major: 7, Minor: 4, Root: "/pv/disk.img"}, false},
		{"another file", known, mountinfo.Info{Major: 7, Minor: 3, Root: "/other/disk.img"}, false},
		{"deleted", known, mountinfo.Info{Major: 7, Minor: 3, Root: "/pv/disk.img//deleted"}, false},
		{"mount unknown", Image{Root: "/pv/disk.img"}, mountinfo.Info{Major: 9, Minor: 1, Root: "/pv/disk.img"}, true},
		{"root unknown", Image{Mount: vol}, mountinfo.Info{Major: 7, Minor: 3, Root: "/anything"}, true},
		{"nothing known, deleted", Image{}, mountinfo.Info{Root: "/x//deleted"}, false},
	} {
		if got := tc.im.Shows(&tc.top); got != tc.want {
			t.Errorf("%s: Shows = %v, want %v", tc.name, got, tc.want)
		}
	}
}
