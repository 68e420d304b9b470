// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// KubeVirt's mounter reaches the node only as virt-handler does: through
// /proc/1/root, /proc/1/ns/mnt (virt-chroot), /usr/bin/virt-chroot,
// /usr/bin/findmnt and the kubelet's pods directory mounted at /pods. The
// test binary therefore runs as PID 1 of a PID and mount namespace of its
// own, pivoted into a node root made of the machine's directories plus
// those, so that nothing it does reaches the machine's mount table.
const (
	nodeEnv = "HPMOUNT_PEER_NODE" // set in the PID-1 copy of the test binary
	roleEnv = "HPMOUNT_PEER_ROLE" // "pod": a pod's process; "probe": see runProbe
	// cgroupEnv is "v2" in a node nested in the first one whose
	// /sys/fs/cgroup is the cgroup2 hierarchy (inCgroupV2Node).
	cgroupEnv = "HPMOUNT_PEER_CGROUP"
	// otherNodeEnv names a second node nested in the first, beside it as
	// a migration's other node is (handler_nodes_linux_test.go).
	otherNodeEnv = "HPMOUNT_PEER_OTHER_NODE"
	// kubeletRoot is the simulated kubelet's --root-dir, a shared tmpfs as
	// /var/lib/kubelet is on a node.
	kubeletRoot = "/kubelet"
	podsDir     = kubeletRoot + "/pods"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(roleEnv) == "pod":
		os.Exit(runPod())
	case os.Getenv(roleEnv) == "probe":
		os.Exit(runProbe())
	case os.Geteuid() != 0:
		// Root tests skip, or fail under HPMOUNT_REQUIRE_ROOT.
		os.Exit(m.Run())
	case os.Getenv(nodeEnv) == "":
		os.Exit(reexecAsNode())
	}
	if err := enterNodeRoot(); err != nil {
		fmt.Fprintf(os.Stderr, "peer node: %v\n", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// reexecAsNode runs the test binary again as PID 1 of new PID and mount
// namespaces (Go makes the new mount tree private before exec). When it
// exits, the kernel kills every pod process the tests left.
func reexecAsNode() int {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), nodeEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "re-run as the peer node's PID 1: %v\n", err)
		return 2
	}
	return 0
}

// firstNode is the name of the node the test binary runs in, unless it
// runs in another node (inOtherNode).
const firstNode = "node-a"

var (
	// inOtherNode is true in a second node nested in the first, whose
	// kubelet root, /run and PID 1 are its own.
	inOtherNode = os.Getenv(otherNodeEnv) != ""
	// nodeName is the name of the node this test binary runs in.
	nodeName = cmp.Or(os.Getenv(otherNodeEnv), firstNode)
	// podSuffix keeps the pods of two nodes apart: a node's virt-handler
	// takes every pod directory of an active pod UID for its own.
	podSuffix = otherNodeSuffix()
)

func otherNodeSuffix() string {
	if inOtherNode {
		return "-" + nodeName
	}
	return ""
}

// enterNodeRoot builds the node root on a tmpfs over /mnt and pivots into
// it: the machine's top-level directories bound recursively, a fresh /proc
// of this PID namespace, a fresh /run, the kubelet root (shared, as on a
// node) also at /pods where virt-handler mounts it, and /usr/bin with
// virt-chroot added.
//
// A cgroup v2 node is built the same way inside the first node, whose
// /usr/bin already holds virt-chroot, with the cgroup2 hierarchy bound
// over /sys/fs/cgroup: KubeVirt (runc's IsCgroup2UnifiedMode) picks its v2
// manager only when /sys/fs/cgroup itself is cgroup2. Another node is
// built so too, on the cgroup hierarchy of the node it is nested in.
func enterNodeRoot() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	nested := inCgroupV2Node || inOtherNode
	root := "/mnt"
	if nested {
		root = "/run/peer-node-" + cmp.Or(os.Getenv(otherNodeEnv), "v2")
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount node root: %w", err)
	}
	entries, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		dst := filepath.Join(root, name)
		switch {
		case name == "proc" || name == "mnt" || name == "run" || name == "lost+found":
		case nested && (name == "kubelet" || name == "pods"):
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink("/" + name)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
		case e.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			if err := unix.Mount("/"+name, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind %q: %w", name, err)
			}
		}
	}
	steps := []func() error{
		func() error { return mountAt(root+"/proc", "proc", "proc", 0, "") },
		func() error { return mountAt(root+"/run", "tmpfs", "tmpfs", 0, "mode=0755") },
		func() error {
			switch {
			case inOtherNode:
				return nil // the cgroups and virt-chroot of the node it is in
			case inCgroupV2Node:
				return unix.Mount(cgroup2Dir, root+"/sys/fs/cgroup", "", unix.MS_BIND, "")
			}
			return buildVirtChroot(root + chrootDir)
		},
		func() error { return mountAt(root+kubeletRoot, "tmpfs", "tmpfs", 0, "mode=0755") },
		func() error { return unix.Mount("", root+kubeletRoot, "", unix.MS_SHARED, "") },
		func() error { return os.MkdirAll(root+podsDir, 0o750) },
		func() error { return mountAt(root+"/pods", root+podsDir, "", unix.MS_BIND, "") },
		func() error {
			if nested {
				return nil // the first node's /usr/bin, with virt-chroot
			}
			return unix.Mount("overlay", root+"/usr/bin", "overlay", unix.MS_RDONLY, "lowerdir="+root+chrootDir+":/usr/bin")
		},
		// virt-handler's image has QEMU's user, whom its ownership manager
		// looks up by name.
		func() error { return addLine(root, "/etc/passwd", "qemu:x:107:107:qemu user:/:/sbin/nologin") },
		func() error { return addLine(root, "/etc/group", "qemu:x:107:") },
		func() error { return os.Mkdir(root+"/.old", 0o700) },
		func() error { return unix.PivotRoot(root, root+"/.old") },
		func() error { return unix.Chdir("/") },
		func() error { return unix.Unmount("/.old", unix.MNT_DETACH) },
		func() error { return os.Remove("/.old") },
		func() error { return os.Chdir(wd) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("node root step %d: %w", i, err)
		}
	}
	return nil
}

// addLine binds over root+file a copy of file with line added, unless
// file has it already.
func addLine(root, file, line string) error {
	old, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	name, _, _ := strings.Cut(line, ":")
	for _, l := range strings.Split(string(old), "\n") {
		if strings.HasPrefix(l, name+":") {
			return nil
		}
	}
	copyPath := root + "/run/peer" + file
	if err := os.MkdirAll(filepath.Dir(copyPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(copyPath, append(old, []byte(line+"\n")...), 0o644); err != nil {
		return err
	}
	return unix.Mount(copyPath, root+file, "", unix.MS_BIND, "")
}

func mountAt(dir, source, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(source, dir, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %q: %w", fstype+source, dir, err)
	}
	return nil
}

// chrootDir, on the node's /run, holds virt-chroot; it becomes part of
// /usr/bin, where the mounter execs it.
const chrootDir = "/run/peer/bin"

// buildVirtChroot builds the peer's KubeVirt's virt-chroot into dir
// as virt-chroot-real, behind virt-chroot, the seam of kubeVirtPaused.
func buildVirtChroot(dir string) error {
	cmd := exec.Command("go", "build", "-modfile="+kubeVirtModFile, "-o", dir+"/virt-chroot-real", "kubevirt.io/kubevirt/cmd/virt-chroot")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build virt-chroot: %v: %s", err, out)
	}
	return os.WriteFile(dir+"/virt-chroot", []byte(virtChrootSeam), 0o755)
}

// virtChrootSeam is /usr/bin/virt-chroot, where virt-handler's mounter
// execs it: the first call whose arguments match seam.match (grep -E),
// after seam.skip such calls if that says so, (a mount or an umount)
// stops after virt-handler's own look at the
// target and before its mount or umount, says so on seam.arrive, and goes
// on once the test has closed seam.proceed (coNode.kubeVirtPaused). Any
// other call is KubeVirt's virt-chroot as it is.
const virtChrootSeam = `#!/bin/sh
seam=` + seamPrefix + `
if [ -f "$seam.match" ] && echo " $* " | grep -qE "$(cat "$seam.match")"; then
	skip=$(cat "$seam.skip" 2>/dev/null || echo 0)
	if [ "$skip" -gt 0 ]; then
		echo $((skip - 1)) > "$seam.skip"
	else
		rm -f "$seam.match"
		echo "$*" > "$seam.arrive"
		cat "$seam.proceed" > /dev/null
	fi
fi
exec /usr/bin/virt-chroot-real "$@"
`

// seamPrefix names the seam's files, on the node's /run.
const seamPrefix = "/run/peer/seam"

// Environment of a pod process.
const (
	podSocketEnv = "HPMOUNT_PEER_SOCKET" // the unix socket it listens on
	podBindsEnv  = "HPMOUNT_PEER_BINDS"  // "src=/dst;...": its own root holds only these
	podViewEnv   = "HPMOUNT_PEER_VIEW"   // "src=/dst": bound where the container sees it
)

// runPod is a pod's process: a mount namespace whose mounts are slaves of
// the node's (HostToContainer), owning a listening unix socket, as the
// launcher's command server or the attachment pod's container-disk do, so
// that virt-handler finds it by SO_PEERCRED. With binds it pivots into a
// root holding only them, as the attachment pod's container sees each
// volume at /<volume>. It says "ready" and lives until stdin closes.
func runPod() int {
	fail := func(err error) int { fmt.Fprintf(os.Stderr, "pod: %v\n", err); return 2 }
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fail(err)
	}
	l, err := net.Listen("unix", os.Getenv(podSocketEnv))
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if view := os.Getenv(podViewEnv); view != "" {
		src, dst, _ := strings.Cut(view, "=")
		if err := mountAt(dst, src, "", unix.MS_BIND, ""); err != nil {
			return fail(err)
		}
	}
	if binds := os.Getenv(podBindsEnv); binds != "" {
		if err := pivotInto(strings.Split(binds, ";")); err != nil {
			return fail(err)
		}
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

func pivotInto(binds []string) error {
	// On the node's /run tmpfs: gone with the node.
	root, err := os.MkdirTemp("/run", "peer-pod-")
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	for _, b := range binds {
		src, dst, _ := strings.Cut(b, "=")
		if err := mountAt(root+dst, src, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := os.Mkdir(root+"/.old", 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, root+"/.old"); err != nil {
		return err
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return unix.Unmount("/.old", unix.MNT_DETACH)
}

// pod is a running pod process.
type pod struct {
	cmd   *exec.Cmd
	stdin *os.File
}

// startPod starts a pod process listening on socket; binds and view as in
// runPod's environment.
func startPod(t *testing.T, socket, binds, view string) *pod {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(socket), 0o777); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), roleEnv+"=pod", podSocketEnv+"="+socket, podBindsEnv+"="+binds, podViewEnv+"="+view)
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	p := &pod{cmd: cmd, stdin: w}
	t.Cleanup(p.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("pod on %q: %q %v", socket, line, err)
	}
	return p
}

func (p *pod) pid() int { return p.cmd.Process.Pid }

func (p *pod) stop() {
	p.stdin.Close()
	_ = p.cmd.Wait()
}

// cgroup2Dir is where this machine mounts the cgroup2 hierarchy beside
// the v1 ones (hybrid mode).
const cgroup2Dir = "/sys/fs/cgroup/unified"

// inCgroupV2Node is true in the nested node whose /sys/fs/cgroup is
// cgroup2.
var inCgroupV2Node = os.Getenv(cgroupEnv) == "v2"

// runInCgroupV2Node runs the calling test again, alone, in a cgroup v2
// node: a copy of the test binary as PID 1 of new PID and mount
// namespaces inside this node. The copy runs the test's body (it finds
// inCgroupV2Node set); this one fails when the copy fails, and logs what
// it printed.
func runInCgroupV2Node(t *testing.T) {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), cgroupEnv+"=v2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in the cgroup v2 node:\n%s", out)
	if err != nil {
		t.Fatalf("the test in the cgroup v2 node: %v", err)
	}
}

// Environment of a probe process.
const (
	probeCgroupEnv = "HPMOUNT_PEER_PROBE_CGROUP" // the cgroup it joins first
	probePathsEnv  = "HPMOUNT_PEER_PROBE_PATHS"  // "a;b": the nodes it opens
	probeMknodEnv  = "HPMOUNT_PEER_PROBE_MKNOD"  // a block "MAJ:MIN" it mknods
)

// runProbe moves itself into a cgroup, as a process of the launcher's
// compute container, and prints per path which of read and write opens the
// device cgroup let through ("rw", "r-", "--"), then "m" or "-" for the
// mknod of a block node of the given major:minor.
func runProbe() int {
	if err := os.WriteFile(filepath.Join(os.Getenv(probeCgroupEnv), "cgroup.procs"), []byte("0"), 0); err != nil {
		fmt.Fprintf(os.Stderr, "probe: join cgroup: %v\n", err)
		return 2
	}
	for _, p := range strings.Split(os.Getenv(probePathsEnv), ";") {
		acc := []byte("--")
		for i, flag := range []int{unix.O_RDONLY, unix.O_WRONLY} {
			if fd, err := unix.Open(p, flag|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
				acc[i] = "rw"[i]
			}
		}
		fmt.Printf("%s %s\n", p, acc)
	}
	var maj, min uint32
	if _, err := fmt.Sscanf(os.Getenv(probeMknodEnv), "%d:%d", &maj, &min); err == nil {
		dir, err := os.MkdirTemp("/run", "peer-probe-")
		if err != nil {
			return 2
		}
		defer os.RemoveAll(dir)
		m := "-"
		if unix.Mknod(filepath.Join(dir, "node"), unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min))) == nil {
			m = "m"
		}
		fmt.Printf("mknod %s\n", m)
	}
	return 0
}

// probeAccess runs a probe in cgroup on each named path and returns
// "name:rw name:-- ... mknod:m", names in the order given.
func probeAccess(t *testing.T, cgroup string, mknod uint64, named ...[2]string) string {
	t.Helper()
	var paths []string
	for _, n := range named {
		paths = append(paths, n[1])
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), roleEnv+"=probe", probeCgroupEnv+"="+cgroup,
		probePathsEnv+"="+strings.Join(paths, ";"), probeMknodEnv+"="+fmt.Sprintf("%d:%d", unix.Major(mknod), unix.Minor(mknod)))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe in %q: %v: %s", cgroup, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(named)+1 {
		t.Fatalf("probe in %q printed %q", cgroup, out)
	}
	var res []string
	for i, n := range named {
		_, acc, _ := strings.Cut(lines[i], " ")
		res = append(res, n[0]+":"+acc)
	}
	return strings.Join(append(res, strings.Replace(lines[len(named)], " ", ":", 1)), " ")
}
