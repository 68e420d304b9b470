// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// HealthHandler serves /healthz (the process is alive and the liveness
// check passes) and /readyz (the informer caches synced once and the
// readiness gate passes).
//
// Neither asks the API server. While it is down the agent keeps serving
// its node from the synced caches (resyncs, block node checks, growth),
// and it takes no traffic a NotReady could shed: failing liveness would
// have the kubelet restart every agent of the cluster at once into a
// start that cannot sync, and failing readiness would only page for
// every node at the same time about a problem the control plane's own
// alerts name, while stalling a DaemonSet rollout that cannot proceed
// anyway. The agent logs the outage and its end (gate.go).
func (a *Agent) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if check := a.cfg.LivenessCheck; check != nil {
			if err := check(); err != nil {
				http.Error(w, "not alive: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !a.synced.Load() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		if gate := a.cfg.ReadinessGate; gate != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			if err := gate(ctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// startServers listens on the health and metrics addresses; serving errors
// go to errc. The returned function shuts both down.
func (a *Agent) startServers(ctx context.Context, errc chan<- error) (func(), error) {
	var servers []*http.Server
	stop := func() {
		for _, s := range servers {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.Shutdown(ctx)
			cancel()
		}
	}
	serve := func(what, addr string, h http.Handler) error {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("listen for %s on %q: %w", what, addr, err)
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, s)
		a.log.Info("serving "+what, "address", ln.Addr().String())
		go func() {
			if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s on %q: %w", what, addr, err)
			}
		}()
		return nil
	}
	if a.cfg.HealthAddress != "" {
		if err := serve("health", a.cfg.HealthAddress, a.HealthHandler()); err != nil {
			stop()
			return nil, err
		}
	}
	if a.cfg.MetricsAddress != "" && a.cfg.MetricsHandler != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", a.cfg.MetricsHandler)
		if a.cfg.Profiling {
			// Go's profiler, for finding where a busy node's CPU goes;
			// off by default, as it exposes internals.
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		if err := serve("metrics", a.cfg.MetricsAddress, mux); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}
