// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Plugin is a running plugin: the CSI socket and, with a registration
// directory, the registration socket the kubelet's plugin watcher finds.
type Plugin struct {
	// Socket is the CSI socket; RegistrationSocket is "" when no
	// registration directory was given.
	Socket, RegistrationSocket string

	csi, reg *grpc.Server
	calls    *callLog
	stopped  sync.Once
}

// Start serves the plugin until Stop. The CSI socket is served before the
// registration socket appears: the kubelet dials the CSI socket as soon as
// it has the registration's answer. A stale socket left by a killed
// plugin is replaced.
func Start(cfg Config) (*Plugin, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	socket, _ := cfg.SocketPath()
	state, err := openStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	calls, err := openCallLog(cfg.CallLog)
	if err != nil {
		return nil, err
	}
	p := &Plugin{Socket: socket, calls: calls}
	p.csi = grpc.NewServer(grpc.UnaryInterceptor(calls.interceptor))
	csi.RegisterIdentityServer(p.csi, identityServer{})
	csi.RegisterNodeServer(p.csi, &nodeServer{nodeID: cfg.NodeID, state: state})
	if err := serve(p.csi, socket); err != nil {
		p.Stop()
		return nil, err
	}
	if cfg.RegistrationDir == "" {
		return p, nil
	}
	p.RegistrationSocket = filepath.Join(cfg.RegistrationDir, RegistrationSocketName)
	p.reg = grpc.NewServer(grpc.UnaryInterceptor(calls.interceptor))
	registerapi.RegisterRegistrationServer(p.reg, &registrationServer{endpoint: socket})
	if err := serve(p.reg, p.RegistrationSocket); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// serve listens on a unix socket at path and serves s on it in the
// background; the listener removes the socket when s stops.
func serve(s *grpc.Server, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("create socket directory of %q: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return fmt.Errorf("listen on %q: a %v is there, not a socket", path, st.Mode().Type())
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove stale socket %q: %w", path, err)
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %q: %w", path, err)
	}
	go func() {
		if err := s.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Printf("serve %q: %v", path, err)
		}
	}()
	return nil
}

// Stop removes the registration socket first, so the kubelet deregisters
// the driver before its CSI socket goes, lets calls in flight finish and
// closes the call log. Staged and published volumes stay, as a real
// driver's do across a restart. Stopping again does nothing.
func (p *Plugin) Stop() { p.stopped.Do(p.stop) }

func (p *Plugin) stop() {
	if p.reg != nil {
		p.reg.GracefulStop()
	}
	if p.csi != nil {
		p.csi.GracefulStop()
	}
	if err := p.calls.Close(); err != nil {
		log.Printf("close the call log: %v", err)
	}
}
