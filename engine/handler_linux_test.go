// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

// TestHandlerRecord reads virt-handler's record through a linked state
// directory (as /var/run links to /run on a host): the volumes it names
// per launcher, the first recorded target that is gone, and no record as
// an empty one. A record virt-handler cannot read either is stuck; a
// record file that is a symlink, or a VMI UID that is not one name, is an
// error.
func TestHandlerRecord(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	root, state := filepath.Join(dir, "kubelet"), filepath.Join(dir, "run", "state")
	hotplug := filepath.Join(root, kubelet.HotplugDisksDir(string(launcherUID)))
	must(t, os.MkdirAll(hotplug, 0o755))
	must(t, os.MkdirAll(state, 0o700))
	must(t, os.Symlink(filepath.Join(dir, "run"), filepath.Join(dir, "var-run")))
	for _, name := range []string{"fs.img", "blk"} {
		must(t, os.WriteFile(filepath.Join(hotplug, name), nil, 0o600))
	}
	// virt-handler spells targets in its own view of the pods directory.
	target := func(launcher types.UID, name string) string {
		return filepath.Join("/var/lib/kubelet", kubelet.HotplugDisksDir(string(launcher)), name)
	}
	record := func(targets ...string) string {
		var entries []string
		for _, p := range targets {
			entries = append(entries, fmt.Sprintf(`{"targetFile":%q}`, p))
		}
		return `{"mountTargetEntries":[` + strings.Join(entries, ",") + `],"usesSafePaths":true}`
	}
	e, err := New(Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: root,
		CgroupRoot: "/sys/fs/cgroup/devices", CgroupMode: blockdev.CgroupV1, SysRoot: "/sys", DevRoot: "/dev",
		UID: 107, GID: 107, HandlerStateDir: filepath.Join(dir, "var-run", "state")})
	must(t, err)
	t.Cleanup(e.Close)
	for _, c := range []struct {
		name, vmi, file string
		link            bool
		want            []string
		stuck, err      string
	}{
		{name: "no record", vmi: "v0"},
		{name: "present", vmi: "v1", file: record(target(launcherUID, "fs.img"), target(launcherUID, "blk"), "/not/a/target"),
			want: []string{"blk", "fs", "fs.img"}},
		{name: "one gone", vmi: "v2", file: record(target(launcherUID, "fs.img"), target(launcherUID, "ext.img")),
			want: []string{"ext", "ext.img", "fs", "fs.img"}, stuck: target(launcherUID, "ext.img")},
		{name: "launcher gone", vmi: "v3", file: record(target("gone-launcher", "fs.img")), stuck: target("gone-launcher", "fs.img")},
		{name: "unreadable", vmi: "v4", file: "{", stuck: "decode virt-handler's record"},
		{name: "a link", vmi: "v5", file: record(target(launcherUID, "fs.img")), link: true, err: "symlink"},
		{name: "not a name", vmi: "../v6", err: "vmi uid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.file != "" {
				p := filepath.Join(state, c.vmi)
				if c.link {
					p = filepath.Join(dir, c.vmi)
					must(t, os.Symlink(p, filepath.Join(state, c.vmi)))
				}
				must(t, os.WriteFile(p, []byte(c.file), 0o600))
			}
			rec, err := e.HandlerRecord(context.Background(), types.UID(c.vmi))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			must(t, err)
			var got []string
			for l, names := range rec.Volumes {
				if l != launcherUID && len(names) > 0 && c.stuck == "" {
					t.Errorf("volumes of launcher %s: %v", l, names)
				}
				if l == launcherUID {
					got = slices.Sorted(maps.Keys(names))
				}
			}
			if !slices.Equal(got, c.want) || !strings.Contains(rec.Stuck, c.stuck) || (c.stuck == "") != (rec.Stuck == "") {
				t.Fatalf("record = %v, stuck %q; want %v, stuck %q", got, rec.Stuck, c.want, c.stuck)
			}
		})
	}
}
