// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"context"
	"errors"
	"fmt"
)

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after a grace
// period) and leaves etcd running: an API outage as a control-plane upgrade
// or a crashed server makes it. Clients then get connection refused on the
// same address until StartAPIServer.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil || c.apiserver.exited() {
		return errors.New("kube-apiserver is not running")
	}
	if err := c.apiserver.stop(); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port with the same certificates, tokens and etcd, and returns once
// its /readyz answers ok (bounded by Options.ReadyTimeout). Its output is
// appended to the same kube-apiserver.log.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver != nil && !c.apiserver.exited() {
		return errors.New("kube-apiserver is already running")
	}
	ctx, cancel := context.WithTimeout(ctx, c.readyTimeout)
	defer cancel()
	if err := c.startAPIServer(ctx); err != nil {
		if c.apiserver != nil {
			_ = c.apiserver.stop()
		}
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	return nil
}
