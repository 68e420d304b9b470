// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
)

// Options say how to start QEMU.
type Options struct {
	// Binary is the QEMU to run; "" is qemu-system-x86_64 from PATH.
	Binary string
	// RootPorts is the number of pcie-root-port slots, rp1…rpN, that
	// disks can be hotplugged into (as libvirt gives KubeVirt's domains);
	// 0 means 4.
	RootPorts int
	// MountNamespaceOf, when not 0, is a pid whose mount namespace QEMU
	// runs in (a launcher's), so it resolves paths as the launcher does.
	MountNamespaceOf int
	// UID and GID, when not 0, are the credentials QEMU runs with (107
	// for KubeVirt's), with no supplementary groups.
	UID, GID int
	// MemoryMiB is the guest's RAM (-m); 0 leaves QEMU's default, 128.
	// Only a memory dump reads it.
	MemoryMiB int
	// Incoming starts QEMU as a live migration's target (-incoming
	// defer): the disks it opens stay inactive, without the write lock,
	// until the migration hands them over (MigrateIncoming).
	Incoming bool
	// Cgroups are cgroup directories (v1 hierarchies' and the v2 one's)
	// that QEMU joins before it starts, as a process of a container does.
	Cgroups []string
}

// QEMU is one running QEMU with a negotiated QMP connection. Its vCPUs
// never run (-S): nothing here needs a guest.
type QEMU struct {
	*Client
	Pid    int
	cmd    *exec.Cmd
	out    *lines
	done   chan struct{}
	wait   error
	stderr interface{ String() string }
}

// File is what blockdev-add opens: a disk image (driver file) or a block
// device (driver host_device), as virt-launcher's libvirt does for a
// hotplugged volume.
type File struct {
	Path  string
	Block bool
	// Direct opens with O_DIRECT (cache.direct, KubeVirt's cache "none");
	// AIO is "native" or "threads" ("" leaves QEMU's default, threads).
	Direct bool
	AIO    string
	// NoLock opens without QEMU's image locking (locking=off), so a
	// second node can open a file or device another node holds, to ask
	// whether QEMU could open it now.
	NoLock bool
}

// BlockdevAdd opens f as the protocol node <node>-file and puts the raw
// format node <node> on it.
func (q *QEMU) BlockdevAdd(ctx context.Context, node string, f File) error {
	driver := "file"
	if f.Block {
		driver = "host_device"
	}
	proto := map[string]any{"driver": driver, "node-name": node + "-file", "filename": f.Path,
		"cache": map[string]any{"direct": f.Direct}}
	if f.AIO != "" {
		proto["aio"] = f.AIO
	}
	if f.NoLock {
		proto["locking"] = "off"
	}
	if err := q.Execute(ctx, "blockdev-add", proto, nil); err != nil {
		return err
	}
	format := map[string]any{"driver": "raw", "node-name": node, "file": node + "-file",
		"cache": map[string]any{"direct": f.Direct}}
	if err := q.Execute(ctx, "blockdev-add", format, nil); err != nil {
		_ = q.Execute(ctx, "blockdev-del", map[string]any{"node-name": node + "-file"}, nil)
		return err
	}
	return nil
}

// BlockdevDel closes what BlockdevAdd opened.
func (q *QEMU) BlockdevDel(ctx context.Context, node string) error {
	for _, n := range []string{node, node + "-file"} {
		if err := q.Execute(ctx, "blockdev-del", map[string]any{"node-name": n}, nil); err != nil {
			return err
		}
	}
	return nil
}

// DeviceAdd plugs a virtio-blk-pci disk id backed by node into the root
// port port (e.g. "rp1").
func (q *QEMU) DeviceAdd(ctx context.Context, id, node, port string) error {
	return q.Execute(ctx, "device_add", map[string]any{"driver": "virtio-blk-pci", "id": id, "drive": node, "bus": port}, nil)
}

// DeviceDel unplugs device id and waits for QEMU's DEVICE_DELETED of it.
func (q *QEMU) DeviceDel(ctx context.Context, id string) error {
	if err := q.Execute(ctx, "device_del", map[string]any{"id": id}, nil); err != nil {
		return err
	}
	_, err := q.WaitEvent(ctx, "DEVICE_DELETED", func(data json.RawMessage) bool {
		var d struct {
			Device string `json:"device"`
		}
		return json.Unmarshal(data, &d) == nil && d.Device == id
	})
	return err
}

// BlockResize tells QEMU the node's new size, as virt-launcher does when
// the volume grew; the guest sees it through the device.
func (q *QEMU) BlockResize(ctx context.Context, node string, size int64) error {
	return q.Execute(ctx, "block_resize", map[string]any{"node-name": node, "size": size}, nil)
}

// BlockInfo is one entry of query-block: a device's backend, or a node
// opened without one.
type BlockInfo struct {
	QDev     string `json:"qdev"`
	Inserted *struct {
		NodeName string `json:"node-name"`
		File     string `json:"file"`
		Image    struct {
			VirtualSize int64 `json:"virtual-size"`
		} `json:"image"`
	} `json:"inserted"`
}

// QueryBlock is QEMU's query-block.
func (q *QEMU) QueryBlock(ctx context.Context) ([]BlockInfo, error) {
	var infos []BlockInfo
	err := q.Execute(ctx, "query-block", nil, &infos)
	return infos, err
}

// DeviceSize is the size QEMU gives the guest for device id, from
// query-block.
func (q *QEMU) DeviceSize(ctx context.Context, id string) (int64, error) {
	infos, err := q.QueryBlock(ctx)
	if err != nil {
		return 0, err
	}
	for _, b := range infos {
		if b.QDev == DeviceBackend(id) && b.Inserted != nil {
			return b.Inserted.Image.VirtualSize, nil
		}
	}
	return 0, fmt.Errorf("query-block: no device %q", id)
}

// DeviceBackend is the QOM path of a virtio-blk-pci device's block
// backend: where HMP qemu-io -d and query-block's qdev name it.
func DeviceBackend(id string) string { return "/machine/peripheral/" + id + "/virtio-backend" }

// qemuIOMarker is the stdout line of `help length`, which QemuIO issues
// after each command: everything QEMU printed before it belongs to the
// command. HMP qemu-io prints on QEMU's stdout, not into the reply.
const qemuIOMarker = "length -- gets the length of the current file"

// QemuIO runs one qemu-io command through QEMU's own block layer on device
// id's backend (HMP `qemu-io -d`), and returns what it printed. An I/O
// error or a pattern that does not verify is an error.
func (q *QEMU) QemuIO(ctx context.Context, id, command string) (string, error) {
	target := "-d " + DeviceBackend(id)
	var got []string
	for _, c := range []string{command, "help length"} {
		var reply string
		line := fmt.Sprintf("qemu-io %s %q", target, c)
		if err := q.Execute(ctx, "human-monitor-command", map[string]any{"command-line": line}, &reply); err != nil {
			return "", err
		}
		if reply != "" {
			return "", fmt.Errorf("%s: %s", line, strings.TrimSpace(reply))
		}
	}
	for {
		l, err := q.out.next(ctx)
		if err != nil {
			return strings.Join(got, "\n"), fmt.Errorf("qemu-io %q: %w", command, err)
		}
		if l == qemuIOMarker {
			break
		}
		got = append(got, l)
	}
	out := strings.Join(got, "\n")
	if strings.Contains(out, "failed") || strings.Contains(out, "error") {
		return out, fmt.Errorf("qemu-io %q on %s: %s", command, id, out)
	}
	return out, nil
}

// WritePattern has QEMU write n bytes of pattern at off on device id.
func (q *QEMU) WritePattern(ctx context.Context, id string, pattern byte, off, n int64) error {
	out, err := q.QemuIO(ctx, id, fmt.Sprintf("write -P %#x %d %d", pattern, off, n))
	if err == nil && !strings.Contains(out, fmt.Sprintf("wrote %d/%d bytes", n, n)) {
		err = fmt.Errorf("qemu-io write on %s: %q", id, out)
	}
	return err
}

// ReadPattern has QEMU read n bytes at off on device id and verify that
// each is pattern.
func (q *QEMU) ReadPattern(ctx context.Context, id string, pattern byte, off, n int64) error {
	out, err := q.QemuIO(ctx, id, fmt.Sprintf("read -P %#x %d %d", pattern, off, n))
	if err == nil && !strings.Contains(out, fmt.Sprintf("read %d/%d bytes", n, n)) {
		err = fmt.Errorf("qemu-io read on %s: %q", id, out)
	}
	return err
}

// DumpGuestMemory writes the guest's memory as an ELF core to path,
// opened by QEMU itself (protocol "file:"), as a KubeVirt memory dump does
// into a memory-dump volume; it returns when the dump is complete.
func (q *QEMU) DumpGuestMemory(ctx context.Context, path string) error {
	return q.Execute(ctx, "dump-guest-memory", map[string]any{"paging": false, "protocol": "file:" + path}, nil)
}

// Migrate live-migrates this QEMU's state to the target listening at uri
// (see MigrateIncoming) and waits until the migration completed; the
// source's disks are then inactive and their locks released, its
// descriptors still open.
func (q *QEMU) Migrate(ctx context.Context, uri string) error {
	caps := map[string]any{"capabilities": []any{map[string]any{"capability": "events", "state": true}}}
	if err := q.Execute(ctx, "migrate-set-capabilities", caps, nil); err != nil {
		return err
	}
	if err := q.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil); err != nil {
		return err
	}
	var status string
	_, err := q.WaitEvent(ctx, "MIGRATION", func(data json.RawMessage) bool {
		var d struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(data, &d) != nil {
			return false
		}
		status = d.Status
		return d.Status == "completed" || d.Status == "failed" || d.Status == "cancelled"
	})
	if err == nil && status != "completed" {
		err = fmt.Errorf("migration to %s: %s", uri, status)
	}
	return err
}

// MigrateIncoming has a QEMU started with Options.Incoming listen for
// the migration at uri (e.g. "unix:/path").
func (q *QEMU) MigrateIncoming(ctx context.Context, uri string) error {
	return q.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil)
}

// Done is closed when the process has exited.
func (q *QEMU) Done() <-chan struct{} { return q.done }

// lines hands out QEMU's stdout one line at a time.
type lines struct {
	mu      sync.Mutex
	buf     []string
	err     error
	changed chan struct{}
}

func newLines(r io.Reader) *lines {
	l := &lines{changed: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			l.push(s.Text(), nil)
		}
		l.push("", fmt.Errorf("qemu stdout ended: %v", s.Err()))
	}()
	return l
}

func (l *lines) push(line string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.err = err
	} else {
		l.buf = append(l.buf, line)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *lines) next(ctx context.Context) (string, error) {
	for {
		l.mu.Lock()
		if len(l.buf) > 0 {
			s := l.buf[0]
			l.buf = l.buf[1:]
			l.mu.Unlock()
			return s, nil
		}
		changed, err := l.changed, l.err
		l.mu.Unlock()
		if err != nil {
			return "", err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}
