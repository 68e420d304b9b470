package peer

import (
	"bufio"
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
	roleEnv = "HPMOUNT_PEER_ROLE" // "pod": the binary is a pod's process
	// kubeletRoot is the simulated kubelet's --root-dir, a shared tmpfs as
	// /var/lib/kubelet is on a node.
	kubeletRoot = "/kubelet"
	podsDir     = kubeletRoot + "/pods"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(roleEnv) == "pod":
		os.Exit(runPod())
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

// enterNodeRoot builds the node root on a tmpfs over /mnt and pivots into
// it: the machine's top-level directories bound recursively, a fresh /proc
// of this PID namespace, a fresh /run, the kubelet root (shared, as on a
// node) also at /pods where virt-handler mounts it, and /usr/bin with
// virt-chroot added.
func enterNodeRoot() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	const root = "/mnt"
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
		func() error { return buildVirtChroot(root + chrootDir) },
		func() error { return mountAt(root+kubeletRoot, "tmpfs", "tmpfs", 0, "mode=0755") },
		func() error { return unix.Mount("", root+kubeletRoot, "", unix.MS_SHARED, "") },
		func() error { return os.MkdirAll(root+podsDir, 0o750) },
		func() error { return mountAt(root+"/pods", root+podsDir, "", unix.MS_BIND, "") },
		func() error {
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

// buildVirtChroot builds KubeVirt's virt-chroot from this module into dir.
func buildVirtChroot(dir string) error {
	cmd := exec.Command("go", "build", "-o", dir+"/", "kubevirt.io/kubevirt/cmd/virt-chroot")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build virt-chroot: %v: %s", err, out)
	}
	return nil
}

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
