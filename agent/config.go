package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

// CgroupMode selects the device-cgroup flavour the engine programs.
type CgroupMode string

const (
	CgroupAuto CgroupMode = "auto"
	CgroupV1   CgroupMode = "v1"
	CgroupV2   CgroupMode = "v2"
)

// Config is everything `hpmount agent` is told through its flags, plus the
// hooks the command wires in (logger, metrics observer, readiness gate).
type Config struct {
	// Kubeconfig is the kubeconfig path; empty means in-cluster. Only the
	// command reads it; the agent gets ready-made clients.
	Kubeconfig string
	// NodeName is the node this agent serves.
	NodeName string
	// KubeletRoot is the kubelet's root directory, e.g. /var/lib/kubelet.
	KubeletRoot string
	// HostProc and HostPID locate the host's mount namespace
	// (<HostProc>/<HostPID>/ns/mnt) and mount table
	// (<HostProc>/<HostPID>/mountinfo).
	HostProc string
	HostPID  int
	// CgroupRoot is where the cgroup hierarchies are mounted.
	CgroupRoot string
	CgroupMode CgroupMode
	// MetricsAddress is where MetricsHandler is served (at /metrics) when
	// MetricsHandler is set. Empty disables the metrics server.
	MetricsAddress string
	// HealthAddress serves /healthz and /readyz. Empty disables it.
	HealthAddress string
	// QEMUUID and QEMUGID own what is made in the launcher (default 107).
	QEMUUID, QEMUGID int
	// ReportVolumeStatus patches status.volumeStatus of the VMI
	// (MountedToPod / UnMountedFromPod).
	ReportVolumeStatus bool
	// GrowFilesystems grows mounted filesystem-mode volumes online.
	GrowFilesystems bool
	// ExpandDiskImages also grows disk.img when its filesystem grew.
	ExpandDiskImages bool
	// ResyncPeriod is how often every VMI is reconciled without an API
	// change; it catches devices that grew or mounts that went stale.
	ResyncPeriod time.Duration
	// Workers is the number of reconcile workers.
	Workers int

	// Logger receives structured logs; nil means JSON to stderr.
	Logger *slog.Logger
	// Observer receives metrics hooks; nil means none.
	Observer Observer
	// ReadinessGate is checked by /readyz after the informers synced, e.g.
	// the propagation check. nil means always ready.
	ReadinessGate func(ctx context.Context) error
	// MetricsHandler, when set, is served at /metrics on MetricsAddress.
	MetricsHandler http.Handler
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	return Config{
		KubeletRoot:     "/var/lib/kubelet",
		HostProc:        "/proc",
		HostPID:         1,
		CgroupRoot:      "/sys/fs/cgroup",
		CgroupMode:      CgroupAuto,
		MetricsAddress:  ":9090",
		HealthAddress:   ":8081",
		QEMUUID:         107,
		QEMUGID:         107,
		GrowFilesystems: true,
		ResyncPeriod:    time.Minute,
		Workers:         2,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is empty (set --node-name or NODE_NAME)"))
	}
	if c.KubeletRoot == "" || !filepath.IsAbs(c.KubeletRoot) {
		errs = append(errs, fmt.Errorf("kubelet root %q is not an absolute path", c.KubeletRoot))
	}
	if c.HostProc == "" || !filepath.IsAbs(c.HostProc) {
		errs = append(errs, fmt.Errorf("host proc %q is not an absolute path", c.HostProc))
	}
	if c.HostPID <= 0 {
		errs = append(errs, fmt.Errorf("host pid %d is not positive", c.HostPID))
	}
	if c.CgroupRoot == "" || !filepath.IsAbs(c.CgroupRoot) {
		errs = append(errs, fmt.Errorf("cgroup root %q is not an absolute path", c.CgroupRoot))
	}
	switch c.CgroupMode {
	case CgroupAuto, CgroupV1, CgroupV2:
	default:
		errs = append(errs, fmt.Errorf("cgroup mode %q is not one of auto, v1, v2", c.CgroupMode))
	}
	if c.QEMUUID < 0 || c.QEMUGID < 0 {
		errs = append(errs, fmt.Errorf("qemu uid/gid %d/%d must not be negative", c.QEMUUID, c.QEMUGID))
	}
	if c.ResyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("resync period %s is not positive", c.ResyncPeriod))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers %d is below 1", c.Workers))
	}
	return errors.Join(errs...)
}

// HostMountNamespace is the path of the host's mount namespace file.
func (c Config) HostMountNamespace() string {
	return filepath.Join(c.HostProc, strconv.Itoa(c.HostPID), "ns", "mnt")
}

// HostMountInfo is the path of the host's mount table.
func (c Config) HostMountInfo() string {
	return filepath.Join(c.HostProc, strconv.Itoa(c.HostPID), "mountinfo")
}
