// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Error is QEMU's answer to a command it refused: its class and the
// message, which for a failed open carries strerror (e.g. "Could not open
// '/var/run/kubevirt/hotplug-disks/raw': Operation not permitted").
type Error struct {
	Command, Class, Desc string
}

func (e *Error) Error() string { return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc) }

// Event is one asynchronous QMP event (e.g. DEVICE_DELETED).
type Event struct {
	Name string          `json:"event"`
	Data json.RawMessage `json:"data"`
}

// message is anything QEMU sends on the QMP socket.
type message struct {
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// Client speaks QMP on one connection: one command at a time, events kept
// until a WaitEvent takes them, so an event that arrives before the reply
// of the command that caused it is not lost.
type Client struct {
	conn    net.Conn
	cmdMu   sync.Mutex // one command in flight: QMP replies carry no id
	replies chan message
	mu      sync.Mutex
	events  []Event
	changed chan struct{} // closed and replaced when events or err change
	err     error         // why the reader stopped
}

// Dial connects to a QMP socket, reads the greeting and negotiates
// capabilities (qmp_capabilities), after which commands are accepted.
func Dial(ctx context.Context, network, address string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("dial qmp %q: %w", address, err)
	}
	return newClient(ctx, conn)
}

func newClient(ctx context.Context, conn net.Conn) (*Client, error) {
	c := &Client{conn: conn, replies: make(chan message, 1), changed: make(chan struct{})}
	r := bufio.NewReader(conn)
	greeting, err := r.ReadBytes('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	var g struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := json.Unmarshal(greeting, &g); err != nil || g.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting %q: not a QMP greeting (%v)", greeting, err)
	}
	go c.read(r)
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// read sorts what QEMU sends into replies and events until the connection
// ends.
func (c *Client) read(r io.Reader) {
	dec := json.NewDecoder(r)
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("qmp connection: %w", err)
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
			close(c.replies)
			return
		}
		if m.Event != "" {
			c.mu.Lock()
			c.events = append(c.events, Event{Name: m.Event, Data: m.Data})
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
			continue
		}
		c.replies <- m
	}
}

// Execute runs one command with args (nil for none) and decodes its
// return value into out (nil to ignore it). A refusal is an *Error.
func (c *Client) Execute(ctx context.Context, command string, args, out any) error {
	c.cmdMu.Lock()
	defer c.cmdMu.Unlock()
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("qmp %s: encode: %w", command, err)
	}
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	var m message
	var ok bool
	select {
	case m, ok = <-c.replies:
	case <-ctx.Done():
		// The reply, when it comes, would be taken for the next
		// command's: this connection is done.
		c.conn.Close()
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
	if !ok {
		return fmt.Errorf("qmp %s: %w", command, c.readErr())
	}
	if m.Error != nil {
		return &Error{Command: command, Class: m.Error.Class, Desc: m.Error.Desc}
	}
	if out != nil {
		if err := json.Unmarshal(m.Return, out); err != nil {
			return fmt.Errorf("qmp %s: decode return %s: %w", command, m.Return, err)
		}
	}
	return nil
}

func (c *Client) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return errors.New("qmp connection closed")
	}
	return c.err
}

// WaitEvent returns (and takes) the first event named name whose data
// match accepts (nil accepts any), waiting for one until ctx ends or the
// connection does.
func (c *Client) WaitEvent(ctx context.Context, name string, match func(json.RawMessage) bool) (Event, error) {
	for {
		c.mu.Lock()
		for i, ev := range c.events {
			if ev.Name == name && (match == nil || match(ev.Data)) {
				c.events = append(c.events[:i:i], c.events[i+1:]...)
				c.mu.Unlock()
				return ev, nil
			}
		}
		changed, err := c.changed, c.err
		c.mu.Unlock()
		if err != nil {
			return Event{}, fmt.Errorf("wait for qmp event %s: %w", name, err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Event{}, fmt.Errorf("wait for qmp event %s: %w", name, ctx.Err())
		}
	}
}

// Close ends the connection.
func (c *Client) Close() error { return c.conn.Close() }
