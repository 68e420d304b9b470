// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/test/simnode"
)

// hostile is the VMI that carries the hostile API objects of issue #13 next
// to a legitimate volume, and the other tenants' objects they aim at.
type hostile struct {
	e *env
	v *vm
	// pod is the VMI's own attachment pod: it carries and publishes good
	// and every volume whose attack is not the pod.
	pod  *corev1.Pod
	good simnode.Volume
	// names is a second VMI for the hostile volume names, with its own
	// pod and good volume: client-go's event correlator folds the 11th and
	// later HotplugRefused messages about one object into one Event, so
	// one VMI carries at most 10 refusals for each to be seen.
	names     *vm
	namesPod  *corev1.Pod
	namesGood simnode.Volume
	host      *hostFiles
}

// objectAttack is one hostile API object.
type objectAttack struct {
	name string
	// vmi: the attack is on the VMI's launcher, so it needs a VMI of its
	// own (nothing of it can be served); the hostile VMI's good volume is
	// then the witness that the agent still works.
	vmi bool
	// volume is the attacked volume's name; reason the refusal expected,
	// "" for an object that must be served correctly or wait.
	volume, reason string
	// before adds volumes that the VMI's own attachment pod carries and
	// publishes; after, run once that pod exists, adds the rest of the
	// attack and returns the VMI that carries it (nil for the hostile VMI):
	// the names VMI, or a VMI of its own (vmi).
	before func(t *testing.T, h *hostile)
	after  func(t *testing.T, h *hostile) *vm
	// check runs after the agent acted, for what is not a refusal.
	check func(t *testing.T, h *hostile)
}

// TestRefusals: API objects a tenant (or a confused controller) can write
// that would make the agent use another VMI's, namespace's or pod's volume,
// act for another node, or write outside hotplug-disks, against the real
// API server and the real agent binary. One VMI carries all per-volume
// attacks beside a legitimate volume; attacks on the launcher get a VMI
// each. Each refusal is a HotplugRefused Warning naming the volume and
// counted in hpmount_refusals_total{reason}; the legitimate volume is
// mounted and written through the launcher; the host's files keep owner,
// mode, size, times and content (no inotify event) and no mount appears
// but the legitimate ones.
func TestRefusals(t *testing.T) {
	e := newEnv(t)
	h := &hostile{e: e, host: newHostFiles(t, e)}
	h.v = e.newVM("tenant-b", "hostile")
	h.good = h.v.addVolume("good", "ext4", 64<<20)
	h.names = e.newVM("tenant-b", "hostile-names")
	h.namesGood = h.names.addVolume("good", "ext4", 64<<20)
	h.namesPod = h.names.newAttachmentPod(h.namesGood)
	attacks := hostileObjects(h)
	// Volume names the API server itself refuses cannot be part of the VMI.
	attacks = h.acceptedByAPIServer(t, attacks)
	for _, a := range attacks {
		if a.before != nil {
			a.before(t, h)
		}
	}
	h.pod = h.v.newAttachmentPod(h.v.Vols...)
	on, own := map[string]*vm{}, []*vm{h.names}
	for _, a := range attacks {
		on[a.name] = h.v
		if v := a.after(t, h); v != nil {
			on[a.name] = v
			if a.vmi {
				own = append(own, v)
			}
		}
	}
	h.host.drain()
	files, mounts, before := h.host.snapshot(t), mountSet(t), e.refusalCounts()
	start := time.Now()
	h.v.apply()
	for _, v := range own {
		v.apply()
	}
	want := map[string]float64{}
	for _, a := range attacks {
		if a.reason == "" {
			continue
		}
		want[a.reason]++
		e.step(a.name, func(t *testing.T) {
			v, msg := on[a.name], a.reason+": volume "+strconv.Quote(a.volume)+": "
			if a.vmi {
				msg = a.reason + ": "
			}
			e.waitEvent(v.NS, v.Name, "HotplugRefused", msg)
		})
	}
	h.v.waitMounted(h.good)
	h.v.roundTrip(t, h.good, "legit-beside-hostile-objects")
	h.names.waitMounted(h.namesGood)
	h.names.roundTrip(t, h.namesGood, "legit-beside-hostile-names")
	t.Logf("all refused and good served in %v", time.Since(start).Round(time.Millisecond))
	// A resync passes: a refusal stays one, and what waits keeps waiting.
	time.Sleep(e2eResync + 500*time.Millisecond)
	for _, a := range attacks {
		if a.check != nil {
			e.step(a.name, func(t *testing.T) { a.check(t, h) })
		}
	}
	e.step("refusals are counted", func(t *testing.T) {
		after := e.refusalCounts()
		for reason, n := range want {
			key := `reason="` + reason + `"`
			if d := after[key] - before[key]; d < n {
				t.Errorf("hpmount_refusals_total{%s} rose by %v, want at least %v", key, d, n)
			}
		}
	})
	e.step("nothing else touched", func(t *testing.T) {
		h.host.unchanged(t, files)
		hotplug := e.node.HotplugDisksDir(string(h.v.Launcher.UID))
		names := e.node.HotplugDisksDir(string(h.names.Launcher.UID))
		newMountsOnlyUnder(t, mounts, hotplug, names)
		wantOnly(t, hotplug, "decoy.img", "good.img")
		wantOnly(t, names, "good.img")
		for _, v := range own[1:] {
			wantOnly(t, e.node.HotplugDisksDir(string(v.Launcher.UID)))
		}
	})
}

// wantOnly checks that dir holds exactly names.
func wantOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries {
		got = append(got, en.Name())
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// unpublished adds a volume to the hostile VMI that names attachment pod
// uid, with a claim that is never published.
func (h *hostile) unpublished(name string, uid types.UID) {
	h.v.Vols = append(h.v.Vols, simnode.Volume{Name: name, Claim: "hostile-nothing", PV: "pvc-hostile-nothing", Capacity: "64Mi"})
	h.v.Attach[name] = uid
}

// nameAttack is a volume of the names VMI whose name is the attack,
// carried by that VMI's own attachment pod.
func nameAttack(what, name string) objectAttack {
	return objectAttack{name: "volume name " + what, volume: name, reason: kubevirt.RefusedUnsafeName,
		after: func(t *testing.T, h *hostile) *vm {
			h.names.Vols = append(h.names.Vols, simnode.Volume{Name: name, Claim: "hostile-nothing", PV: "pvc-hostile-nothing", Capacity: "64Mi"})
			h.names.Attach[name] = h.namesPod.UID
			return h.names
		}}
}

func hostileObjects(h *hostile) []objectAttack {
	none := func(*testing.T, *hostile) *vm { return nil }
	return []objectAttack{
		{name: "attachment pod of another VMI", volume: "stolen", reason: kubevirt.RefusedAttachOwner,
			after: func(t *testing.T, h *hostile) *vm { h.stealPod(t, "tenant-b", "victim"); return nil }},
		{name: "attachment pod in another namespace", volume: "foreign", reason: kubevirt.RefusedAttachNamespace,
			after: func(t *testing.T, h *hostile) *vm { h.stealPod(t, "tenant-c", "victim"); return nil }},
		{name: "attachment pod that does not exist", volume: "ghost",
			after: func(t *testing.T, h *hostile) *vm {
				h.unpublished("ghost", "0badc0de-0000-4000-8000-000000000000")
				return nil
			},
			check: func(t *testing.T, h *hostile) { h.wantPending(t, "ghost") }},
		{name: "attachment pod owned by the launcher but not its controller", volume: "uncontrolled", reason: kubevirt.RefusedAttachOwner,
			after: func(t *testing.T, h *hostile) *vm { h.uncontrolledPod(t); return nil }},
		nameAttack("with /", "a/b"),
		nameAttack("..", ".."),
		nameAttack("climbing out", "../../../../etc"),
		nameAttack("with NUL", "hp\x00x"),
		nameAttack("with newline", "hp\nx"),
		nameAttack("of 300 characters", strings.Repeat("h", 300)),
		{name: "volumeMode outside the enum", volume: "tape", reason: kubevirt.RefusedUnknownMode,
			before: func(t *testing.T, h *hostile) {
				// Published by the VMI's own pod: only the mode is wrong.
				h.v.addVolume("tape", "ext4", 64<<20)
				h.v.Vols[len(h.v.Vols)-1].Mode = "Tape"
			}, after: none},
		{name: "claim named unlike its volume beside a claim named like it", volume: "decoy",
			before: func(t *testing.T, h *hostile) { h.v.addVolume("decoy", "ext4", 64<<20) },
			after:  func(t *testing.T, h *hostile) *vm { h.decoyClaim(t); return nil },
			check:  func(t *testing.T, h *hostile) { h.decoyPublished(t) }},
		{name: "block volume whose volumeDevices link the tenant made", volume: "rawlink", reason: kubevirt.RefusedUnsafeContent,
			before: func(t *testing.T, h *hostile) { h.v.addVolume("rawlink", "", 16<<20) },
			after:  func(t *testing.T, h *hostile) *vm { h.tamperBlockLink(t); return nil }},
		{name: "launcher on another node", vmi: true, volume: "elsewhere", reason: kubevirt.RefusedLauncherNode,
			after: func(t *testing.T, h *hostile) *vm { return h.launcherElsewhere(t) }},
		{name: "two launchers claiming one VMI", vmi: true, volume: "twins", reason: kubevirt.RefusedLauncherAmbiguous,
			after: func(t *testing.T, h *hostile) *vm { return h.twoLaunchers(t) }},
	}
}

// acceptedByAPIServer drops the name attacks the API server refuses to
// store in a VMI, logging its answer; the rest must be stored unchanged.
func (h *hostile) acceptedByAPIServer(t *testing.T, attacks []objectAttack) []objectAttack {
	var out []objectAttack
	for _, a := range attacks {
		if a.reason != kubevirt.RefusedUnsafeName {
			out = append(out, a)
			continue
		}
		probe := simnode.VMISpec{Namespace: h.v.NS, Name: "probe", Node: "node-none", Launcher: "none",
			Volumes: []simnode.Volume{{Name: a.volume, Claim: "probe", PV: "probe", Capacity: "1Mi"}}}
		got, err := h.e.ctrl.ApplyVMI(h.e.ctx, probe)
		if err != nil {
			t.Logf("the API server refuses a VMI with volume %q itself: %v", a.volume, err)
			continue
		}
		if vols := volumeNames(got.Object); len(vols) != 1 || vols[0] != a.volume {
			t.Errorf("the API server stored volume %q as %q", a.volume, vols)
		}
		h.e.must(h.e.ctrl.DeleteVMI(h.e.ctx, h.v.NS, "probe"))
		out = append(out, a)
	}
	return out
}

// volumeNames lists the names in a VMI object's spec.volumes.
func volumeNames(obj map[string]any) []string {
	spec, _ := obj["spec"].(map[string]any)
	vols, _ := spec["volumes"].([]any)
	var names []string
	for _, v := range vols {
		if m, ok := v.(map[string]any); ok {
			names = append(names, fmt.Sprint(m["name"]))
		}
	}
	return names
}

// stealPod makes a VM of another tenant (ns) with an attachment pod that
// publishes its disk, and has the hostile VMI's volume of the same name
// ("stolen" in the same namespace, "foreign" in another) name that pod.
func (h *hostile) stealPod(t *testing.T, ns, victim string) {
	name := map[bool]string{true: "stolen", false: "foreign"}[ns == h.v.NS]
	owner := h.e.newVM(ns, victim)
	data := owner.addVolume("data", "ext4", 64<<20)
	pod := owner.newAttachmentPod(data)
	h.v.Vols = append(h.v.Vols, simnode.Volume{Name: name, Claim: data.Claim, PV: data.PV, Capacity: data.Capacity})
	h.v.Attach[name] = pod.UID
}

// uncontrolledPod makes an attachment pod that names the hostile launcher
// as an owner but not as its controller, and publishes a disk for it.
func (h *hostile) uncontrolledPod(t *testing.T) {
	vol := h.v.addVolume("uncontrolled", "ext4", 64<<20)
	pod, err := h.e.ctrl.CreateAttachmentPod(h.e.ctx, h.v.Launcher, []simnode.Volume{vol})
	h.e.must(err)
	pod.OwnerReferences[0].Controller = nil
	pod, err = h.e.kube.CoreV1().Pods(pod.Namespace).Update(h.e.ctx, pod, metav1.UpdateOptions{})
	h.e.must(err)
	h.v.publish(pod.UID, vol)
	h.v.Attach[vol.Name] = pod.UID
}

// launcherElsewhere is a VMI whose launcher pod runs on node-2 while the
// VMI claims this node.
func (h *hostile) launcherElsewhere(t *testing.T) *vm {
	e := h.e
	v := e.newVM("tenant-b", "elsewhere")
	vol := v.addVolume("data", "ext4", 64<<20)
	e.must(e.kube.CoreV1().Pods(v.NS).Delete(e.ctx, v.Launcher.Name, metav1.DeleteOptions{}))
	moved, err := e.ctrl.CreateLauncherPod(e.ctx, v.NS, v.Name, v.UID, "node-2")
	e.must(err)
	v.Launcher, v.LauncherNode = moved, "node-2"
	e.must(os.MkdirAll(e.node.HotplugDisksDir(string(moved.UID)), 0o777))
	v.newAttachmentPod(vol)
	return v
}

// twoLaunchers is a VMI with two live launcher pods on this node, both in
// status.activePods.
func (h *hostile) twoLaunchers(t *testing.T) *vm {
	e := h.e
	v := e.newVM("tenant-b", "twins")
	vol := v.addVolume("data", "ext4", 64<<20)
	second, err := e.ctrl.CreateLauncherPod(e.ctx, v.NS, v.Name, v.UID, nodeName)
	e.must(err)
	e.must(os.MkdirAll(e.node.HotplugDisksDir(string(second.UID)), 0o777))
	v.ActivePods = map[types.UID]string{v.Launcher.UID: nodeName, second.UID: nodeName}
	v.newAttachmentPod(vol)
	return v
}

// tamperBlockLink replaces the kubelet's volumeDevices link of rawlink
// with one the tenant made, aimed at a host disk.
func (h *hostile) tamperBlockLink(t *testing.T) {
	vol := h.v.Vol("rawlink")
	link := h.e.node.Path("pods", string(h.pod.UID), "volumeDevices", "kubernetes.io~csi", vol.PV)
	h.e.must(os.Remove(link))
	h.e.must(os.Symlink(h.host.Disk, link))
}

// decoyPublished: volume decoy names claim hostile-decoy; a claim named
// "decoy", bound to another disk, is published by the same pod. The
// claim is the claim: decoy.img is hostile-decoy's disk.img.
func (h *hostile) decoyPublished(t *testing.T) {
	t.Helper()
	vol := h.v.Vol("decoy")
	if _, err := h.v.MountID(vol); err != nil {
		t.Fatal(err)
	}
	tbl := h.e.table()
	top, _ := tbl.Top(h.v.Target(vol))
	major, minor, err := h.v.Disks["decoy"].Rdev()
	h.e.must(err)
	if top.Major != major || top.Minor != minor {
		t.Errorf("decoy.img is %s, want the disk of claim %s (%d:%d)", top.Dev(), vol.Claim, major, minor)
	}
}

// decoyClaim makes the claim named like volume decoy, bound to a disk of
// its own that the VMI's attachment pod publishes too.
func (h *hostile) decoyClaim(t *testing.T) {
	e := h.e
	d, err := e.node.NewDisk("hostile-decoy-claim", "ext4", 64<<20)
	e.must(err)
	named := simnode.Volume{Name: "decoy", Claim: "decoy", PV: "pvc-hostile-decoy-claim", Capacity: "64Mi"}
	e.must(e.ctrl.CreatePVC(e.ctx, h.v.NS, named))
	e.must(e.node.PublishFilesystem(string(h.pod.UID), named.PV, d, 32<<20))
}

// wantPending: a volume whose attachment pod is not in the agent's cache
// is neither refused nor mounted (the pod may just not be seen yet).
func (h *hostile) wantPending(t *testing.T, name string) {
	t.Helper()
	for _, ev := range h.e.events(h.v.NS, h.v.Name) {
		if ev.Reason == "HotplugRefused" && strings.Contains(ev.Message, strconv.Quote(name)) {
			t.Errorf("volume %s refused: %s", name, ev.Message)
		}
	}
	if _, err := os.Lstat(h.v.Target(h.v.Vol(name))); !os.IsNotExist(err) {
		t.Errorf("%s has a target: %v", name, err)
	}
}
