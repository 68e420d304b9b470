package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/test/simnode"
)

// TestRefusals: input that would make the agent use another VMI's volume,
// act for another node, or write outside hotplug-disks is refused with an
// Event and a metric, and nothing is mounted.
func TestRefusals(t *testing.T) {
	e := newEnv(t)
	owner := e.newVM("tenant-b", "owner")
	data := owner.addVolume("data", "ext4", 64<<20)
	owner.newAttachmentPod(data)
	owner.apply()
	owner.waitMounted(data)

	e.step("attachment pod of another VMI", func(t *testing.T) {
		thief := e.newVM("tenant-b", "thief")
		stolen := thief.addVolume("stolen", "ext4", 64<<20)
		// Claims the owner's attachment pod, which publishes the owner's
		// disk under the same PV layout it would use.
		thief.Attach["stolen"] = owner.Attach["data"]
		thief.apply()
		e.waitEvent(thief.NS, thief.Name, "HotplugRefused", "not controlled by virt-launcher pod")
		assertEmpty(t, e.node.HotplugDisksDir(string(thief.Launcher.UID)))
		_ = stolen
	})

	e.step("launcher on another node", func(t *testing.T) {
		v := e.newVM("tenant-b", "elsewhere")
		vol := v.addVolume("data", "ext4", 64<<20)
		v.newAttachmentPod(vol)
		// The launcher pod really runs on node-2, but the VMI claims this
		// node: the agent must not act for a pod it does not host.
		pod, err := e.kube.CoreV1().Pods(v.NS).Get(e.ctx, v.Launcher.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.kube.CoreV1().Pods(v.NS).Delete(e.ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		moved, err := e.ctrl.CreateLauncherPod(e.ctx, v.NS, v.Name, v.UID, "node-2")
		if err != nil {
			t.Fatal(err)
		}
		v.Launcher = moved
		v.LauncherNode = "node-2"
		if err := os.MkdirAll(e.node.HotplugDisksDir(string(moved.UID)), 0o777); err != nil {
			t.Fatal(err)
		}
		v.apply()
		e.waitEvent(v.NS, v.Name, "HotplugRefused", "node-2")
		time.Sleep(2 * time.Second)
		assertEmpty(t, e.node.HotplugDisksDir(string(moved.UID)))
	})

	e.step("hostile volume names", func(t *testing.T) {
		v := e.newVM("tenant-b", "hostile")
		for _, name := range []string{"../../../../etc", "a/b", ".."} {
			vol := simnode.Volume{Name: name, Claim: "hostile-pvc", PV: "pvc-hostile", Capacity: "64Mi"}
			v.Vols = append(v.Vols, vol)
		}
		d := v.addVolume("fine", "ext4", 64<<20)
		pod := v.newAttachmentPod(d)
		for _, vol := range v.Vols {
			v.Attach[vol.Name] = pod.UID
		}
		v.apply()
		e.waitEvent(v.NS, v.Name, "HotplugRefused", "../../../../etc")
		// The well-formed volume next to them is served.
		v.waitMounted(d)
		entries, err := os.ReadDir(e.node.HotplugDisksDir(string(v.Launcher.UID)))
		if err != nil || len(entries) != 1 || entries[0].Name() != "fine.img" {
			t.Fatalf("hotplug-disks holds %v (%v), want only fine.img", entries, err)
		}
	})

	e.step("disk.img that is a symlink to a host file", func(t *testing.T) {
		v := e.newVM("tenant-b", "linked")
		vol := v.addVolume("data", "ext4", 64<<20)
		pod := v.newAttachmentPod(vol)
		img := filepath.Join(e.node.CSIMountDir(string(pod.UID), vol.PV), "disk.img")
		if err := os.Remove(img); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc/shadow", img); err != nil {
			t.Fatal(err)
		}
		v.apply()
		e.waitEvent(v.NS, v.Name, "HotplugRefused", "symlink")
		time.Sleep(time.Second)
		assertEmpty(t, e.node.HotplugDisksDir(string(v.Launcher.UID)))
	})

	e.step("refusals are counted", func(t *testing.T) {
		text, err := e.agent.Scrape()
		if err != nil {
			t.Fatal(err)
		}
		for _, reason := range []string{"attachment-pod-owner", "launcher-node", "unsafe-volume-name", "unsafe-content"} {
			if !strings.Contains(text, `hpmount_refusals_total{reason="`+reason+`"}`) {
				t.Errorf("no refusal counted for %s", reason)
			}
		}
	})
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("%s holds %v, want nothing", dir, entries)
	}
}
