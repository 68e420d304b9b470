// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"

	"k8s.io/client-go/rest"
)

// APIProxy stands between one agent and the API server and forwards every
// request unchanged, except that it can hold back what the API server
// sends to the lists and watches of one label selector: one of the agent's
// informers then lags its peers, as an informer's watch can on a busy API
// server. A test uses it to deliver the updates of one object to two
// informers in the order it chooses; a read with another selector or none
// (a live GET) passes at once.
type APIProxy struct {
	// URL is the proxy's address, for the agent's kubeconfig.
	URL string
	srv *httptest.Server

	mu   sync.Mutex
	held map[string]chan struct{} // selector -> closed on Release
}

// StartAPIProxy forwards to the API server of cfg, trusting its CA; each
// request keeps its own credentials. Close stops it.
func StartAPIProxy(cfg *rest.Config) (*APIProxy, error) {
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("api server url %q: %w", cfg.Host, err)
	}
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData, CAFile: cfg.CAFile}})
	if err != nil {
		return nil, fmt.Errorf("api server tls: %w", err)
	}
	p := &APIProxy{held: map[string]chan struct{}{}}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = &http.Transport{TLSClientConfig: tlsCfg, Proxy: nil, ForceAttemptHTTP2: false}
	rp.FlushInterval = -1 // every watch event as soon as it is let through
	rp.ModifyResponse = func(resp *http.Response) error {
		sel := resp.Request.URL.Query().Get("labelSelector")
		resp.Body = &gatedBody{ReadCloser: resp.Body, wait: func(ctx context.Context) error { return p.wait(ctx, sel) }, ctx: resp.Request.Context()}
		return nil
	}
	// TLS of its own (clientcmd sends no credentials over plain HTTP),
	// HTTP/1.1 only, so that each watch is a request the proxy sees.
	p.srv = httptest.NewUnstartedServer(rp)
	p.srv.StartTLS()
	p.URL = p.srv.URL
	return p, nil
}

// Config is cfg pointed at the proxy, with cfg's credentials, trusting the
// proxy's certificate.
func (p *APIProxy) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = p.URL
	c.TLSClientConfig = rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}),
	}
	return c
}

// Hold stops what the API server sends to requests with the label
// selector sel from reaching the agent, from now until Release: bytes read
// after Hold returns wait in the proxy.
func (p *APIProxy) Hold(sel string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.held[sel]; !ok {
		p.held[sel] = make(chan struct{})
	}
}

// Release lets through what was held for sel, in order, and what follows.
func (p *APIProxy) Release(sel string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.held[sel]; ok {
		close(ch)
		delete(p.held, sel)
	}
}

// Close stops the proxy; held requests end with it.
func (p *APIProxy) Close() error {
	p.mu.Lock()
	for sel, ch := range p.held {
		close(ch)
		delete(p.held, sel)
	}
	p.mu.Unlock()
	p.srv.CloseClientConnections()
	p.srv.Close()
	return nil
}

// wait returns once sel is not held, or ctx ended.
func (p *APIProxy) wait(ctx context.Context, sel string) error {
	for {
		p.mu.Lock()
		ch, ok := p.held[sel]
		p.mu.Unlock()
		if !ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// gatedBody waits after each read, not before: a read that was already
// blocked on the API server when Hold came would otherwise deliver the
// first event that follows it.
type gatedBody struct {
	io.ReadCloser
	wait func(context.Context) error
	ctx  context.Context
}

func (b *gatedBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if werr := b.wait(b.ctx); werr != nil {
		return 0, werr
	}
	return n, err
}
