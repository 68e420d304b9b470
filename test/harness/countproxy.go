// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// CountingProxy stands between one client and the API server, forwards
// every request unchanged, and counts what the server sends back for one
// resource: bytes as they crossed the wire, requests by kind, and the
// objects in the answers to GETs and lists (a watch's are not decoded).
// For the resource "" it counts the bytes and requests of every resource,
// decodes nothing, and keeps a log of the requests the server answered.
//
// While the server cannot be reached the proxy closes the client's
// connection without an answer, as a client sees an API server that is
// down: a 502 would be an answer, which the agent treats as one. For an
// outage it stages, a test takes the proxy Down with the server and Up
// after it: a connection the proxy held open would otherwise keep a
// client waiting on a server that no longer exists.
type CountingProxy struct {
	// URL is the proxy's address.
	URL      string
	srv      *httptest.Server
	handler  http.Handler
	resource string

	mu       sync.Mutex
	bytes    int64
	reqs     map[string]int
	objects  int
	distinct map[string]bool // namespace/name of each object received
	names    map[string]bool
	log      []Request
}

// Request is one request the API server answered, for the resource "".
type Request struct {
	At time.Time
	// Kind is "GET", "LIST" or "WATCH"; Resource the plural asked for;
	// Stream the resource and selectors of a list or watch, which name
	// one informer's stream.
	Kind, Resource, Stream string
	// Initial marks a watch that lists first (sendInitialEvents, as
	// client-go's informers list by default): a list, served as a watch.
	Initial bool
	Status  int
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
	rp.ErrorHandler = hangUp
	// A watch cut by the server going down is what the proxy is for, not
	// news to log.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p.handler = rp
	p.srv = httptest.NewUnstartedServer(rp)
	p.srv.StartTLS()
	p.URL = p.srv.URL
	return p, nil
}

// Down closes the proxy's listener and every connection through it: its
// clients see what the clients of a stopped API server see, their
// connections broken and new ones refused, whatever the proxy's own
// protocol with them would otherwise let them wait for. Up serves again.
func (p *CountingProxy) Down() {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	srv.Listener.Close()
	srv.CloseClientConnections()
}

// Up listens again, after Down, on the same address with the same
// certificate.
func (p *CountingProxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, err := net.Listen("tcp", p.srv.Listener.Addr().String())
	if err != nil {
		return fmt.Errorf("proxy up again: %w", err)
	}
	old := p.srv
	p.srv = httptest.NewUnstartedServer(p.handler)
	p.srv.Listener.Close()
	p.srv.Listener = l
	p.srv.StartTLS()
	go old.Close() // waits for the handlers cut by Down
	return nil
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

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter, _ *http.Request, _ error) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	http.Error(w, "api server unreachable", http.StatusBadGateway)
}

// Log is every request answered so far, for the resource "".
func (p *CountingProxy) Log() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// Close stops the proxy.
func (p *CountingProxy) Close() error {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	srv.Close()
	return nil
}

// Count is what was received so far.
func (p *CountingProxy) Count() ProxyCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProxyCount{Bytes: p.bytes, Requests: maps.Clone(p.reqs), Objects: p.objects, Distinct: len(p.distinct), Names: len(p.names)}
}

func (p *CountingProxy) count(resp *http.Response) error {
	if p.resource == "" {
		return p.countAll(resp)
	}
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

// countAll counts an answer for any resource and logs its request.
func (p *CountingProxy) countAll(resp *http.Response) error {
	q := resp.Request.URL.Query()
	resource, name := apiResource(resp.Request.URL.Path)
	r := Request{At: time.Now(), Kind: "LIST", Resource: resource, Status: resp.StatusCode}
	switch {
	case q.Get("watch") == "true":
		r.Kind, r.Initial = "WATCH", q.Get("sendInitialEvents") == "true"
	case name != "" || strings.HasPrefix(resource, "/"):
		r.Kind = "GET" // an object, or a path such as /readyz
	}
	if name == "" {
		r.Stream = resource + "?" + q.Get("labelSelector") + "&" + q.Get("fieldSelector")
	}
	p.mu.Lock()
	p.reqs[r.Kind]++
	p.log = append(p.log, r)
	p.mu.Unlock()
	resp.Body = &countedBody{ReadCloser: resp.Body, p: p}
	return nil
}

// apiResource is the resource and object name of an API path:
// /api/v1/namespaces/ns/pods/name and /apis/group/version/things alike.
func apiResource(path string) (resource, name string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path, ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return "", ""
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	return parts[0], name
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
