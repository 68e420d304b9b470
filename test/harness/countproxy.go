// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// CountingProxy stands between one client and the API server, forwards
// every request unchanged, and counts what the server sends back for one
// resource: bytes as they crossed the wire, requests by kind, and the
// objects in the answers to GETs and lists (a watch's are not decoded).
type CountingProxy struct {
	// URL is the proxy's address.
	URL      string
	srv      *httptest.Server
	resource string

	mu       sync.Mutex
	bytes    int64
	reqs     map[string]int
	objects  int
	distinct map[string]bool // namespace/name of each object received
	names    map[string]bool
}

// ProxyCount is what a client received for the resource.
type ProxyCount struct {
	Bytes int64
	// Requests by kind: "GET", "LIST" or "WATCH".
	Requests map[string]int
	// Objects is how many objects the GETs and lists returned, Distinct
	// how many different ones, Names how many were asked for by name.
	Objects, Distinct, Names int
}

func (c ProxyCount) String() string {
	return fmt.Sprintf("%d bytes in %v requests, %d objects (%d different)", c.Bytes, c.Requests, c.Objects, c.Distinct)
}

// StartCountingProxy forwards to the API server of cfg, trusting its CA,
// and counts the answers for resource (a plural, e.g.
// "persistentvolumeclaims"). Close stops it.
func StartCountingProxy(cfg *rest.Config, resource string) (*CountingProxy, error) {
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("api server url %q: %w", cfg.Host, err)
	}
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData, CAFile: cfg.CAFile}})
	if err != nil {
		return nil, fmt.Errorf("api server tls: %w", err)
	}
	p := &CountingProxy{resource: resource, reqs: map[string]int{}, names: map[string]bool{}, distinct: map[string]bool{}}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = &http.Transport{TLSClientConfig: tlsCfg, Proxy: nil}
	rp.FlushInterval = -1
	rp.ModifyResponse = p.count
	p.srv = httptest.NewUnstartedServer(rp)
	p.srv.StartTLS()
	p.URL = p.srv.URL
	return p, nil
}

// Config is cfg pointed at the proxy, with cfg's credentials.
func (p *CountingProxy) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = p.URL
	c.TLSClientConfig = rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}),
	}
	return c
}

// Close stops the proxy.
func (p *CountingProxy) Close() error {
	p.srv.Close()
	return nil
}

// Count is what was received so far.
func (p *CountingProxy) Count() ProxyCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProxyCount{Bytes: p.bytes, Requests: maps.Clone(p.reqs), Objects: p.objects, Distinct: len(p.distinct), Names: len(p.names)}
}

func (p *CountingProxy) count(resp *http.Response) error {
	path := resp.Request.URL.Path
	i := strings.Index(path, "/"+p.resource)
	if i < 0 {
		return nil
	}
	name := strings.TrimPrefix(path[i+len(p.resource)+1:], "/")
	kind := "LIST"
	switch {
	case resp.Request.URL.Query().Get("watch") == "true":
		kind = "WATCH"
	case name != "":
		kind = "GET"
	}
	p.mu.Lock()
	p.reqs[kind]++
	if name != "" {
		p.names[path] = true
	}
	p.mu.Unlock()
	body := &countedBody{ReadCloser: resp.Body, p: p, decode: kind != "WATCH" && resp.StatusCode == http.StatusOK,
		gzipped: resp.Header.Get("Content-Encoding") == "gzip"}
	resp.Body = body
	return nil
}

// countedBody counts the bytes read through it and, at the end, the
// objects of a GET or list it kept.
type countedBody struct {
	io.ReadCloser
	p       *CountingProxy
	decode  bool
	gzipped bool
	kept    bytes.Buffer
}

func (b *countedBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	b.p.mu.Lock()
	b.p.bytes += int64(n)
	b.p.mu.Unlock()
	if b.decode {
		b.kept.Write(buf[:n])
		if err == io.EOF {
			b.decode = false
			b.countObjects()
		}
	}
	return n, err
}

func (b *countedBody) countObjects() {
	data := b.kept.Bytes()
	if b.gzipped {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		if data, err = io.ReadAll(zr); err != nil {
			return
		}
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return
	}
	items := []runtime.Object{obj}
	if meta.IsListType(obj) {
		if items, err = meta.ExtractList(obj); err != nil {
			return
		}
	}
	b.p.mu.Lock()
	b.p.objects += len(items)
	for _, o := range items {
		if m, err := meta.Accessor(o); err == nil {
			b.p.distinct[m.GetNamespace()+"/"+m.GetName()] = true
		}
	}
	b.p.mu.Unlock()
}
