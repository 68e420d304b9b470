// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/simnode"
)

// env is a real API server and a simulated node.
type env struct {
	t    *testing.T
	ctx  context.Context
	node *simnode.Node
	ctl  *simnode.Controller
	c    Clients
}

func newEnv(t *testing.T) *env {
	testutil.RequiresRoot(t)
	cl := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	if err := cl.InstallVMICRD(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := cl.AdminConfig()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	node, err := simnode.New("node-a", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	return &env{t: t, ctx: ctx, node: node, ctl: &simnode.Controller{Kube: kube, Dyn: dyn}, c: Clients{Kube: kube, Dyn: dyn}}
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// vm is one VMI with its launcher and attachment pod on the node.
type vm struct {
	name                  string
	uid, launcher, attach types.UID
	targetDir             string // relative to the kubelet root
	l                     *simnode.Launcher
}

// addVM creates a VMI whose hotplug volumes are vols, its launcher (pod and
// process) and one attachment pod carrying them all.
func (e *env) addVM(name string, vols ...simnode.Volume) *vm {
	e.t.Helper()
	obj, err := e.ctl.CreateVMIShell(e.ctx, "default", name, e.node.Name)
	e.must(err)
	launcher, err := e.ctl.CreateLauncherPod(e.ctx, "default", name, obj.GetUID(), e.node.Name)
	e.must(err)
	l, err := e.node.StartLauncher(string(launcher.UID))
	e.must(err)
	attach, err := e.ctl.CreateAttachmentPod(e.ctx, launcher, vols)
	e.must(err)
	spec := simnode.VMISpec{Namespace: "default", Name: name, Node: e.node.Name, Launcher: launcher.UID,
		Attachment: map[string]types.UID{}, Volumes: vols}
	for _, v := range vols {
		e.must(e.ctl.CreatePVC(e.ctx, "default", v))
		spec.Attachment[v.Name] = attach.UID
	}
	_, err = e.ctl.ApplyVMI(e.ctx, spec)
	e.must(err)
	return &vm{name: name, uid: obj.GetUID(), launcher: launcher.UID, attach: attach.UID, targetDir: kubelet.HotplugDisksDir(string(launcher.UID)), l: l}
}

func (e *env) disk(name, fstype string, size int64) *simnode.Disk {
	e.t.Helper()
	d, err := e.node.NewDisk(name, fstype, size)
	e.must(err)
	return d
}

func (e *env) table() *mountinfo.Table {
	e.t.Helper()
	tb, err := mountinfo.ReadTable("/proc/self/mountinfo")
	e.must(err)
	return tb
}

// attachFS publishes d for the VM's attachment pod and, with attach, binds
// its disk.img into the launcher as the agent would.
func (e *env) attachFS(m *vm, vol, pv string, d *simnode.Disk, attach bool) string {
	e.t.Helper()
	e.must(e.node.PublishFilesystem(string(m.attach), pv, d, 8<<20))
	a := &mount.Attacher{KubeletRoot: e.node.KubeletRoot}
	rel, err := kubelet.FindPublished(kubelet.Root{Path: e.node.KubeletRoot}, string(m.attach), pv)
	e.must(err)
	if attach {
		_, err = a.Attach(e.table(), rel, m.targetDir, kubelet.TargetName(vol))
		e.must(err)
	}
	return rel
}

func (e *env) opts() Options {
	o := DefaultOptions()
	o.NodeName, o.KubeletRoot, o.Host.PID = e.node.Name, e.node.KubeletRoot, os.Getpid()
	o.CgroupRoot, o.CgroupMode = e.node.CgroupRoot, blockdev.CgroupV1
	return o
}

func fsVol(name string) simnode.Volume {
	return simnode.Volume{Name: name, Claim: "claim-" + name, PV: "pv-" + name, Capacity: "64Mi"}
}

func blockVol(name string) simnode.Volume {
	v := fsVol(name)
	v.Block = true
	return v
}

func (e *env) hostNS() *isolation.MountNamespace {
	e.t.Helper()
	ns, err := isolation.OpenMountNamespace(isolation.Host{Proc: "/proc", PID: os.Getpid()}.MountNamespace())
	e.must(err)
	e.t.Cleanup(ns.Close)
	return ns
}

// mknod makes the VM's block node for d (as the agent would) and, with
// allow, the cgroup rule.
func (e *env) mknod(m *vm, vol string, d *simnode.Disk, allow bool) {
	e.t.Helper()
	ns := e.hostNS()
	nodes := &blockdev.Nodes{NS: ns, Root: kubelet.Root{Path: e.node.KubeletRoot}, UID: 107, GID: 107}
	maj, min, err := d.Rdev()
	e.must(err)
	dev := blockdev.Device{Major: maj, Minor: min}
	t, err := mountinfo.ReadTable("/proc/self/mountinfo")
	e.must(err)
	_, err = mount.InLauncherDir(&mount.Attacher{NS: ns, KubeletRoot: e.node.KubeletRoot}, t, m.targetDir,
		func(dir *os.File) (blockdev.Device, error) {
			_, old, err := nodes.Ensure(dir, vol, blockdev.Published{Device: dev, Perm: 0o660})
			return old, err
		})
	e.must(err)
	if allow {
		compute := blockdev.Container{PodUID: string(m.launcher),
			ID: "containerd://" + simnode.ContainerID(string(m.launcher), kubevirt.ComputeContainer, 0)}
		e.must(blockdev.NewV1(e.node.CgroupRoot).Allow(compute, dev))
	}
}

func (e *env) run(o Options) (*Report, map[string]Volume) {
	e.t.Helper()
	rep, err := Run(e.ctx, o, e.c)
	e.must(err)
	byName := map[string]Volume{}
	for _, v := range rep.Volumes {
		byName[v.Volume] = v
	}
	return rep, byName
}

func TestDiagOnSimulatedNode(t *testing.T) {
	e := newEnv(t)
	e.must(e.ctl.EnsureNamespace(e.ctx, "default"))

	// ok (filesystem), plus an orphan x.img bound in the same launcher.
	okfs := e.addVM("okfs", fsVol("data"))
	rel := e.attachFS(okfs, "data", "pv-data", e.disk("okfs", "ext4", 64<<20), true)
	orphan := e.node.Path(okfs.targetDir, "x.img")
	e.must(os.WriteFile(orphan, nil, 0o600))
	e.must(unix.Mount(e.node.Path(rel, "disk.img"), orphan, "", unix.MS_BIND, ""))

	// ok (block), wrong-device and not-allowed.
	okblk := e.addVM("okblk", blockVol("raw"), blockVol("other"), blockVol("denied"), blockVol("covered"), blockVol("plain"))
	raw, other, denied := e.disk("raw", "", 16<<20), e.disk("other", "", 16<<20), e.disk("denied", "", 16<<20)
	e.must(e.node.PublishBlock(string(okblk.attach), "pv-raw", raw))
	e.must(e.node.PublishBlock(string(okblk.attach), "pv-other", other))
	e.must(e.node.PublishBlock(string(okblk.attach), "pv-denied", denied))
	e.mknod(okblk, "raw", raw, true)
	e.mknod(okblk, "other", raw, true)
	e.mknod(okblk, "denied", denied, false)
	// covered: a host file bound over a block node (the stat of the name
	// is the file's, so without the mount check it would read as refused
	// tenant content, not as a mount the agent removes).
	e.must(e.node.PublishBlock(string(okblk.attach), "pv-covered", raw))
	e.mknod(okblk, "covered", raw, true)
	hostFile := filepath.Join(t.TempDir(), "host-file")
	e.must(os.WriteFile(hostFile, []byte("host"), 0o644))
	e.must(unix.Mount(hostFile, e.node.Path(okblk.targetDir, "covered"), "", unix.MS_BIND, ""))
	// plain: a regular file at a block volume's node name, which the
	// engine refuses to treat as a node.
	e.must(e.node.PublishBlock(string(okblk.attach), "pv-plain", raw))
	e.must(os.WriteFile(e.node.Path(okblk.targetDir, "plain"), []byte("tenant"), 0o600))

	// not-mounted, stacked, stale-source, refused, needs-fs-expand.
	faults := e.addVM("faults", fsVol("idle"), fsVol("stack"), fsVol("stale"), fsVol("evil"), fsVol("grown"), fsVol("shape"))
	e.attachFS(faults, "idle", "pv-idle", e.disk("idle", "ext4", 32<<20), false)
	// shape: a directory where the file volume's target goes, which the
	// engine's attach refuses.
	e.attachFS(faults, "shape", "pv-shape", e.disk("shape", "ext4", 32<<20), false)
	e.must(os.Mkdir(e.node.Path(faults.targetDir, "shape.img"), 0o755))
	srel := e.attachFS(faults, "stack", "pv-stack", e.disk("stack", "ext4", 32<<20), true)
	// A private bind, so that the stacked mount does not propagate onto
	// disk.img of the (shared) volume mount as well.
	e.must(unix.Mount("", e.node.Path(faults.targetDir, "stack.img"), "", unix.MS_PRIVATE, ""))
	e.must(unix.Mount(e.node.Path(srel, "disk.img"), e.node.Path(faults.targetDir, "stack.img"), "", unix.MS_BIND, ""))
	strel := e.attachFS(faults, "stale", "pv-stale", e.disk("stale", "ext4", 32<<20), true)
	e.must(os.Remove(e.node.Path(strel, "disk.img")))
	erel := e.attachFS(faults, "evil", "pv-evil", e.disk("evil", "ext4", 32<<20), false)
	e.must(os.Remove(e.node.Path(erel, "disk.img")))
	e.must(os.Symlink("/etc/hostname", e.node.Path(erel, "disk.img")))
	grown := e.disk("grown", "xfs", testutil.MinXFSSize)
	e.attachFS(faults, "grown", "pv-grown", grown, true)
	e.must(grown.Grow(testutil.MinXFSSize + 100<<20))
	// expand-pending: the claim asks for twice its size, and the device
	// never grew (the storage refused or has not done the expansion).
	pending := fsVol("pending")
	pending.Requests = "128Mi"
	asked := e.addVM("asked", pending)
	e.attachFS(asked, "pending", "pv-pending", e.disk("pending", "ext4", 64<<20), true)

	// not-propagated: the launcher's compute container's view of
	// hotplug-disks stops receiving the node's mounts before the bind
	// (made private, the bind's copy gone), so it sees the empty target
	// file instead of disk.img.
	hidden := e.addVM("hidden", fsVol("unseen"))
	_, err := hidden.l.Exec("mount --make-private " + kubevirt.HotplugDisksMountPath)
	e.must(err)
	e.attachFS(hidden, "unseen", "pv-unseen", e.disk("unseen", "ext4", 32<<20), true)

	for _, src := range []string{MountSourceFindmnt, MountSourceMountinfo} {
		t.Run(src, func(t *testing.T) {
			o := e.opts()
			o.MountSource = src
			rep, vols := e.run(o)
			want := map[string]Verdict{
				"data": OK, "raw": OK, "other": WrongDevice, "denied": NotAllowed, "idle": NotMounted,
				"stack": Stacked, "stale": StaleSource, "evil": Refused, "grown": NeedsFSExpand,
				"unseen": NotPropagated, "pending": ExpandPending, "covered": WrongDevice,
				"shape": Refused, "plain": Refused,
			}
			for name, verdict := range want {
				v := vols[name]
				if v.Verdict != verdict {
					t.Errorf("volume %s: verdict %q, want %q (detail %q)", name, v.Verdict, verdict, v.Detail)
				}
				if verdict != OK && v.Hint == "" {
					t.Errorf("volume %s: no hint", name)
				}
			}
			if d := vols["data"]; d.Mount == nil || d.Mount.FSRoot != "/disk.img" || d.Mount.Stacked != 1 || d.Sizes.BlockDevice != 64<<20 || d.Sizes.DiskImage != 8<<20 {
				t.Errorf("ok volume: mount %+v sizes %+v", d.Mount, d.Sizes)
			}
			if c := vols["covered"]; !strings.Contains(c.Detail, "mounted on the node's name") || !strings.Contains(c.Hint, "umount") {
				t.Errorf("covered block node: detail %q hint %q", c.Detail, c.Hint)
			}
			for _, name := range []string{"shape", "plain"} {
				if v := vols[name]; v.RefusalReason != kubevirt.RefusedUnsafeContent {
					t.Errorf("volume %s: refused for %q (%s), want the engine's %q", name, v.RefusalReason, v.Detail, kubevirt.RefusedUnsafeContent)
				}
			}
			if d := vols["raw"].Device; d == nil || d.Node != d.Published || d.CgroupAllowed == nil || !*d.CgroupAllowed {
				t.Errorf("ok block volume: %+v", d)
			}
			if len(rep.Orphans) != 1 || rep.Orphans[0].Name != "x.img" || rep.Orphans[0].Kind != "mount" {
				t.Errorf("orphans: %+v warnings %v", rep.Orphans, rep.Warnings)
			}
			if rep.MountSource != src || !rep.Propagation.Shared || ExitCode(rep, nil) != ExitProblems {
				t.Errorf("source %s propagation %+v exit %d", rep.MountSource, rep.Propagation, ExitCode(rep, nil))
			}
			if src == MountSourceFindmnt {
				var b bytes.Buffer
				e.must(Render(&b, rep, FormatTable))
				t.Logf("table:\n%s", b.String())
			}
		})
	}

	t.Run("findmnt equals mountinfo on the node", compareLive)

	t.Run("left to virt-handler", func(t *testing.T) { leftToHandler(t, e, okfs) })

	t.Run("exit 0 for a healthy VMI", func(t *testing.T) {
		o := e.opts()
		o.VMIs = []string{"okfs"}
		// The orphan lives in okfs's launcher: remove it first.
		e.must(unix.Unmount(orphan, 0))
		rep, _ := e.run(o)
		if code := ExitCode(rep, nil); code != ExitOK || len(rep.Volumes) != 1 {
			var b bytes.Buffer
			Render(&b, rep, FormatWide)
			t.Errorf("exit %d, want 0:\n%s", code, b.String())
		}
	})

	t.Run("exit 2 when it cannot run", func(t *testing.T) {
		o := e.opts()
		o.Host.PID = 1 << 22
		_, err := Run(e.ctx, o, e.c)
		if !IsCannotRun(err) || ExitCode(nil, err) != ExitCannotRun {
			t.Errorf("unreadable mount table: %v", err)
		}
		dead := &rest.Config{Host: "https://127.0.0.1:1", Timeout: 2 * time.Second}
		c := Clients{Kube: kubernetes.NewForConfigOrDie(dead), Dyn: dynamic.NewForConfigOrDie(dead)}
		if _, err := Run(e.ctx, e.opts(), c); !IsCannotRun(err) {
			t.Errorf("unreachable API: %v", err)
		}
		o = e.opts()
		o.VMIs = []string{"nope"}
		if _, err := Run(e.ctx, o, e.c); !IsCannotRun(err) || !strings.Contains(err.Error(), "nope") {
			t.Errorf("missing VMI: %v", err)
		}
	})

	t.Run("propagation-broken", func(t *testing.T) {
		e.must(unix.Mount("", e.node.KubeletRoot, "", unix.MS_PRIVATE, ""))
		t.Cleanup(func() { unix.Mount("", e.node.KubeletRoot, "", unix.MS_SHARED, "") })
		o := e.opts()
		o.VMIs = []string{"okfs"}
		rep, vols := e.run(o)
		v := vols["data"]
		if v.Verdict != PropagationBroken || !strings.Contains(v.Hint, "--make-rshared "+e.node.KubeletRoot) || rep.Propagation.Shared {
			t.Errorf("verdict %q hint %q propagation %+v", v.Verdict, v.Hint, rep.Propagation)
		}
	})
}

// leftToHandler: the orphan x.img of m's launcher is virt-handler's to
// remove while its record of m names it (spelled in virt-handler's own
// view of the pods directory), and no problem; a record that also names a
// target that is gone leaves nothing to virt-handler (its Unmount fails
// there, kubevirt#16532), x.img is an orphan again, and a warning names
// the gone target.
func leftToHandler(t *testing.T, e *env, m *vm) {
	target := func(name string) string {
		return "/var/lib/kubelet/pods/" + string(m.launcher) + "/volumes/kubernetes.io~empty-dir/hotplug-disks/" + name
	}
	for _, c := range []struct {
		targets []string
		want    Verdict
		exit    int
	}{
		{[]string{target("x.img")}, LeftToHandler, ExitOK},
		{[]string{target("x.img"), target("gone.img")}, Orphan, ExitProblems},
	} {
		dir := t.TempDir()
		var entries []string
		for _, p := range c.targets {
			entries = append(entries, fmt.Sprintf(`{"targetFile":%q}`, p))
		}
		e.must(os.WriteFile(filepath.Join(dir, string(m.uid)), []byte(`{"mountTargetEntries":[`+strings.Join(entries, ",")+`]}`), 0o600))
		o := e.opts()
		o.VMIs, o.HandlerStateDir = []string{m.name}, dir
		rep, _ := e.run(o)
		if len(rep.Orphans) != 1 || rep.Orphans[0].Verdict != c.want || ExitCode(rep, nil) != c.exit {
			t.Errorf("record %v: orphans %+v, exit %d; want one %s, exit %d (warnings %v)", c.targets, rep.Orphans, ExitCode(rep, nil), c.want, c.exit, rep.Warnings)
		}
		if c.want == LeftToHandler && !strings.Contains(rep.Orphans[0].Hint, "do not remove") {
			t.Errorf("hint %q", rep.Orphans[0].Hint)
		}
		warned := slices.ContainsFunc(rep.Warnings, func(w string) bool {
			return strings.Contains(w, "names a target that is gone") && strings.Contains(w, "gone.img") && strings.Contains(w, "kubevirt#16532, #17882")
		})
		if warned != (c.want == Orphan) {
			t.Errorf("record %v: warnings %q, want the gone target named: %v", c.targets, rep.Warnings, c.want == Orphan)
		}
	}
}
