// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	moby "github.com/moby/sys/mountinfo"
)

// syntheticMountinfo is a node's mount table of n entries as the kernel
// prints it: the root mount, then in turn a pod's projected-volume tmpfs,
// CSI publishes of an ext4 and an xfs volume with peer groups, and a
// launcher's file bind of a disk.img. A few lines carry what real nodes
// have now and then: a name with an escaped space or tab, an empty source.
func syntheticMountinfo(n int) string {
	var b strings.Builder
	b.WriteString("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n")
	for i := 0; i < n-1; i++ {
		id, pod, pvc := 100+i, fmt.Sprintf("%08x-aaaa-bbbb-cccc-%012x", i/4, i), fmt.Sprintf("pvc-%012x", i)
		pods := "/var/lib/kubelet/pods/" + pod + "/volumes/"
		switch i % 4 {
		case 0:
			source := "tmpfs"
			if i%200 == 0 {
				source = "" // mount -t tmpfs "" ...
			}
			fmt.Fprintf(&b, "%d 22 0:%d / %skubernetes.io~projected/kube-api-access-x%d rw,relatime shared:%d - tmpfs %s rw,size=4096k\n", id, 50+i, pods, i, 10+i, source)
		case 1:
			fmt.Fprintf(&b, "%d 22 253:%d / %skubernetes.io~csi/%s/mount rw,relatime shared:%d - ext4 /dev/longhorn/%s rw\n", id, i%4096, pods, pvc, 10+i, pvc)
		case 2:
			fmt.Fprintf(&b, "%d 22 8:%d / %skubernetes.io~csi/%s/mount rw,relatime master:%d - xfs /dev/sd%c rw,attr2,inode64,noquota\n", id, i%256, pods, pvc, 10+i, 'a'+i%26)
		default:
			name := fmt.Sprintf("vol-%d.img", i)
			switch i % 100 {
			case 3:
				name = fmt.Sprintf("data\\040disk-%d.img", i)
			case 7:
				name = fmt.Sprintf("tab\\011%d.img", i)
			}
			// The disk.img of the ext4 volume two lines up.
			fmt.Fprintf(&b, "%d 22 253:%d /disk.img %skubernetes.io~empty-dir/hotplug-disks/%s rw,relatime shared:%d master:%d - ext4 /dev/longhorn/pvc-%012x rw\n", id, (i-2)%4096, pods, name, 10+i, 8+i, i-2)
		}
	}
	return b.String()
}

// BenchmarkMountinfo reads, parses and indexes a mount table of 1k, 10k and
// 100k entries, and in the same run parses it with moby/sys/mountinfo and
// has findmnt --json read it from a file: the three ways a node agent can
// learn its mounts. hpmount-parse is the parse alone, what moby does;
// hpmount adds the indexes the agent looks mounts up by. ns/line is the
// figure to compare.
func BenchmarkMountinfo(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		text := syntheticMountinfo(n)
		name := fmt.Sprintf("%dk", n/1000)
		file := filepath.Join(b.TempDir(), "mountinfo")
		must(b, os.WriteFile(file, []byte(text), 0o644))
		b.Run(name+"/hpmount", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t, err := readTable(strings.NewReader(text))
				must(b, err)
				if t.Len() != n || t.Skipped().Lines != 0 {
					b.Fatalf("%d mounts, skipped %+v", t.Len(), t.Skipped())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/line")
		})
		b.Run(name+"/hpmount-parse", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if mounts, err := Parse(strings.NewReader(text)); err != nil || len(mounts) != n {
					b.Fatalf("%d mounts, %v", len(mounts), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/line")
		})
		b.Run(name+"/moby", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if mounts, err := moby.GetMountsFromReader(strings.NewReader(text), nil); err != nil || len(mounts) != n {
					b.Fatalf("%d mounts, %v", len(mounts), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/line")
		})
		b.Run(name+"/findmnt", func(b *testing.B) {
			if got := findmntCount(b, file); got != n {
				b.Fatalf("findmnt --json lists %d filesystems, want %d", got, n)
			}
			b.ReportAllocs()
			for b.Loop() {
				out, err := exec.Command("findmnt", "--json", "--list", "--kernel", "--tab-file", file).Output()
				if err != nil || len(out) == 0 {
					b.Fatalf("findmnt: %v", err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/line")
		})
	}
}

// findmntCount is how many filesystems findmnt --json lists from file: a
// check, once, that it read the same text the parsers read.
func findmntCount(b *testing.B, file string) int {
	out, err := exec.Command("findmnt", "--json", "--list", "--kernel", "--tab-file", file).Output()
	must(b, err)
	var doc struct{ Filesystems []json.RawMessage }
	must(b, json.Unmarshal(out, &doc))
	return len(doc.Filesystems)
}

// must fails the test or benchmark on err.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
