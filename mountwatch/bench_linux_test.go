// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkOpen reads a node of benchMounts mounts under the pods
// directory, one in twenty on a launcher's hotplug-disks, as Open does at
// start and after lost events: a listmount and a statmount per mount.
func BenchmarkOpen(b *testing.B) {
	const benchMounts = 15000
	n := newNode(b)
	// The node's tmpfs holds the files the mounts are made on.
	must(b, unix.Mount("", n.root.Path, "", unix.MS_REMOUNT, "size=256m"))
	src := n.file("src/disk.img")
	for i := range benchMounts {
		rel := fmt.Sprintf("pods/pod-%d/volumes/kubernetes.io~csi/pv/mount/disk.img", i)
		if i%20 == 0 {
			rel = hotplug(fmt.Sprintf("pod-%d", i), "disk.img")
		}
		must(b, unix.Mount(src, n.file(rel), "", unix.MS_BIND, ""))
	}
	b.ReportAllocs()
	for b.Loop() {
		w, err := Open(testHost(), n.root)
		must(b, err)
		if w.Tracked() != benchMounts/20 {
			b.Fatalf("tracking %d mounts, want %d", w.Tracked(), benchMounts/20)
		}
		must(b, w.Close())
	}
	b.ReportMetric(benchMounts, "mounts")
}
