// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// portAttempts bounds retries when a port picked as free was taken by
// someone else before the child bound it.
const portAttempts = 3

// StartProcess starts etcd and kube-apiserver and returns once /readyz
// answers ok. The caller must call Stop. On failure the children are stopped
// and the error carries the tail of their logs.
func StartProcess(ctx context.Context, opts Options) (*Cluster, error) {
	began := time.Now()
	if opts.ToolsDir == "" {
		opts.ToolsDir = DefaultToolsDir()
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 90 * time.Second
	}
	etcdBin, apiserverBin, err := findTools(opts.ToolsDir)
	if err != nil {
		return nil, err
	}

	c := &Cluster{workDir: opts.WorkDir, readyTimeout: opts.ReadyTimeout}
	if c.workDir == "" {
		if c.workDir, err = os.MkdirTemp("", "hpmount-cluster-"); err != nil {
			return nil, fmt.Errorf("create work dir: %w", err)
		}
		c.removeDir = true
	}
	creds, err := newCredentials(began)
	if err == nil {
		err = creds.addKubeletClient(began)
	}
	for _, node := range opts.Nodes {
		if err == nil {
			err = creds.addNode(node)
		}
	}
	if err != nil {
		c.Stop()
		return nil, err
	}
	files, err := creds.write(c.workDir)
	if err != nil {
		c.Stop()
		return nil, err
	}
	c.caPEM, c.adminToken, c.nodeTokens = creds.caPEM, creds.adminToken, creds.nodeTokens
	c.caFile = files.ca

	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err = c.startChildren(ctx, etcdBin, apiserverBin, files, opts)
		if err == nil {
			c.readyAfter = time.Since(began)
			return c, nil
		}
		portTaken := strings.Contains(err.Error(), "address already in use")
		c.stopChildren()
		if !portTaken || attempt == portAttempts {
			c.Stop()
			return nil, err
		}
	}
}

// findTools returns the paths of the etcd and kube-apiserver binaries.
func findTools(dir string) (etcd, apiserver string, err error) {
	paths := []string{filepath.Join(dir, "etcd"), filepath.Join(dir, "kube-apiserver")}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "", "", fmt.Errorf("%w: %v", ErrToolsMissing, err)
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return "", "", fmt.Errorf("%w: %q is not an executable file", ErrToolsMissing, p)
		}
	}
	return paths[0], paths[1], nil
}

func (c *Cluster) stopChildren() {
	if c.apiserver != nil {
		c.apiserver.stop()
		c.apiserver = nil
	}
	if c.etcd != nil {
		c.etcd.stop()
		c.etcd = nil
	}
}

func (c *Cluster) startChildren(ctx context.Context, etcdBin, apiserverBin string, f credentialFiles, opts Options) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	dataDir := filepath.Join(c.workDir, "etcd")
	// A retry after a port clash must not find a member of the old cluster.
	if err := os.RemoveAll(dataDir); err != nil {
		return fmt.Errorf("clear etcd data dir %q: %w", dataDir, err)
	}
	c.etcd, err = startProcess("etcd", etcdBin, []string{
		"--name=e2e",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL,
		"--initial-cluster-state=new",
		// The data is thrown away with the test: durability buys nothing.
		"--unsafe-no-fsync=true",
	}, filepath.Join(c.workDir, "etcd.log"))
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := waitReady(ctx, c.etcd, plain, etcdURL+"/health", "", `"health":"true"`); err != nil {
		return err
	}

	c.host = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	c.apiserverBin = apiserverBin
	c.apiserverArgs = append(apiserverArgs(etcdURL, ports[2], c.workDir, f, opts.ServiceAccountAdmission), opts.ExtraAPIServerArgs...)
	return c.startAPIServer(ctx)
}

// apiserverArgs is the kube-apiserver command line before the caller's
// extra arguments; a restart reuses it, so the port, certificates and etcd
// stay the same.
func apiserverArgs(etcdURL string, port int, workDir string, f credentialFiles, saAdmission bool) []string {
	const issuer = "https://kubernetes.default.svc.cluster.local"
	// No controller-manager creates default service accounts, so unless the
	// caller publishes them the admission plugin that requires them would
	// reject every pod.
	disabled := "--disable-admission-plugins=ServiceAccount"
	if saAdmission {
		disabled = "--disable-admission-plugins="
	}
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(workDir, "apiserver-certs"),
		"--tls-cert-file=" + f.servingCert,
		"--tls-private-key-file=" + f.servingKey,
		"--token-auth-file=" + f.tokens,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + issuer,
		"--api-audiences=" + issuer,
		"--service-account-key-file=" + f.saPub,
		"--service-account-signing-key-file=" + f.saKey,
		disabled,
		"--service-cluster-ip-range=10.96.0.0/16",
		// The agent's DaemonSet runs privileged containers.
		"--allow-privileged=true",
		"--profiling=false",
		// A real node's kubelet (test/realnode) registers 127.0.0.1 as its
		// InternalIP and trusts the CA for this client certificate, so
		// logs and exec reach it.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate=" + f.kubeletClientCert,
		"--kubelet-client-key=" + f.kubeletClientKey,
	}
}

// startAPIServer starts kube-apiserver with the recorded command line and
// waits until /readyz answers ok.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	var err error
	c.apiserver, err = startProcess("kube-apiserver", c.apiserverBin, c.apiserverArgs,
		filepath.Join(c.workDir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.caPEM) {
		return errors.New("parse generated CA certificate")
	}
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	defer secure.CloseIdleConnections()
	return waitReady(ctx, c.apiserver, secure, c.host+"/readyz", c.adminToken, "ok")
}

// waitReady polls url until it answers 200 with a body containing want, p
// exits, or ctx ends.
func waitReady(ctx context.Context, p *process, client *http.Client, url, token, want string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		ok, status := probe(ctx, client, url, token, want)
		if ok {
			return nil
		}
		last = status
		select {
		case <-p.done:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w (last answer: %s)\n%s", p.name, url, ctx.Err(), last, p.tail(40))
		case <-tick.C:
		}
	}
}

func probe(ctx context.Context, client *http.Client, url, token, want string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) {
		return true, ""
	}
	return false, fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// All listeners are held until every port is chosen so none repeats.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
