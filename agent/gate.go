// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Why informers wait for the API server through a gate (issue #10).
//
// client-go's reflector sleeps between failed lists and watches on a
// backoff of its own: 800 ms doubling per failure up to 30 s, each sleep
// jittered to up to twice that, reset only every 2 minutes, and not
// settable through an informer (kubernetes/kubernetes#136943). While the
// server is down every watch fails with connection refused, so within a
// minute each informer sleeps 30-60 s between attempts, and a server that
// comes back meanwhile is noticed only when the sleep ends. That first
// watch then finds its resource version compacted away (410: etcd moved
// on while the server was down), which ends ListAndWatch and costs one
// more sleep of the same length before the relist. Measured with
// client-go's own log on a 60 s outage (TestAPIOutage): the VMI watch
// retried 4, 8, 21 and 46 s into the outage, next 26 s after the server
// was back, got the 410, and had not relisted 60 s after the server was
// back; the pods informer relisted after 55 s.
//
// patientLW keeps connection failures from the reflector: the failed call
// waits on apiGate, which probes /readyz about once a second for every
// informer together, and is retried once the server answers. The
// reflector's backoff stays at its first steps, so the 410 costs 0.8-1.6
// s: before releases were spread (below), the same test relisted VMIs 1 s
// after the server was ready, and mounted a hotplug written then 1.1 s
// after it was written.
//
// Why the gate releases its waiters over a spread (issue #19).
//
// Every agent of the cluster probes about once a second, so all of them
// see a server that comes back within a second or two of each other.
// Releasing every waiter at once sent every informer of every node, the
// cluster-wide claim list among them, to a server that had just started
// with cold caches, in the same second: the herd the reflector's backoff
// had been spreading over 30-60 s by accident. So each waiter is released
// after its own delay, uniform in [0, spread) (about N/spread lists a
// second from N waiters), with spread a quarter of the time the server
// was away, at least releaseFloor and at most releaseCap (releaseSpread).
// It grows with the outage because a blip of a few seconds is mostly a
// dropped connection to a server that kept its caches, whose watches
// resume cheaply, while a long outage is mostly a restart, after which
// every client of the cluster lists again; and because a fraction of the
// outage keeps the added wait a fraction of what the node already lost
// (at most a quarter, an eighth on average). The floor lets the first
// informers of a blip resume within a second; the cap is the reflector's
// own backoff ceiling, whose sleeps after a long outage span 30-60 s.
// TestGateSpreadsReleases, 200 gated list-watches beside 200 on client-go's
// backoff, on a fake clock: after 60 s away the gated ones list from +1.3
// to +16.6 s (median 8.8 s), at most 19 in one second, client-go's until
// +50-58 s (median 16-18 s), at most 11-16 (six runs); after 10 minutes,
// +0.8 to +30 s (median 13.9 s), at most 12, against client-go's 11-15
// (median 13-16 s, until +50-57 s).
//
// Only a failure to reach the server goes to the gate. An answer, a 503
// included, goes to the reflector: one resource answering 503 while
// /readyz is ok (an aggregated API whose backend is down) would otherwise
// pass the gate's probe at once and be asked again every second for as
// long as it fails, with no backoff at all. The reflector's backoff is at
// its first steps after an outage, so a server that answers 503 for a
// moment while starting costs 0.8-1.6 s.

const (
	// apiProbeInterval is the pause between probes of an unreachable
	// server: short enough that a hotplug after a blip waits at most a few
	// seconds, one cheap request per second per node while it is down.
	apiProbeInterval = time.Second
	// releaseShare, releaseFloor and releaseCap make the spread over which
	// waiters are released: outage/releaseShare within [floor, cap].
	releaseShare = 4
	releaseFloor = time.Second
	releaseCap   = 30 * time.Second
)

// releaseSpread is the time over which the waiters of a round are
// released after the server was away for outage.
func releaseSpread(outage time.Duration) time.Duration {
	return min(max(outage/releaseShare, releaseFloor), releaseCap)
}

// patientLW is a ListerWatcher whose list and watch calls, when the API
// server cannot be reached, wait for the gate and try again, instead of
// returning an error the reflector would back off on. Any other error,
// the server's answers included, and the end of ctx, go to the reflector
// as they are.
type patientLW struct {
	cache.ListerWatcher
	gate *apiGate
}

func (l *patientLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	for {
		obj, err := cache.ToListerWatcherWithContext(l.ListerWatcher).ListWithContext(ctx, o)
		if !l.retry(ctx, err) {
			return obj, err
		}
	}
}

func (l *patientLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	for {
		w, err := cache.ToListerWatcherWithContext(l.ListerWatcher).WatchWithContext(ctx, o)
		if !l.retry(ctx, err) {
			return w, err
		}
	}
}

// IsWatchListSemanticsUnSupported passes on what the wrapped client says,
// so the reflector streams its lists exactly when client-go's own
// informers would.
func (l *patientLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(l.ListerWatcher)
}

// retry reports whether err means the server could not be reached and,
// if so, waits until it is ready again and the caller's turn has come.
func (l *patientLW) retry(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || !unreachable(err) {
		return false
	}
	return l.gate.wait(ctx, err) == nil
}

// unreachable reports whether err says the API server could not be
// reached, rather than answering this request: a 503 is an answer.
func unreachable(err error) bool {
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) ||
		utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) || utilnet.IsHTTP2ConnectionLost(err)
}

// gateClock is the time the gate measures and waits on.
type gateClock interface {
	Now() time.Time
	After(time.Duration) <-chan time.Time
}

// apiGate tells callers when an unreachable API server is ready again.
// One round of probes runs at a time, whoever waits on it.
type apiGate struct {
	// probe is nil once the server answers /readyz with ok.
	probe func(context.Context) error
	log   *slog.Logger
	// clock and random (a number in [0, 1), safe for concurrent use) are
	// nil in the agent, which uses the real ones; tests set their own.
	clock  gateClock
	random func() float64

	mu    sync.Mutex
	round *gateRound // the probing under way; nil when none is
	// warned is when the last round was logged: an outage is logged once
	// and a server that refuses every few seconds once a minute.
	warned time.Time
}

// gateRound is one probing of the server until it is ready.
type gateRound struct {
	done    chan struct{}
	waiters int           // callers that waited on the round
	ready   bool          // valid once done is closed
	spread  time.Duration // valid once done is closed and ready
	logged  bool
}

func (g *apiGate) now() time.Time {
	if g.clock == nil {
		return time.Now()
	}
	return g.clock.Now()
}

func (g *apiGate) after(d time.Duration) <-chan time.Time {
	if g.clock == nil {
		return time.After(d)
	}
	return g.clock.After(d)
}

func (g *apiGate) rand() float64 {
	if g.random == nil {
		return rand.Float64()
	}
	return g.random()
}

// wait returns nil once the server answered a probe made at least one
// probe interval after the first waiter of this round failed, and this
// caller's release delay has passed, or ctx's error. cause is the failure
// that made the caller wait.
func (g *apiGate) wait(ctx context.Context, cause error) error {
	g.mu.Lock()
	r := g.round
	if r == nil {
		r = &gateRound{done: make(chan struct{})}
		if g.now().Sub(g.warned) > time.Minute {
			g.warned, r.logged = g.now(), true
			g.log.Warn("API server unreachable; informers wait until it is ready, mounts stay as they are",
				"error", cause.Error())
		}
		g.round = r
		go g.probeUntilReady(ctx, r)
	}
	r.waiters++
	g.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
	}
	if !r.ready {
		return errors.New("stopped waiting for the API server")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-g.after(time.Duration(g.rand() * float64(r.spread))):
		return nil
	}
}

// probeUntilReady probes the server about once a second until it is ready
// or ctx ends, then releases the round's waiters.
func (g *apiGate) probeUntilReady(ctx context.Context, r *gateRound) {
	began := g.now()
	defer func() {
		g.mu.Lock()
		g.round = nil
		g.mu.Unlock()
		close(r.done)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.after(apiProbeInterval + time.Duration(g.rand()*float64(apiProbeInterval/2))):
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := g.probe(pctx)
		cancel()
		if err == nil {
			away := g.now().Sub(began)
			r.ready, r.spread = true, releaseSpread(away)
			if r.logged {
				g.mu.Lock()
				n := r.waiters
				g.mu.Unlock()
				g.log.Info("API server ready again; informers resume", "waited", away.Round(time.Millisecond).String(),
					"informers", n, "over", r.spread.String())
			}
			return
		}
	}
}

// probeAPI is nil when the API server's /readyz answers ok, or when the
// server answers but will not tell this agent (401, 403): it is up, and
// waiting for a probe it cannot use would stop the informers for good.
// A starting server may answer so for a second before its authorizer has
// synced, opening the gate early; what fails then goes to the reflector
// while its backoff is still short.
func (a *Agent) probeAPI(ctx context.Context) error {
	rc := a.kube.Discovery().RESTClient()
	if rc == nil { // fake clients in unit tests have none
		return nil
	}
	err := rc.Get().AbsPath("/readyz").Do(ctx).Error()
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return nil
	}
	return err
}
