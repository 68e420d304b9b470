// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"path/filepath"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

// TestRestartFindsVolumes: a plugin restarted with the same state
// directory publishes and unstages what its predecessor staged, without
// staging it again.
func TestRestartFindsVolumes(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, access := range []string{AccessFilesystem, AccessBlock} {
		t.Run(access, func(t *testing.T) {
			dir := t.TempDir()
			first := startPlugin(t, dir)
			fsType := map[string]string{AccessFilesystem: "ext4"}[access]
			v := newVol(t, first, access, fsType, 32<<20)
			if err := v.stage(t, v.staging); err != nil {
				t.Fatal(err)
			}
			first.plugin.Stop()

			v.k = startPlugin(t, dir)
			twice(t, "publish after a restart", v.publish)
			writeThrough(t, v)
			twice(t, "unpublish after a restart", v.unpublish)
			twice(t, "unstage after a restart", v.unstage)
			waitDetached(t, v.backing)
		})
	}
}

// TestDetachUnder is a node's teardown: every volume whose backing file
// lies under the node's directory is detached, and no other.
func TestDetachUnder(t *testing.T) {
	testutil.RequiresRoot(t)
	k := startPlugin(t, "")
	inside := newVol(t, k, AccessBlock, "", 8<<20)
	outside := newVol(t, k, AccessBlock, "", 8<<20)
	outside.id = "pv-outside"
	for _, v := range []*vol{inside, outside} {
		if err := v.stage(t, v.staging); err != nil {
			t.Fatal(err)
		}
	}
	if err := DetachUnder(filepath.Dir(inside.backing)); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, inside.backing)
	loopOf(t, outside.backing)
}
