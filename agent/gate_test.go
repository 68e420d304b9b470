// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestReleaseSpread(t *testing.T) {
	for _, tc := range []struct{ outage, want time.Duration }{
		{0, time.Second},
		{2 * time.Second, time.Second},
		{4 * time.Second, time.Second},
		{8 * time.Second, 2 * time.Second},
		{time.Minute, 15 * time.Second},
		{2 * time.Minute, 30 * time.Second},
		{time.Hour, 30 * time.Second},
	} {
		if got := releaseSpread(tc.outage); got != tc.want {
			t.Errorf("releaseSpread(%s) = %s, want %s", tc.outage, got, tc.want)
		}
	}
}

// TestUnreachable: failures to reach the server go to the gate; anything
// the server answered, a 503 included, goes to the reflector.
func TestUnreachable(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"eof", io.ErrUnexpectedEOF, true},
		{"503", apierrors.NewServiceUnavailable("the server is currently unable to handle the request"), false},
		{"429", apierrors.NewTooManyRequests("slow down", 1), false},
		{"500", apierrors.NewInternalError(errors.New("boom")), false},
		{"403", apierrors.NewForbidden(pods, "", errors.New("no")), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("%s: unreachable(%v) = %t, want %t", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestPatientLWLeaves503ToTheReflector: a list or watch the server answers
// with 503 while /readyz is ok is returned at once, so the reflector backs
// off on it, instead of passing the gate's probe and being made again
// every second for as long as the resource fails.
func TestPatientLWLeaves503ToTheReflector(t *testing.T) {
	for _, verb := range []string{"list", "watch"} {
		t.Run(verb, func(t *testing.T) {
			var requests, probes atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/readyz" {
					probes.Add(1)
					fmt.Fprint(w, "ok")
					return
				}
				if requests.Add(1) == 1 {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503,"message":"unavailable"}`)
					return
				}
				servePodList(w)
			}))
			t.Cleanup(srv.Close)
			kube := newTestClient(t, srv.URL)
			gate := &apiGate{probe: readyz(kube), log: slog.New(slog.DiscardHandler)}
			p := gatedLW(kube, "tenant", gate)

			var err error
			if verb == "list" {
				_, err = p.ListWithContext(t.Context(), metav1.ListOptions{})
			} else {
				var w watch.Interface
				if w, err = p.WatchWithContext(t.Context(), metav1.ListOptions{}); w != nil {
					w.Stop()
				}
			}
			if !apierrors.IsServiceUnavailable(err) || requests.Load() != 1 || probes.Load() != 0 {
				t.Fatalf("%s: %v after %d requests and %d probes; want the 503 returned to the reflector at once",
					verb, err, requests.Load(), probes.Load())
			}
		})
	}
}

// TestGateSpreadsReleases: N informers' list-watches, gated, and N more
// retrying on the reflector's own backoff, against one API server on
// loopback that refuses connections for an outage and comes back. Time is
// a fake clock stepped by the test and the gate's random source is seeded,
// so the gated lists' times after the server is back are computed, not
// measured: short blips release everyone within the floor, long outages
// spread the lists so that no second holds more than a fraction of them.
// client-go's backoff, run on the same clock, is logged beside them.
func TestGateSpreadsReleases(t *testing.T) {
	const n = 200
	for _, tc := range []struct {
		name   string
		outage time.Duration
		// maxPeak bounds the gated lists made in any one second.
		maxPeak int
	}{
		{"blip", 3 * time.Second, n},
		{"minute", time.Minute, n / 5},
		{"long", 10 * time.Minute, n / 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newStepClock()
			api := newFlakyAPI(t, clk.Now)
			kube := newTestClient(t, api.url())
			var mu sync.Mutex
			seeded := rand.New(rand.NewPCG(19, 5))
			gate := &apiGate{probe: readyz(kube), log: slog.New(slog.DiscardHandler), clock: clk,
				random: func() float64 { mu.Lock(); defer mu.Unlock(); return seeded.Float64() }}
			api.down()
			down := clk.Now()
			h := startHerd(t, n, kube, gate, clk)

			quiet := func() bool {
				gate.mu.Lock()
				defer gate.mu.Unlock()
				want := n - int(h.backedOffDone.Load())
				if r := gate.round; r != nil {
					return r.waiters == n && clk.Waiters() == want+1 // the probe's
				}
				return clk.Waiters() == want+n-int(h.gatedDone.Load())
			}
			waitJoined(t, gate, n)
			clk.settle(t, quiet)
			for h.gatedDone.Load()+h.backedOffDone.Load() < 2*n {
				if api.isDown() && !clk.Now().Before(down.Add(tc.outage)) {
					api.up(t)
				}
				clk.Step(50 * time.Millisecond)
				clk.settle(t, quiet)
			}
			h.check(t)

			back := down.Add(tc.outage)
			gated, backedOff := spreadOf(api.lists("gated"), back), spreadOf(api.lists("backoff"), back)
			t.Logf("outage %s, %d list-watches each: gated %s; client-go's backoff %s; peak ratio %.2f",
				tc.outage, n, gated, backedOff, float64(gated.peak)/float64(backedOff.peak))
			probeMax := apiProbeInterval * 3 / 2
			if latest := probeMax + releaseSpread(tc.outage+probeMax); gated.count != n || gated.last > latest {
				t.Errorf("%d gated lists, the last %s after the server was back; want %d by %s", gated.count, gated.last, n, latest)
			}
			if gated.first > probeMax+releaseFloor {
				t.Errorf("first gated list %s after the server was back, want within %s", gated.first, probeMax+releaseFloor)
			}
			if gated.peak > tc.maxPeak {
				t.Errorf("%d of %d gated lists in one second after the server was back, want at most %d", gated.peak, n, tc.maxPeak)
			}
		})
	}
}

// TestGateReleasesInRealTime runs the herd of TestGateSpreadsReleases on
// the real clock through a short outage and logs what it measured; a
// loaded machine shifts these times, so nothing here is asserted on them.
func TestGateReleasesInRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs through a real outage of 4 s")
	}
	const n, outage = 200, 4 * time.Second
	api := newFlakyAPI(t, time.Now)
	kube := newTestClient(t, api.url())
	gate := &apiGate{probe: readyz(kube), log: slog.New(slog.DiscardHandler)}
	api.down()
	h := startHerd(t, n, kube, gate, clock.RealClock{})
	<-time.After(outage)
	api.up(t)
	back := time.Now()
	select {
	case <-h.done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("after 5 minutes %d of %d gated and %d of %d backed-off list-watches have listed",
			h.gatedDone.Load(), n, h.backedOffDone.Load(), n)
	}
	h.check(t)
	for _, group := range []string{"gated", "backoff"} {
		times := api.lists(group)
		t.Logf("%s: %s; lists per 250 ms after the server was back: %v", group, spreadOf(times, back), histogram(times, back, 250*time.Millisecond))
	}
}

// herd is n gated list-watches and n on the reflector's backoff, each
// listing until it succeeds once.
type herd struct {
	gatedDone, backedOffDone atomic.Int32
	done                     chan struct{}
	mu                       sync.Mutex
	errs                     []error
}

// settler is told whenever a list-watch of the herd finishes.
type settler interface{ poke() }

func startHerd(t *testing.T, n int, kube kubernetes.Interface, gate *apiGate, clk clock.Clock) *herd {
	h := &herd{done: make(chan struct{})}
	var wg sync.WaitGroup
	finished := func(count *atomic.Int32, err error) {
		if err != nil {
			h.mu.Lock()
			h.errs = append(h.errs, err)
			h.mu.Unlock()
		}
		count.Add(1)
		if s, ok := clk.(settler); ok {
			s.poke()
		}
		wg.Done()
	}
	wg.Add(2 * n)
	for range n {
		go func() {
			_, err := gatedLW(kube, "gated", gate).ListWithContext(t.Context(), metav1.ListOptions{})
			finished(&h.gatedDone, err)
		}()
		go func() {
			finished(&h.backedOffDone, listOnReflectorBackoff(t.Context(), kube, clk))
		}()
	}
	go func() { wg.Wait(); close(h.done) }()
	return h
}

func (h *herd) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) > 0 {
		t.Fatalf("%d list-watches failed, first: %v", len(h.errs), h.errs[0])
	}
}

// listOnReflectorBackoff lists until the server answers, sleeping between
// failures as client-go's reflector does by default (its
// NewReflectorWithOptions without a Backoff).
func listOnReflectorBackoff(ctx context.Context, kube kubernetes.Interface, clk clock.Clock) error {
	backoff := wait.Backoff{Duration: 800 * time.Millisecond, Cap: 30 * time.Second, Steps: 38, Factor: 2, Jitter: 1}
	delay := backoff.DelayWithReset(clk, 2*time.Minute)
	for {
		_, err := kube.CoreV1().Pods("backoff").List(ctx, metav1.ListOptions{})
		if err == nil || !unreachable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(delay()):
		}
	}
}

// gatedLW is an informer's list-watch of the pods of namespace, made as
// newInformer makes it.
func gatedLW(kube kubernetes.Interface, namespace string, gate *apiGate) *patientLW {
	pods := kube.CoreV1().Pods(namespace)
	lw := listWatch(pods.List, pods.Watch, func(*metav1.ListOptions) {})
	return &patientLW{ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, kube), gate: gate}
}

// readyz probes the server as probeAPI does.
func readyz(kube kubernetes.Interface) func(context.Context) error {
	return func(ctx context.Context) error {
		return kube.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}
}

// newTestClient is a client of the server at url that stands for many
// nodes' agents: no client-side rate limit, and a connection of its own
// for every request, so that a server gone refuses each one.
func newTestClient(t *testing.T, url string) kubernetes.Interface {
	t.Helper()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: url, QPS: -1,
		Transport: &http.Transport{DisableKeepAlives: true}})
	if err != nil {
		t.Fatalf("client of %s: %v", url, err)
	}
	return kube
}

func servePodList(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
}

// flakyAPI is an API server on one loopback address that can go away
// (its listener closed, so connections are refused) and come back. It
// serves /readyz and empty pod lists, and notes when each namespace's
// pods were listed.
type flakyAPI struct {
	addr string
	now  func() time.Time

	mu    sync.Mutex
	srv   *httptest.Server // nil while down
	times map[string][]time.Time
}

func newFlakyAPI(t *testing.T, now func() time.Time) *flakyAPI {
	a := &flakyAPI{addr: "127.0.0.1:0", now: now, times: map[string][]time.Time{}}
	a.up(t)
	t.Cleanup(a.down)
	return a
}

func (a *flakyAPI) url() string { return "http://" + a.addr }

func (a *flakyAPI) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", a.addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	a.mu.Lock()
	a.addr, a.srv = ln.Addr().String(), srv
	a.mu.Unlock()
}

func (a *flakyAPI) down() {
	a.mu.Lock()
	srv := a.srv
	a.srv = nil
	a.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

func (a *flakyAPI) isDown() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.srv == nil
}

func (a *flakyAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" {
		fmt.Fprint(w, "ok")
		return
	}
	ns, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/")
	ns, ok2 := strings.CutSuffix(ns, "/pods")
	if !ok || !ok2 {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	a.times[ns] = append(a.times[ns], a.now())
	a.mu.Unlock()
	servePodList(w)
}

func (a *flakyAPI) lists(namespace string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.times[namespace])
}

// spread sums up when lists were made after the server was back.
type spread struct {
	count, peak         int // peak: the most lists in one second
	first, median, last time.Duration
}

func (s spread) String() string {
	return fmt.Sprintf("%d lists from +%s to +%s (median +%s), peak %d in a second",
		s.count, s.first, s.last, s.median, s.peak)
}

func spreadOf(times []time.Time, back time.Time) spread {
	if len(times) == 0 {
		return spread{}
	}
	after := make([]time.Duration, len(times))
	for i, at := range times {
		after[i] = at.Sub(back).Round(time.Millisecond)
	}
	slices.Sort(after)
	return spread{count: len(after), peak: slices.Max(histogram(times, back, time.Second)),
		first: after[0], median: after[len(after)/2], last: after[len(after)-1]}
}

// histogram counts lists per bucket of width after back.
func histogram(times []time.Time, back time.Time, width time.Duration) []int {
	var counts []int
	for _, at := range times {
		i := max(int(at.Sub(back)/width), 0)
		for len(counts) <= i {
			counts = append(counts, 0)
		}
		counts[i]++
	}
	return counts
}

// waitJoined returns once n callers wait on the gate's round. Joining
// is the one step of the herd that neither waits on the clock nor tells
// it, so this looks every millisecond; a minute fails the test as hung.
func waitJoined(t *testing.T, gate *apiGate, n int) {
	t.Helper()
	joined := func() int {
		gate.mu.Lock()
		defer gate.mu.Unlock()
		if gate.round == nil {
			return 0
		}
		return gate.round.waiters
	}
	for deadline := time.Now().Add(time.Minute); joined() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d list-watches wait on the gate after a minute", joined(), n)
		}
	}
}

// stepClock is a fake clock that the test moves, which can tell the test
// when the goroutines it woke are waiting on it again.
type stepClock struct {
	*clocktesting.FakeClock
	mu   sync.Mutex
	cond *sync.Cond
}

func newStepClock() *stepClock {
	c := &stepClock{FakeClock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.poke()
	return ch
}

func (c *stepClock) poke() {
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// settle returns once quiet holds, checked whenever a goroutine starts
// waiting on the clock or pokes it; a minute without that fails the test
// as hung.
func (c *stepClock) settle(t *testing.T, quiet func() bool) {
	t.Helper()
	var hung atomic.Bool
	watchdog := time.AfterFunc(time.Minute, func() { hung.Store(true); c.poke() })
	defer watchdog.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !quiet() {
		if hung.Load() {
			t.Fatalf("at %s the list-watches did not settle within a minute: %d waiting on the clock",
				c.Now().Format(time.TimeOnly), c.Waiters())
		}
		c.cond.Wait()
	}
}
