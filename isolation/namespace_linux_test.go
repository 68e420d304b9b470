// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestMountNamespaceDo(t *testing.T) {
	testutil.RequiresRoot(t)
	// A process with a private namespace of its own stands in for the host.
	other := testutil.StartLauncher(t)
	dir := t.TempDir()
	ns, err := OpenMountNamespace("/proc/" + strconv.Itoa(other.Pid) + "/ns/mnt")
	must(t, err)
	defer ns.Close()
	target := filepath.Join(dir, "m")
	must(t, os.Mkdir(target, 0o755))
	must(t, ns.Do(func() error { return unix.Mount("hpmount-ns-test", target, "tmpfs", 0, "") }))
	if !strings.Contains(other.MountInfo(t), target) {
		t.Fatalf("mount on %q not in the other namespace", target)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.ReadFile("/proc/thread-self/mountinfo")
	must(t, err)
	if strings.Contains(string(self), target) {
		t.Fatalf("mount on %q leaked into the caller's namespace:\n%s\nother:\n%s", target, self, other.MountInfo(t))
	}
	// Processes started from inside Do see the joined namespace.
	var seen string
	must(t, ns.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/mountinfo")
		seen = string(b)
		return err
	}))
	if !strings.Contains(seen, target) {
		t.Fatalf("Do ran outside the namespace")
	}
	ns.Close()
	if err := ns.Do(func() error { return nil }); err != ErrClosed {
		t.Fatalf("Do after Close: %v", err)
	}
}

func TestOpenMountNamespaceMissing(t *testing.T) {
	testutil.RequiresRoot(t)
	if _, err := OpenMountNamespace(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("joined a namespace that does not exist")
	}
}

// TestMountNamespaceAbandonsAStuckCall: a call past its deadline is
// abandoned and a new thread, in the same namespace, serves the next
// calls; the stuck one is reported until it returns. A call queued behind
// the stuck one whose own deadline passes first fails with ErrStuck and
// never runs, not even on the successor. The test decides when each
// deadline passes, so each call has exactly one outcome.
func TestMountNamespaceAbandonsAStuckCall(t *testing.T) {
	testutil.RequiresRoot(t)
	other := testutil.StartLauncher(t)
	ns, err := OpenMountNamespace("/proc/" + strconv.Itoa(other.Pid) + "/ns/mnt")
	must(t, err)
	defer ns.Close()
	ns.SetTimeout(100 * time.Millisecond)
	d := fakeDeadlines(ns)

	release, started := make(chan struct{}), make(chan struct{})
	stuck := make(chan error, 1)
	go func() { stuck <- ns.Do(func() error { close(started); <-release; return nil }) }()
	stuckDeadline := d.next(t)
	<-started

	var ran atomic.Bool
	queued := make(chan error, 1)
	go func() { queued <- ns.Do(func() error { ran.Store(true); return nil }) }()
	// The runner is inside the stuck call, so the queued one cannot start
	// before its deadline.
	d.next(t) <- time.Now()
	if err := <-queued; !errors.Is(err, ErrStuck) || !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("queued call returned %v, want ErrStuck: did not start", err)
	}

	stuckDeadline <- time.Now()
	if err := <-stuck; !errors.Is(err, ErrStuck) || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("stuck call returned %v, want ErrStuck: abandoned", err)
	}
	// The successor runs in the namespace.
	want, err := os.Readlink("/proc/" + strconv.Itoa(other.Pid) + "/ns/mnt")
	must(t, err)
	var got string
	must(t, ns.Do(func() (err error) {
		got, err = os.Readlink("/proc/thread-self/ns/mnt")
		return err
	}))
	if got != want {
		t.Fatalf("successor thread is in %s, want %s", got, want)
	}
	if n, stuckFor := ns.Health(time.Now().Add(time.Hour)); n != 1 || stuckFor < time.Hour {
		t.Fatalf("health = %d abandoned, stuck for %s; want 1 and at least an hour an hour later", n, stuckFor)
	}
	close(release)
	waitFor(t, "the stuck call that returned to be no longer reported", func() bool {
		_, stuckFor := ns.Health(time.Now())
		return stuckFor == 0
	})
	// Both threads served everything they were handed: the queued call
	// would have run by now.
	must(t, ns.Do(func() error { return nil }))
	if ran.Load() {
		t.Fatal("a call that failed with ErrStuck before it started ran later")
	}
}

// waitFor polls cond until it holds; a deadline of 10 s only detects a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCallAbandonedWritesNothing: a value comes back from a finished call;
// an abandoned one returns the zero value with ErrStuck, and its late
// result is dropped (go test -race shows no write to the caller's memory).
func TestCallAbandonedWritesNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	ns, err := OpenMountNamespace("/proc/self/ns/mnt")
	must(t, err)
	defer ns.Close()
	ns.SetTimeout(50 * time.Millisecond)
	if v, err := Call(ns, func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("Call = %d, %v; want 7", v, err)
	}
	release, finished := make(chan struct{}), make(chan struct{})
	v, err := Call(ns, func() (int, error) {
		defer close(finished)
		<-release
		return 9, nil
	})
	if v != 0 || !errors.Is(err, ErrStuck) {
		t.Fatalf("abandoned Call = %d, %v; want 0 and ErrStuck", v, err)
	}
	close(release)
	<-finished
}

// deadlines hands a test the deadline of each call in the order the calls
// are made: the test decides when each passes, instead of a timer.
type deadlines chan chan time.Time

func fakeDeadlines(ns *MountNamespace) deadlines {
	d := make(deadlines, 8)
	ns.clock = func(time.Duration) (<-chan time.Time, func()) {
		c := make(chan time.Time, 1)
		d <- c
		return c, func() {}
	}
	return d
}

// next is the deadline of the next call made.
func (d deadlines) next(t *testing.T) chan<- time.Time {
	t.Helper()
	select {
	case c := <-d:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no call was made")
		return nil
	}
}

// TestLiveAbandonedCall: a running call's Live passes while its caller
// waits, and fails with ErrAbandoned as soon as DoLive has returned
// ErrStuck, so the call's next change is never made; CallLive returns the
// zero value even when the abandoned call finishes afterwards.
func TestLiveAbandonedCall(t *testing.T) {
	testutil.RequiresRoot(t)
	ns, err := OpenMountNamespace("/proc/self/ns/mnt")
	must(t, err)
	defer ns.Close()
	d := fakeDeadlines(ns)

	type running struct {
		live    *Live
		release chan struct{}
	}
	in := make(chan running)
	afterRelease := make(chan error, 1)
	changed := false // written only by the call, read after it returned
	done := make(chan error, 1)
	go func() {
		done <- ns.DoLive(func(l *Live) error {
			r := running{l, make(chan struct{})}
			in <- r
			<-r.release
			if err := l.Check(); err != nil {
				afterRelease <- err
				return err
			}
			changed = true
			afterRelease <- nil
			return nil
		})
	}()
	deadline := d.next(t)
	r := <-in
	if err := r.live.Check(); err != nil {
		t.Fatalf("Check while the caller waits: %v", err)
	}
	deadline <- time.Now()
	if err := <-done; !errors.Is(err, ErrStuck) {
		t.Fatalf("DoLive past its deadline = %v, want ErrStuck", err)
	}
	if err := r.live.Check(); !errors.Is(err, ErrAbandoned) {
		t.Fatalf("Check right after DoLive returned = %v, want ErrAbandoned", err)
	}
	close(r.release)
	if err := <-afterRelease; !errors.Is(err, ErrAbandoned) || changed {
		t.Fatalf("the released call saw %v and changed=%v; want ErrAbandoned and no change", err, changed)
	}

	// CallLive: the value of a call that finishes after it was given up
	// does not come back.
	vals := make(chan int, 1)
	go func() {
		v, err := CallLive(ns, func(l *Live) (int, error) {
			r := running{l, make(chan struct{})}
			in <- r
			<-r.release
			return 9, nil
		})
		if !errors.Is(err, ErrStuck) {
			t.Errorf("abandoned CallLive: %v, want ErrStuck", err)
		}
		vals <- v
	}()
	deadline = d.next(t)
	r = <-in
	deadline <- time.Now()
	if v := <-vals; v != 0 {
		t.Fatalf("abandoned CallLive = %d, want 0", v)
	}
	close(r.release)
	// The successor serves calls, with a Live that passes.
	got := make(chan error, 1)
	go func() { got <- ns.DoLive(func(l *Live) error { return l.Check() }) }()
	d.next(t)
	if err := <-got; err != nil {
		t.Fatalf("a call on the successor: %v", err)
	}
}

// TestLiveNil: a call run outside a namespace has no caller to give up.
func TestLiveNil(t *testing.T) {
	var l *Live
	if err := l.Check(); err != nil {
		t.Fatalf("nil Live: %v", err)
	}
}

// TestStuckCalls: an abandoned call is listed with its thread's state
// until it returns (a read of an empty pipe sleeps interruptibly, 'S').
// When no thread can be started to replace a written-off one (here the
// namespace file is gone), StuckCalls says why, calls fail at once instead
// of waiting for a runner that never takes them, and the next call once
// the namespace is back starts a thread again.
func TestStuckCalls(t *testing.T) {
	testutil.RequiresRoot(t)
	nsFile := filepath.Join(t.TempDir(), "mnt")
	linkNS := func() { must(t, os.Symlink("/proc/"+strconv.Itoa(os.Getpid())+"/ns/mnt", nsFile)) }
	linkNS()
	ns, err := OpenMountNamespace(nsFile)
	must(t, err)
	defer ns.Close()
	d := fakeDeadlines(ns)

	var pipe [2]int
	must(t, unix.Pipe2(pipe[:], unix.O_CLOEXEC))
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	read, reading := make(chan error, 1), make(chan struct{})
	go func() {
		read <- ns.Do(func() error {
			close(reading)
			for {
				// A signal to the thread (Go preempts with SIGURG) may end
				// the read early; the call stays stuck until the write.
				if _, err := unix.Read(pipe[0], make([]byte, 1)); err != unix.EINTR {
					return err
				}
			}
		})
	}()
	// The deadline passes once the call runs: before, it would never start.
	first := d.next(t)
	<-reading
	first <- time.Now()
	if err := <-read; !errors.Is(err, ErrStuck) {
		t.Fatalf("the read = %v, want ErrStuck", err)
	}
	var calls []StuckCall
	waitFor(t, "the stuck read's thread to sleep", func() bool {
		calls, err = ns.StuckCalls()
		return err == nil && len(calls) == 1 && calls[0].State == 'S'
	})
	if calls[0].TID == unix.Gettid() || calls[0].TID <= 0 || calls[0].Uninterruptible() {
		t.Fatalf("stuck call %+v, want another thread in an interruptible sleep", calls[0])
	}

	// The namespace file goes: no thread can join it any more.
	must(t, os.Remove(nsFile))
	release, started := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() { blocked <- ns.Do(func() error { close(started); <-release; return nil }) }()
	deadline := d.next(t)
	<-started
	deadline <- time.Now()
	if err := <-blocked; !errors.Is(err, ErrStuck) || !strings.Contains(err.Error(), "no new thread") {
		t.Fatalf("the second stuck call = %v, want ErrStuck and no new thread", err)
	}
	if calls, err := ns.StuckCalls(); err == nil || len(calls) != 2 {
		t.Fatalf("StuckCalls = %+v, %v; want both calls and why no thread runs", calls, err)
	}
	if err := ns.Do(func() error { return nil }); err == nil || !strings.Contains(err.Error(), "no thread to run the call") {
		t.Fatalf("a call while no thread can start = %v", err)
	}
	linkNS()
	if err := ns.Do(func() error { return nil }); err != nil {
		t.Fatalf("a call once the namespace is back = %v", err)
	}
	if _, err := ns.StuckCalls(); err != nil {
		t.Fatalf("StuckCalls once a thread runs again: %v", err)
	}
	close(release)
	_, _ = unix.Write(pipe[1], []byte{1})
	waitFor(t, "the stuck calls to return", func() bool {
		calls, _ := ns.StuckCalls()
		return len(calls) == 0
	})
}

// TestHeldAfterClose: a call given up on still holds its thread after its
// namespace is closed, and leaves Held once it returns: the node engine
// closes a runner whose call hung and waits on Held to ask the volume's
// storage again. A loop that chose at random between "closed" and
// "retired" forgot the call in half the runs, and the volume was never
// asked again.
func TestHeldAfterClose(t *testing.T) {
	testutil.RequiresRoot(t)
	for range 20 {
		ns, err := OpenMountNamespace("/proc/self/ns/mnt")
		must(t, err)
		ns.SetTimeout(100 * time.Millisecond)
		d := fakeDeadlines(ns)
		release, started := make(chan struct{}), make(chan struct{})
		stuck := make(chan error, 1)
		go func() { stuck <- ns.Do(func() error { close(started); <-release; return nil }) }()
		deadline := d.next(t)
		<-started
		deadline <- time.Now()
		if err := <-stuck; !errors.Is(err, ErrStuck) {
			t.Fatalf("the call returned %v, want ErrStuck", err)
		}
		ns.Close()
		if n := ns.Held(); n != 1 {
			t.Fatalf("Held after Close = %d, want 1", n)
		}
		close(release)
		hang := time.Now().Add(10 * time.Second) // detects a hang only
		for ns.Held() != 0 {
			if time.Now().After(hang) {
				t.Fatal("the returned call is still held 10 s later")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestCallOwnedReleasesWhatNobodyTakes: a value made after its caller gave
// up is released once, by the call's side; one the caller takes is never
// released.
func TestCallOwnedReleasesWhatNobodyTakes(t *testing.T) {
	testutil.RequiresRoot(t)
	ns, err := OpenMountNamespace("/proc/self/ns/mnt")
	must(t, err)
	defer ns.Close()
	ns.SetTimeout(time.Hour)
	var released atomic.Int32
	release := func(v int) { released.Add(int32(v)) }
	if v, err := CallOwned(ns, func(*Live) (int, error) { return 1, nil }, release); v != 1 || err != nil || released.Load() != 0 {
		t.Fatalf("a taken value: %d, %v, released %d", v, err, released.Load())
	}
	d := fakeDeadlines(ns)
	hold, started, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(returned)
		v, err := CallOwned(ns, func(*Live) (int, error) { close(started); <-hold; return 10, nil }, release)
		if v != 0 || !errors.Is(err, ErrStuck) {
			t.Errorf("a value given up on: %d, %v; want 0 and ErrStuck", v, err)
		}
	}()
	deadline := d.next(t)
	<-started
	deadline <- time.Now()
	<-returned
	close(hold)
	hang := time.Now().Add(10 * time.Second) // detects a hang only
	for released.Load() != 10 {
		if time.Now().After(hang) {
			t.Fatalf("released %d after 10 s, want 10 (once)", released.Load())
		}
		time.Sleep(time.Millisecond)
	}
}
