package mount

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/hpmount/hpmount/outcome"
)

// syntheticMountinfo is a node's mount table of n entries as the kernel
// prints it: the root and system mounts, then per pod a projected-volume
// tmpfs, CSI publishes of ext4 and xfs volumes with peer groups, and
// launchers' file binds, a few names with escapes.
func syntheticMountinfo(n int) string {
	var b strings.Builder
	b.WriteString("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n")
	for i := 0; i < n-1; i++ {
		id, pod := 100+i, fmt.Sprintf("%08x-aaaa-bbbb-cccc-%012x", i/4, i)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "%d 22 0:%d / /var/lib/kubelet/pods/%s/volumes/kubernetes.io~projected/kube-api-access-x%d rw,relatime shared:%d - tmpfs tmpfs rw,size=4096k\n", id, 50+i%200, pod, i, 10+i)
		case 1:
			fmt.Fprintf(&b, "%d 22 253:%d / /var/lib/kubelet/pods/%s/volumes/kubernetes.io~csi/pvc-%d/mount rw,relatime shared:%d - ext4 /dev/longhorn/pvc-%d rw\n", id, i%4096, pod, i, 10+i, i)
		case 2:
			fmt.Fprintf(&b, "%d 22 253:%d / /var/lib/kubelet/pods/%s/volumes/kubernetes.io~csi/pvc%%040x%d/mount rw,relatime master:%d - xfs /dev/sd%d rw,attr2,inode64,noquota\n", id, i%4096, pod, i, 10+i, i%26)
		default:
			fmt.Fprintf(&b, "%d 22 253:%d /disk.img /var/lib/kubelet/pods/%s/volumes/kubernetes.io~empty-dir/hotplug-disks/disk\\040%d.img rw,relatime shared:%d - ext4 /dev/longhorn/pvc-%d rw\n", id, i%4096, pod, i, 10+i, i)
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
				mounts, err := Parse(strings.NewReader(text))
				if err != nil || len(mounts) != n {
					b.Fatalf("%d mounts, %v", len(mounts), err)
				}
				_ = NewTable(mounts)
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
				if mounts, err := mountinfo.GetMountsFromReader(strings.NewReader(text), nil); err != nil || len(mounts) != n {
					b.Fatalf("%d mounts, %v", len(mounts), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/line")
		})
		b.Run(name+"/findmnt", func(b *testing.B) {
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

// BenchmarkBind compares one bind of disk.img onto a launcher's target and
// its removal, with raw syscalls (Attach, Detach: open_tree/move_mount on
// fds, umount2, unlink) and with an exec of mount(8) and umount(8).
func BenchmarkBind(b *testing.B) {
	n := newNode(b, "ext4")
	b.Run("raw", func(b *testing.B) {
		tbl := hostTable(b)
		b.ReportAllocs()
		for b.Loop() {
			if res, err := n.a.Attach(tbl, hpVolDir, launchDir, "bench"); err != nil || res != outcome.Mounted {
				b.Fatalf("attach: %v %v", res, err)
			}
			if res, err := n.a.Detach(tbl, launchDir, "bench"); err != nil || res != outcome.Removed {
				b.Fatalf("detach: %v %v", res, err)
			}
		}
	})
	b.Run("exec", func(b *testing.B) {
		src, dst := n.path(hpVolDir, "disk.img"), n.path(launchDir, "bench.img")
		b.ReportAllocs()
		for b.Loop() {
			must(b, os.WriteFile(dst, nil, 0o644))
			if out, err := exec.Command("mount", "--bind", src, dst).CombinedOutput(); err != nil {
				b.Fatalf("mount --bind: %v %s", err, out)
			}
			if out, err := exec.Command("umount", dst).CombinedOutput(); err != nil {
				b.Fatalf("umount: %v %s", err, out)
			}
			must(b, os.Remove(dst))
		}
	})
}
