// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
)

// Config is what the agent is told through `hpmount agent`'s flags, plus the
// hooks the command wires in (logger, metrics observer, readiness gate).
// Where the node's pieces are (kubelet root, host procfs, cgroups) is the
// engine's configuration, not the agent's.
type Config struct {
	// NodeName is the node this agent serves.
	NodeName string
	// MetricsAddress is where MetricsHandler is served (at /metrics) when
	// MetricsHandler is set. Empty disables the metrics server.
	MetricsAddress string
	// Profiling serves Go's profiler at /debug/pprof/ on MetricsAddress.
	Profiling bool
	// HealthAddress serves /healthz and /readyz. Empty disables it.
	HealthAddress string
	// ReportVolumeStatus patches status.volumeStatus of the VMI
	// (MountedToPod / UnMountedFromPod).
	ReportVolumeStatus bool
	// GrowFilesystems plans growth checks of mounted filesystem-mode
	// volumes (the engine does the growing).
	GrowFilesystems bool
	// ResyncPeriod is how often every VMI is reconciled without an API
	// change; it catches devices that grew or mounts that went stale.
	ResyncPeriod time.Duration
	// Workers is the number of reconcile workers. A pass mostly waits: on
	// the engine's threads in the host namespace and on the API server,
	// so four keep a two-core node busier than two (a cold start of 250
	// VMIs verified in about 1.4 s instead of 1.7 s on the scale node).
	Workers int

	// Logger receives structured logs; nil means JSON to stderr.
	Logger *slog.Logger
	// Observer receives metrics hooks; nil means none.
	Observer Observer
	// QueueMetrics, when set, receives the work queues' metrics.
	QueueMetrics workqueue.MetricsProvider
	// ReadinessGate is checked by /readyz after the informers synced, e.g.
	// the propagation check. nil means always ready.
	ReadinessGate func(ctx context.Context) error
	// EventClient, when set, sends the agent's Events; give it a client of
	// its own so that a burst of Events never waits behind, or delays, the
	// agent's other API calls. nil sends them with the agent's client.
	EventClient kubernetes.Interface
	// LivenessCheck is checked by /healthz, e.g. the engine's stuck-call
	// limit; nil means alive while the process answers.
	LivenessCheck func() error
	// MetricsHandler, when set, is served at /metrics on MetricsAddress.
	MetricsHandler http.Handler
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	return Config{
		MetricsAddress:  ":9090",
		HealthAddress:   ":8081",
		GrowFilesystems: true,
		ResyncPeriod:    time.Minute,
		Workers:         4,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is empty (set --node-name or NODE_NAME)"))
	}
	if c.ResyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("resync period %s is not positive", c.ResyncPeriod))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers %d is below 1", c.Workers))
	}
	return errors.Join(errs...)
}
