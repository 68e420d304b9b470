// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// ToolsDirEnv names the directory holding the etcd and kube-apiserver binaries.
const ToolsDirEnv = "HPMOUNT_TOOLS_DIR"

// RequireEnv, when set (as `make test` does), turns a missing-binaries skip
// into a failure. Same name as testutil.RequireRootEnv, which only exists on
// Linux builds.
const RequireEnv = "HPMOUNT_REQUIRE_ROOT"

// ErrToolsMissing is wrapped by StartProcess when a binary is not installed.
var ErrToolsMissing = errors.New("control-plane binaries missing: run test/tools/build.sh (or `make tools`)")

// Options configures StartProcess. The zero value is usable.
type Options struct {
	// ToolsDir holds the etcd and kube-apiserver binaries; default DefaultToolsDir().
	ToolsDir string
	// WorkDir receives certificates, etcd data and logs. Default: a new
	// temporary directory, removed by Stop.
	WorkDir string
	// ReadyTimeout bounds the wait for etcd health and apiserver /readyz.
	// Default 90s.
	ReadyTimeout time.Duration
	// ExtraAPIServerArgs are appended to the kube-apiserver command line.
	ExtraAPIServerArgs []string
	// Nodes are names of kubelets to trust: each gets a static token of
	// user system:node:<name> in group system:nodes (NodeConfig).
	Nodes []string
	// ServiceAccountAdmission keeps the ServiceAccount admission plugin,
	// which projects each pod's token as a real cluster does; the caller
	// must then publish what kube-controller-manager would (each
	// namespace's "default" ServiceAccount and kube-root-ca.crt ConfigMap),
	// or pods are refused or never start.
	ServiceAccountAdmission bool
}

// Cluster is a running etcd + kube-apiserver pair.
type Cluster struct {
	workDir    string
	removeDir  bool
	host       string // https://127.0.0.1:port
	caPEM      []byte
	adminToken string
	caFile     string
	nodeTokens map[string]string
	readyAfter time.Duration

	etcd *process
	// mu guards apiserver, which StopAPIServer and StartAPIServer replace.
	mu            sync.Mutex
	apiserver     *process
	apiserverBin  string
	apiserverArgs []string
	readyTimeout  time.Duration

	stopOnce sync.Once
	stopErr  error
}

// DefaultToolsDir is $HPMOUNT_TOOLS_DIR if set, else $HOME/.cache/hpmount/bin.
func DefaultToolsDir() string {
	if d := os.Getenv(ToolsDirEnv); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "hpmount", "bin")
}

// Start starts a control plane for t and stops it in t.Cleanup. When the
// binaries are missing it fails t with the build hint, or skips t if
// HPMOUNT_REQUIRE_ROOT is unset (developer machines without the tools).
func Start(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := StartProcess(ctx, Options{WorkDir: t.TempDir()})
	if errors.Is(err, ErrToolsMissing) && os.Getenv(RequireEnv) == "" {
		t.Skipf("%v (skipping because %s is unset)", err, RequireEnv)
	}
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		began := time.Now()
		if err := c.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
		t.Logf("control plane stopped in %v", time.Since(began).Round(time.Millisecond))
	})
	t.Logf("control plane ready in %v at %s (logs in %s)", c.ReadyAfter().Round(time.Millisecond), c.Host(), c.Dir())
	return c
}

// Host is the apiserver URL, https://127.0.0.1:<port>.
func (c *Cluster) Host() string { return c.host }

// Dir is the working directory holding certificates, etcd data and the logs
// etcd.log and kube-apiserver.log.
func (c *Cluster) Dir() string { return c.workDir }

// CAData is the PEM CA bundle that verifies the apiserver's serving certificate.
func (c *Cluster) CAData() []byte { return append([]byte(nil), c.caPEM...) }

// CAFile is the path of the CA certificate, which also verifies the
// apiserver's client certificate towards kubelets.
func (c *Cluster) CAFile() string { return c.caFile }

// NodeConfig returns a client config for user system:node:<name>, or nil
// if Options.Nodes did not name it.
func (c *Cluster) NodeConfig(name string) *rest.Config {
	token, ok := c.nodeTokens[name]
	if !ok {
		return nil
	}
	return c.tokenConfig(token)
}

// ReadyAfter is the time from the start of StartProcess until /readyz answered ok.
func (c *Cluster) ReadyAfter() time.Duration { return c.readyAfter }

// AdminConfig returns a new client config for user "admin" in group
// system:masters (a static token).
func (c *Cluster) AdminConfig() *rest.Config {
	return c.tokenConfig(c.adminToken)
}

func (c *Cluster) tokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            c.host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData()},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}
}

// Logs returns the last n lines of the etcd and kube-apiserver logs.
func (c *Cluster) Logs(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcd.tail(n) + c.apiserver.tail(n)
}

// Stop kills the apiserver, then etcd, and removes the working directory if
// StartProcess created it. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		c.mu.Lock()
		if c.apiserver != nil {
			errs = append(errs, c.apiserver.stop())
		}
		c.mu.Unlock()
		if c.etcd != nil {
			errs = append(errs, c.etcd.stop())
		}
		if c.removeDir {
			if err := os.RemoveAll(c.workDir); err != nil {
				errs = append(errs, fmt.Errorf("remove work dir %q: %w", c.workDir, err))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}
