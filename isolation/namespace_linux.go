package isolation

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// MountNamespace runs functions inside one mount namespace, on a dedicated
// OS thread that joined it once. Running on one thread makes the calls of a
// batch serial, which also keeps two reconciles from racing on one target.
type MountNamespace struct {
	path  string
	calls chan call
	done  chan struct{}
}

type call struct {
	fn     func() error
	result chan error
}

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("mount namespace runner is closed")

// OpenMountNamespace starts a thread in the mount namespace at nsPath, such
// as /proc/1/ns/mnt for the host seen with hostPID.
func OpenMountNamespace(nsPath string) (*MountNamespace, error) {
	m := &MountNamespace{path: nsPath, calls: make(chan call), done: make(chan struct{})}
	started := make(chan error, 1)
	go m.serve(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return m, nil
}

func (m *MountNamespace) serve(started chan<- error) {
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
			m.serve(started)
		}()
		<-locked
		runtime.UnlockOSThread()
		return
	}
	if err := join(m.path); err != nil {
		started <- err
		return
	}
	started <- nil
	for {
		select {
		case c := <-m.calls:
			c.result <- c.fn()
		case <-m.done:
			return
		}
	}
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

// Do runs fn in the namespace and returns its error. Processes that fn
// starts inherit the namespace, since they fork from the joined thread.
func (m *MountNamespace) Do(fn func() error) error {
	c := call{fn: fn, result: make(chan error, 1)}
	select {
	case m.calls <- c:
	case <-m.done:
		return ErrClosed
	}
	return <-c.result
}

// Path is the namespace file this runner joined.
func (m *MountNamespace) Path() string { return m.path }

// Close ends the thread. Calls already running finish first.
func (m *MountNamespace) Close() {
	select {
	case <-m.done:
	default:
		close(m.done)
	}
}
