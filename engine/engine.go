// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/grow"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
	"github.com/hpmount/hpmount/podcgroup"
	"github.com/hpmount/hpmount/propagation"
)

// Engine is the hotplug.Engine of a real node.
type Engine struct {
	ns *isolation.MountNamespace
	// lookers read for Observe on threads of their own (look.go).
	lookers []looker
	// calls and growth run what can wait on a volume's storage, each call
	// on a thread of its own (storage.go); ns keeps the rest.
	calls, growth *storageCalls

	host     isolation.Host
	root     kubelet.Root
	sysRoot  string
	attacher *mount.Attacher
	grower   *grow.Grower
	nodes    *blockdev.Nodes
	rules    blockdev.DeviceRules
	// ruleWatch watches the device rules of the launchers with block
	// volumes (rules.go).
	ruleWatch ruleWatches
	grow      GrowPolicy
	memo      growMemo
	// createImages lets Attach create a missing disk.img.
	createImages bool
	// view asks launchers what they see; sight remembers what they were
	// seen to receive.
	view  propagation.LauncherView
	sight sightMemo
	// held remembers the entries QEMU was found not to hold stale.
	held heldMemo
	// answers remembers the probes of volumes' storage still unanswered
	// (answers.go); callTimeout is their deadline, as the namespace's.
	answers     answerMemo
	callTimeout time.Duration
	// noStatmount is why each launcher's mounts are not read with
	// statmount(2) (snapshot.go): nil where they are.
	noStatmount error
	// mountEvents lets WatchMounts run (mountevents.go).
	mountEvents bool
	// handlerDir is virt-handler's record directory ("" reads none);
	// stuck tells a record it is stuck on from one it is working through.
	handlerDir string
	stuck      stuckMemo
	// gateMu guards the last propagation verdict.
	gateMu  sync.Mutex
	gateAt  time.Time
	gateErr error
}

var _ hotplug.Engine = (*Engine)(nil)

// New joins the host mount namespace, resolves the kubelet root there and
// opens the device-cgroup flavour in use.
func New(c Config) (*Engine, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("node engine config: %w", err)
	}
	ns, err := isolation.OpenMountNamespace(c.Host.MountNamespace())
	if err != nil {
		return nil, err
	}
	root, err := kubelet.ResolveRoot(ns, c.KubeletRoot)
	if err != nil {
		ns.Close()
		return nil, err
	}
	rules, err := blockdev.NewDeviceRules(c.CgroupMode, c.CgroupRoot)
	if err != nil {
		ns.Close()
		return nil, err
	}
	ns.SetTimeout(c.CallTimeout)
	p := newParts(ns, root, c)
	lookers, err := openLookers(c.Host.MountNamespace(), p.attacher, c.CallTimeout, lookThreads)
	if err != nil {
		ns.Close()
		return nil, err
	}
	noStatmount := errors.New("the engine is configured to read the whole table (Config.WholeTable)")
	if !c.WholeTable {
		_, noStatmount = isolation.Call(ns, func() (struct{}, error) { return struct{}{}, mountinfo.CheckStatmount() })
	}
	return &Engine{
		ns: ns, lookers: lookers, host: c.Host, root: root, sysRoot: c.SysRoot, rules: rules, grow: c.Grow,
		createImages: c.CreateDiskImages, mountEvents: c.MountEvents, callTimeout: c.CallTimeout, handlerDir: c.HandlerStateDir,
		stuck:    stuckMemo{after: c.HandlerStuckAfter},
		view:     propagation.LauncherView{Proc: c.Host.Proc, Dir: c.LauncherDir, CgroupRoot: rules.Root(), Pods: &podcgroup.Finder{}},
		attacher: &p.attacher, grower: &p.grower, nodes: &p.nodes,
		calls:       newStorageCalls(c.Host.MountNamespace(), c.CallTimeout),
		growth:      newStorageCalls(c.Host.MountNamespace(), c.GrowTimeout),
		noStatmount: noStatmount,
	}, nil
}

// Close leaves the host namespace and closes the rule watches. Mounts
// stay.
func (e *Engine) Close() {
	e.ns.Close()
	closeLookers(e.lookers)
	e.calls.close()
	e.growth.close()
	e.ruleWatch.close()
}

// SweepGrowthLeftovers unmounts what a growth of an older hpmount left in
// the private directory (versions that grew through a private mount, killed
// mid-growth; growth now mounts nothing) and says how many.
func (e *Engine) SweepGrowthLeftovers() (int, error) {
	t, err := e.privateMounts()
	if err != nil {
		return 0, err
	}
	return e.grower.Sweep(t)
}

// privateMounts lists what is mounted in the private directory. The sweep
// runs before the agent starts, so on a node of 10,000 mounts the whole
// table it read was a tenth of a second of every cold start: where
// statmount works it asks for the directory's entries alone, as a launcher's
// observation does, and reads the table only where a mount covers the
// directory itself and hides what an older agent left under it.
func (e *Engine) privateMounts() (*mountinfo.Table, error) {
	whole := func() (*mountinfo.Table, error) { return mountinfo.ReadTable(e.host.MountInfo()) }
	if e.noStatmount != nil || e.grower.PrivateDir == "" {
		return whole()
	}
	return mountsUnder(e.ns, e.grower.PrivateDir, nil, whole)
}

// Liveness returns the agent's liveness check. It fails only when a
// restart would help:
//
//   - no thread could be started in the host namespace to replace a
//     written-off one, so no attach or detach (or no observe of the
//     launchers of one looker, look.go) runs at all;
//   - an attach, detach or observe has been stuck past limit in a thread
//     that a signal reaches (waiting on a hung FUSE server, a pipe, a lock).
//
// A thread in uninterruptible sleep ('D': a frozen filesystem, storage
// that does not answer) keeps the process from exiting until the wait
// ends: a restart would only take the agent down until the storage comes
// back, and the calls that follow already run on threads of their own
// (storage.go). Growth is not looked at: a growth waits on the filesystem
// it grows (FIFREEZE during a snapshot), it has its own threads, deadline
// and report on its volume, and restarting cannot make it finish sooner.
func (e *Engine) Liveness(limit time.Duration) func() error {
	return func() error {
		now := time.Now()
		if err := liveness(e.ns, limit, now); err != nil {
			return err
		}
		if err := e.calls.liveness("attaches and detaches", limit, now); err != nil {
			return err
		}
		for _, l := range e.lookers {
			if err := liveness(l.ns, limit, now); err != nil {
				return fmt.Errorf("observe: %w", err)
			}
		}
		return nil
	}
}

// liveness is Liveness of the runner ns at now.
func liveness(ns *isolation.MountNamespace, limit time.Duration, now time.Time) error {
	calls, noThread := ns.StuckCalls()
	if noThread != nil {
		return fmt.Errorf("no thread in the host mount namespace runs %q's calls: %w", ns.Path(), noThread)
	}
	return stuckPast(calls, limit, now)
}

// stuckPast fails for a call of calls stuck past limit where a signal
// reaches it.
func stuckPast(calls []isolation.StuckCall, limit time.Duration, now time.Time) error {
	for _, c := range calls {
		// A state that cannot be read is a thread that just returned.
		if d := now.Sub(c.Since); d > limit && c.State != 0 && !c.Uninterruptible() {
			return fmt.Errorf("a call in the host mount namespace has been stuck for %s in thread %d, state %c (limit %s): a restart ends it",
				d.Round(time.Second), c.TID, c.State, limit)
		}
	}
	return nil
}

// StuckThreads is how many threads calls given up on hold now: attaches,
// detaches and growths stuck on their volumes' storage (each volume holds
// at most one of each, storage.go), reads of the serial thread and the
// lookers, and storage probes that have not answered (answers.go).
func (e *Engine) StuckThreads() int {
	n := e.ns.Held() + e.calls.held() + e.growth.held() + e.answers.pendingCount()
	for _, l := range e.lookers {
		n += l.ns.Held()
	}
	return n
}

// KubeletRoot is the kubelet root as resolved in the host namespace.
func (e *Engine) KubeletRoot() kubelet.Root { return e.root }

// CheckPropagation is the agent's readiness gate: the kubelet's pods
// directory must be on a shared mount in the host namespace, or mounts made
// there never reach the launchers' HostToContainer views.
//
// A verdict is kept for gateTTL: the probe runs every few seconds. Where
// statmount(2) works the gate reads the pods directory's mount alone;
// elsewhere it reads the node's whole mount table, which for each probe
// would cost more than the reconciles of an idle node.
func (e *Engine) CheckPropagation(context.Context) error {
	e.gateMu.Lock()
	defer e.gateMu.Unlock()
	if !e.gateAt.IsZero() && time.Since(e.gateAt) < gateTTL {
		return e.gateErr
	}
	pods := e.root.Abs(kubelet.PodsDir)
	m, err := e.mountOf(pods)
	if err == nil {
		err = propagation.CheckSharedMount(m, pods)
	}
	e.gateAt, e.gateErr = time.Now(), err
	return err
}

// mountOf returns the mount dir lives on in the host namespace: with
// statmount(2), that mount alone; else from the host's whole mountinfo.
func (e *Engine) mountOf(dir string) (*mountinfo.Info, error) {
	if e.noStatmount != nil {
		t, err := mountinfo.ReadTable(e.host.MountInfo())
		if err != nil {
			return nil, err
		}
		return propagation.MountOf(t, dir)
	}
	m, err := isolation.Call(e.ns, func() (mountinfo.Info, error) {
		f, err := openNearest(dir)
		if err != nil {
			return mountinfo.Info{}, err
		}
		defer f.Close()
		return mountinfo.StatFd(int(f.Fd()))
	})
	if err != nil {
		return nil, fmt.Errorf("read the mount of %q: %w", dir, stuck(err))
	}
	return &m, nil
}

// openNearest opens dir or, while it does not exist, its nearest parent
// that does: a path not made yet lives on that parent's mount, as the
// table's Containing says. The kubelet makes its pods directory only with
// the first pod, and the gate is asked before that.
func openNearest(dir string) (*os.File, error) {
	for {
		f, err := os.Open(dir)
		parent := filepath.Dir(dir)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || parent == dir {
			return f, err
		}
		dir = parent
	}
}

// gateTTL is how long a propagation verdict is kept.
const gateTTL = 30 * time.Second

func hotplugDisks(launcher types.UID) string { return kubelet.HotplugDisksDir(string(launcher)) }

// refusal turns tenant content the node will not touch into the agent's
// refusal, and a call abandoned past its deadline into hotplug.ErrStuck;
// other errors pass unchanged.
func refusal(err error) error {
	if errors.Is(err, isolation.ErrStuck) {
		return stuck(err)
	}
	if r := kubevirt.RefusalOf(err); r != nil {
		return r
	}
	return err
}

// Observe lists the launcher's file binds, directory binds and block nodes,
// and whether QEMU holds a stale one (held.go says when it is asked). A
// check of one entry that gets stuck on its storage marks that entry
// (ObservedVolume.Unchecked) and the others are checked as usual: one hung
// volume must not hide the VMI's others. The listing itself asks nothing
// of the volumes' filesystems that could hang (mount's lookAt); each
// healthy bind's storage is then asked to answer off the namespace's
// thread (answers.go) before anything else is asked of it.
func (e *Engine) Observe(ctx context.Context, s hotplug.Snapshot, launcher types.UID) ([]hotplug.ObservedVolume, error) {
	ls, err := e.list(s, launcher, e.answers.waiting(launcher))
	if err != nil {
		return nil, err
	}
	e.checkBinds(ctx, launcher, ls)
	out := make([]hotplug.ObservedVolume, 0, len(ls.binds)+len(ls.nodes))
	for _, b := range ls.binds {
		out = append(out, b.o)
	}
	for _, n := range ls.nodes {
		if n.Covered {
			// Not a node QEMU can reach: the next attach removes the mount.
			out = append(out, hotplug.ObservedVolume{Name: n.Name, Mode: kubevirt.Block, Mounted: true})
			continue
		}
		o := hotplug.ObservedVolume{Name: n.Name, Mode: kubevirt.Block, DeviceMajor: n.Device.Major, DeviceMinor: n.Device.Minor}
		o.StaleWhy, o.Unchecked = e.staleOpen(launcher, n.Name, n.Name, entryKey{device: n.Device})
		o.StaleOpen = o.StaleWhy != ""
		out = append(out, o)
	}
	if len(out) == 0 {
		e.forgetLauncher(launcher)
	}
	return out, nil
}

// bind is an observed file or directory bind: what the agent is told, and
// what the engine's checks of it need.
type bind struct {
	o      hotplug.ObservedVolume
	target string
	entry  entryKey
}

// bindOf is the bind f of volume f.Name, of kind k.
func bindOf(f mount.Observed, k hotplug.Kind) bind {
	return bind{target: k.Target(f.Name), entry: fileEntry(f), o: hotplug.ObservedVolume{Name: f.Name, Mode: k.Mode, Mounted: f.Mounted,
		Stacked: f.Depth, SourceDev: f.Dev, SourceRoot: f.Root, SourceGone: f.SourceGone}}
}

// targetName is the name of volume's target in hotplug-disks, by the
// kubelet package's rule name (kubelet.TargetName, DirTargetName), once
// the volume's name is one a target can have (kubelet.ValidName): the
// VMI, which a tenant writes, names the volume.
func targetName(volume string, name func(string) string) (string, error) {
	if err := kubelet.ValidName(volume); err != nil {
		return "", err
	}
	return name(volume), nil
}

// checkBinds asks, of each healthy bind, whether its storage answers,
// whether the launcher sees it and, for a file, whether QEMU holds a stale
// one. A check stuck past its deadline marks its entry Unchecked and the
// next check of that entry is not asked.
func (e *Engine) checkBinds(ctx context.Context, launcher types.UID, ls listing) {
	a := e.answered(ctx, launcher, ls)
	// The pass's checks find the launcher pod's cgroups once, not twice
	// per bind: those walks were nearly a tenth of a cold start's CPU on
	// the scale node.
	view := e.view
	if view.Pods != nil {
		view.Pods = view.Pods.Settle()
	}
	for k := range ls.binds {
		o := &ls.binds[k].o
		if !o.Healthy(o.Mode) {
			continue
		}
		if o.Unchecked = a.stuck[o.Name]; o.Unchecked != nil {
			continue
		}
		// Answering: its checks are remembered (answered), so the memos
		// answer them below and nothing reaches its storage.
		o.Answering = a.answering[o.Name]
		e.checkBind(view, launcher, ls.binds[k], o)
	}
}

// Attach bind-mounts a filesystem volume's disk.img (creating it first if
// it is missing and Config.CreateDiskImages allows), binds a directory
// volume's PVC root, or makes and allows a block volume's node.
func (e *Engine) Attach(ctx context.Context, s hotplug.Snapshot, v hotplug.DesiredVolume) (outcome.Result, error) {
	r, err := e.attach(s, v)
	forgetListed(s, v.LauncherUID, r, err)
	return r, err
}

func (e *Engine) attach(s hotplug.Snapshot, v hotplug.DesiredVolume) (outcome.Result, error) {
	return onStorage(e, e.calls, growKey{v.LauncherUID, v.Name}, "attach", func(h hands) (outcome.Result, error) {
		return e.attachOn(h, s, v)
	})
}

func (e *Engine) attachOn(h hands, s hotplug.Snapshot, v hotplug.DesiredVolume) (outcome.Result, error) {
	k, err := kindOf(v.Mode)
	if err != nil {
		return outcome.Unchanged, fmt.Errorf("attach %q: %w", v.Name, err)
	}
	return k.attach(e, h, s, v)
}

// bindSource finds where the kubelet published a bound volume, and the
// table to bind it by: the launcher's mounts and the volume's own, which a
// bind's source is checked against.
func (e *Engine) bindSource(h hands, s hotplug.Snapshot, v hotplug.DesiredVolume) (*mountinfo.Table, string, error) {
	src, err := isolation.Call(h.ns, func() (string, error) {
		return kubelet.FindPublished(e.root, string(v.Source.AttachmentPodUID), v.Source.PVName)
	})
	if err != nil {
		return nil, "", refusal(err)
	}
	t, err := e.tableFor(h.ns, s, v.LauncherUID, src)
	return t, src, err
}

// Detach unmounts and removes a filesystem or directory volume's target,
// or removes a block node and its cgroup rule.
func (e *Engine) Detach(ctx context.Context, s hotplug.Snapshot, launcher types.UID, o hotplug.ObservedVolume) (outcome.Result, error) {
	r, err := e.detach(s, launcher, o)
	forgetListed(s, launcher, r, err)
	return r, err
}

func (e *Engine) detach(s hotplug.Snapshot, launcher types.UID, o hotplug.ObservedVolume) (outcome.Result, error) {
	return onStorage(e, e.calls, growKey{launcher, o.Name}, "detach", func(h hands) (outcome.Result, error) {
		return e.detachOn(h, s, launcher, o)
	})
}

func (e *Engine) detachOn(h hands, s hotplug.Snapshot, launcher types.UID, o hotplug.ObservedVolume) (outcome.Result, error) {
	k, err := kindOf(o.Mode)
	if err != nil {
		return outcome.Unchanged, fmt.Errorf("detach %q: %w", o.Name, err)
	}
	t, err := e.tableFor(h.ns, s, launcher)
	if err != nil {
		return outcome.Unchanged, err
	}
	e.held.forget(growKey{launcher, o.Name})
	return k.detach(e, h, t, launcher, o.Name)
}

// forgetBind drops what the engine remembers of a bind it detaches: its
// growth check and the launcher's sight of it.
func (e *Engine) forgetBind(launcher types.UID, name string) {
	e.memo.forget(growKey{launcher, name})
	e.sight.forget(growKey{launcher, name})
}

// Launchers lists the pod directories whose hotplug-disks holds an entry.
func (e *Engine) Launchers(ctx context.Context, s hotplug.Snapshot) ([]types.UID, error) {
	return isolation.Call(e.ns, func() ([]types.UID, error) {
		dirs, err := kubelet.LauncherDirs(e.root)
		var uids []types.UID
		for _, d := range dirs {
			if !d.Empty {
				uids = append(uids, types.UID(d.UID))
			}
		}
		return uids, err
	})
}
