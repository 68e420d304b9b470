// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// MountNamespace runs functions inside one mount namespace, on a dedicated
// OS thread that joined it once. Running on one thread makes the calls of a
// batch serial, which also keeps two reconciles from racing on one target.
//
// With a timeout set, a call that has not returned by then is abandoned:
// Do returns an error wrapping ErrStuck, the thread running it is written
// off, and a new thread serves the calls that follow. A syscall stuck in the
// kernel (a stat on a dead NFS server, a resize on a frozen filesystem)
// then costs one thread, not every later call.
type MountNamespace struct {
	path    string
	timeout time.Duration

	mu      sync.Mutex
	cur     *runner
	closed  bool
	done    chan struct{}
	stuck   map[*runner]time.Time // written-off runners still in a call, by call start
	written uint64                // calls abandoned so far
	// noThread is why the last attempt to start a thread in the namespace
	// failed; nil while a thread serves calls.
	noThread error
	// clock, when set, makes the deadline of each call (tests).
	clock func(time.Duration) (<-chan time.Time, func())
}

// runner is one locked thread in the namespace.
type runner struct {
	calls   chan call
	retired chan struct{}
	// tid is the thread's id, set before the runner serves a call: a
	// stuck call's thread state is read through it (StuckCalls).
	tid int
}

type call struct {
	fn     func() error
	live   *Live
	result chan error
}

// OpenMountNamespace starts a thread in the mount namespace at nsPath, such
// as /proc/1/ns/mnt for the host seen with hostPID. Calls have no deadline
// until SetTimeout.
func OpenMountNamespace(nsPath string) (*MountNamespace, error) {
	m := &MountNamespace{path: nsPath, done: make(chan struct{}), stuck: map[*runner]time.Time{}}
	r, err := m.start()
	if err != nil {
		return nil, err
	}
	m.cur = r
	return m, nil
}

// SetTimeout bounds every later call; 0 means no deadline.
func (m *MountNamespace) SetTimeout(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timeout = d
}

func (m *MountNamespace) start() (*runner, error) {
	r := &runner{calls: make(chan call), retired: make(chan struct{})}
	started := make(chan error, 1)
	go m.serve(r, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return r, nil
}

func (m *MountNamespace) serve(r *runner, started chan<- error) {
	// The thread is never unlocked: once it has left the process's
	// namespace it must die with this goroutine, not serve other code.
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread must not leave the namespace: /proc/self names
		// it, and Go cannot retire it when the goroutine ends. Hand over to
		// a fresh thread; holding this one locked until the new goroutine
		// has locked its own keeps it off the main thread.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			m.serve(r, started)
		}()
		<-locked
		runtime.UnlockOSThread()
		return
	}
	if err := join(m.path); err != nil {
		started <- err
		return
	}
	r.tid = unix.Gettid()
	started <- nil
	m.loop(r)
}

// loop runs calls until the runner is retired or the namespace closed.
func (m *MountNamespace) loop(r *runner) {
	for {
		// Retired before closed: a written-off runner whose call came
		// back after its namespace was closed must still leave the stuck
		// calls (Held), which a select of both would miss half the time.
		select {
		case <-r.retired:
			m.finished(r)
			return
		default:
		}
		select {
		case <-m.done:
			return
		default:
		}
		select {
		case c := <-r.calls:
			c.result <- m.run(c)
		case <-r.retired:
			m.finished(r)
			return
		case <-m.done:
			return
		}
	}
}

// run runs c unless its caller gave up between handing it over and now.
func (m *MountNamespace) run(c call) error {
	if err := c.live.Check(); err != nil {
		return err
	}
	return c.fn()
}

// finished forgets a written-off runner whose stuck call came back.
func (m *MountNamespace) finished(r *runner) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.stuck, r)
}

func join(nsPath string) error {
	// setns(CLONE_NEWNS) refuses a thread that shares its fs_struct (root,
	// cwd) with the rest of the process.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs attributes: %w", err)
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open mount namespace %q: %w", nsPath, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("join mount namespace %q: %w", nsPath, err)
	}
	return nil
}
