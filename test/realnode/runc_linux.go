// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Runc runs the machine's runc (Debian's 1.1.5) against one state
// directory, with no containerd or kubelet in between.
type Runc struct {
	// StateDir is runc's --root.
	StateDir string
	// Unified makes every call see the machine's cgroup2 hierarchy at
	// /sys/fs/cgroup. runc 1.1 picks cgroup v1 or v2 by statfs of
	// /sys/fs/cgroup; on this hybrid machine that is a tmpfs (v1), so each
	// call runs in a mount namespace of its own in which
	// /sys/fs/cgroup/unified is bound onto /sys/fs/cgroup. It is the same
	// kernel hierarchy, so what runc makes there is seen outside under
	// /sys/fs/cgroup/unified.
	Unified bool
}

// unifiedView binds the cgroup2 mount over /sys/fs/cgroup and runs runc
// with the arguments after it ($@).
const unifiedView = `mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup && exec runc "$@"`

func (r Runc) command(ctx context.Context, args ...string) *exec.Cmd {
	args = append([]string{"--root", r.StateDir}, args...)
	if !r.Unified {
		return exec.CommandContext(ctx, "runc", args...)
	}
	shell := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", unifiedView, "sh"}, args...)
	return exec.CommandContext(ctx, "unshare", shell...)
}

// Run runs runc with args and returns its combined output.
func (r Runc) Run(ctx context.Context, args ...string) (string, error) {
	out, err := r.command(ctx, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Start runs the bundle's container detached, as id. The container's init
// inherits runc's stdio, so runc gets a log file rather than pipes: a pipe
// would stay open as long as the container runs.
func (r Runc) Start(ctx context.Context, bundle, id string) error {
	log, err := os.Create(filepath.Join(r.StateDir, id+".log"))
	if err != nil {
		return fmt.Errorf("runc log of %q: %w", id, err)
	}
	defer log.Close()
	cmd := r.command(ctx, "run", "--detach", "--bundle", bundle, id)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		return fmt.Errorf("runc run %q: %w: %s", id, err, bytes.TrimSpace(out))
	}
	return nil
}

// Pid returns the pid of the container's init, from runc state.
func (r Runc) Pid(ctx context.Context, id string) (int, error) {
	out, err := r.Run(ctx, "state", id)
	if err != nil {
		return 0, err
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return 0, fmt.Errorf("runc state %q: %w", id, err)
	}
	return st.Pid, nil
}

// Delete kills and removes the container; runc removes its cgroup, not
// the parents it made.
func (r Runc) Delete(ctx context.Context, id string) error {
	_, err := r.Run(ctx, "delete", "--force", id)
	return err
}

// ociSpec is the part of an OCI runtime config (runtime-spec 1.0) a test
// container needs.
type ociSpec struct {
	OCIVersion string      `json:"ociVersion"`
	Process    ociProcess  `json:"process"`
	Root       ociRoot     `json:"root"`
	Hostname   string      `json:"hostname"`
	Mounts     []ociMount  `json:"mounts"`
	Linux      ociLinuxCfg `json:"linux"`
}

type ociProcess struct {
	User            ociUser  `json:"user"`
	Args            []string `json:"args"`
	Env             []string `json:"env"`
	Cwd             string   `json:"cwd"`
	NoNewPrivileges bool     `json:"noNewPrivileges"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinuxCfg struct {
	Namespaces  []ociNamespace `json:"namespaces"`
	CgroupsPath string         `json:"cgroupsPath"`
	Resources   ociResources   `json:"resources"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Devices []ociDeviceRule `json:"devices"`
}

type ociDeviceRule struct {
	Allow  bool   `json:"allow"`
	Access string `json:"access"`
}

// QEMUUser is the uid and gid QEMU runs as in virt-launcher; the test
// container's processes run as it too.
const QEMUUser = 107

// WriteBundle makes an OCI bundle in dir: a read-only rootfs holding
// busybox (Debian's busybox-static) and a config.json that
// runs `busybox sleep` as QEMUUser in the cgroup cgroupsPath (absolute,
// from the hierarchy's root). Its device rules are what `runc spec` and
// the kubelet give a container: deny everything; runc appends its own
// default devices and generates the device program (v2) or the
// devices.allow lines (v1) from them.
func WriteBundle(dir, cgroupsPath string) error {
	bin := filepath.Join(dir, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fmt.Errorf("bundle rootfs %q: %w", bin, err)
	}
	busybox, err := os.ReadFile(busyboxPath)
	if err != nil {
		return fmt.Errorf("busybox for bundle %q (package busybox-static): %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), busybox, 0o755); err != nil {
		return fmt.Errorf("bundle %q: %w", dir, err)
	}
	spec := ociSpec{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			User:            ociUser{UID: QEMUUser, GID: QEMUUser},
			Args:            []string{"/bin/busybox", "sleep", "3600"},
			Env:             []string{"PATH=/bin"},
			Cwd:             "/",
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: "rootfs", Readonly: true},
		Hostname: "runc-test",
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		},
		Linux: ociLinuxCfg{
			Namespaces:  []ociNamespace{{"pid"}, {"network"}, {"ipc"}, {"uts"}, {"mount"}},
			CgroupsPath: cgroupsPath,
			Resources:   ociResources{Devices: []ociDeviceRule{{Allow: false, Access: "rwm"}}},
		},
	}
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return fmt.Errorf("bundle %q: %w", dir, err)
	}
	return nil
}
