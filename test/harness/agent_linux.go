// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hpmount/hpmount/test/simnode"
)

// AgentOptions say how to run the agent against a simulated node.
type AgentOptions struct {
	Binary     string
	Kubeconfig string
	Node       *simnode.Node
	// Resync is --resync-period; 0 means 2s, quick enough for tests.
	Resync time.Duration
	// Args are more flags, appended.
	Args []string
	// Log, when set, receives the agent's output; otherwise it is kept in
	// memory (Log).
	Log io.Writer
}

// Agent is the hpmount binary running as the node's agent, with this
// process's mount namespace and mountinfo as the host's.
type Agent struct {
	Cmd         *exec.Cmd
	MetricsAddr string
	HealthAddr  string
	Started     time.Time
	done        chan struct{}
	mu          sync.Mutex
	log         strings.Builder
}

// StartAgent starts the agent; Ready says when it is serving.
func StartAgent(o AgentOptions) (*Agent, error) {
	a := &Agent{done: make(chan struct{})}
	var err error
	addrs, err := FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	a.MetricsAddr, a.HealthAddr = addrs[0], addrs[1]
	a.Cmd = exec.Command(o.Binary, agentArgs(o, a)...)
	a.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out io.Reader
	if o.Log != nil {
		a.Cmd.Stdout, a.Cmd.Stderr = o.Log, o.Log
	} else if out, err = a.Cmd.StderrPipe(); err != nil {
		return nil, err
	} else {
		a.Cmd.Stdout = a.Cmd.Stderr
	}
	a.Started = time.Now()
	if err := a.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agent %q: %w", o.Binary, err)
	}
	go a.collect(out)
	return a, nil
}

func agentArgs(o AgentOptions, a *Agent) []string {
	resync := o.Resync
	if resync == 0 {
		resync = 2 * time.Second
	}
	return append([]string{"agent",
		"--kubeconfig", o.Kubeconfig,
		"--node-name", o.Node.Name,
		"--kubelet-root", o.Node.KubeletRoot,
		"--host-proc", "/proc",
		"--host-pid", strconv.Itoa(os.Getpid()),
		"--cgroup-root", o.Node.CgroupRoot,
		"--cgroup-mode", "v1",
		"--metrics-address", a.MetricsAddr,
		"--health-address", a.HealthAddr,
		"--resync-period", resync.String(),
	}, o.Args...)
}

// collect keeps the agent's output when no Log was given, and marks the
// exit.
func (a *Agent) collect(r io.Reader) {
	defer close(a.done)
	if r != nil {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			a.mu.Lock()
			a.log.WriteString(sc.Text() + "\n")
			a.mu.Unlock()
		}
	}
	_ = a.Cmd.Wait()
}

// Log is the agent's output so far, when no AgentOptions.Log was given.
func (a *Agent) Log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

// Pid is the agent's process id.
func (a *Agent) Pid() int { return a.Cmd.Process.Pid }

// Done is closed when the agent has exited.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Kill sends SIGKILL and waits for the exit: a crash, or the OOM killer.
func (a *Agent) Kill() {
	_ = a.Cmd.Process.Kill()
	<-a.done
}

// Stop sends SIGTERM, as the kubelet does, and waits for the exit.
func (a *Agent) Stop() {
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.Kill()
	}
}

// Ready is nil once /readyz answers 200; a Stop error once the agent
// exited, since waiting longer cannot help.
func (a *Agent) Ready() error {
	select {
	case <-a.done:
		return Stop(fmt.Errorf("agent exited: %v", a.Cmd.ProcessState))
	default:
	}
	body, code, err := get("http://" + a.HealthAddr + "/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("readyz %d: %s", code, body)
	}
	return nil
}

// Scrape returns the agent's /metrics text.
func (a *Agent) Scrape() (string, error) {
	body, code, err := get("http://" + a.MetricsAddr + "/metrics")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("metrics: status %d", code)
	}
	return body, err
}

var client = &http.Client{Timeout: 5 * time.Second}

func get(url string) (string, int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// FreeAddr is a free loopback address to listen on.
func FreeAddr() (string, error) {
	addrs, err := FreeAddrs(1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// FreeAddrs is n distinct free loopback addresses, on ports below the
// kernel's ephemeral range. A port bound to :0 comes from that range, and
// until the agent binds it any outgoing connection may take it: with
// twenty agents opening API watches at once, one agent failed to bind its
// metrics port. A port is handed out once per process, and each process
// starts at its own place in the range, so concurrent test binaries
// rarely meet.
func FreeAddrs(n int) ([]string, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	lo, hi := portFloor, ephemeralLow()
	if ports.next < lo || ports.next >= hi {
		ports.next = lo + os.Getpid()*61%(hi-lo)
	}
	var addrs []string
	for tried := 0; len(addrs) < n; tried++ {
		if tried == hi-lo {
			return nil, fmt.Errorf("no free loopback port in [%d, %d)", lo, hi)
		}
		port := ports.next
		if ports.next++; ports.next >= hi {
			ports.next = lo
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // in use
		}
		defer l.Close()
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// portFloor is the lowest port FreeAddrs hands out: above the registered
// services a test machine may run.
const portFloor = 20000

// ports is where FreeAddrs goes on from.
var ports struct {
	mu   sync.Mutex
	next int
}

// ephemeralLow is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), 32768 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= portFloor+100 {
		return 32768
	}
	return low
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// Binary is the hpmount binary to run: $HPMOUNT_BINARY (what `make test`
// built), or one built once here as make build does, static (CGO_ENABLED=0):
// the real node's agent image has no libc (CheckStatic).
func Binary() (string, error) {
	if b := os.Getenv("HPMOUNT_BINARY"); b != "" {
		return b, nil
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hpmount-bin-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "hpmount")
		cmd := exec.Command("go", "build", "-o", built, "github.com/hpmount/hpmount/cmd/hpmount")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build hpmount: %w\n%s", err, out)
		}
	})
	return built, buildErr
}
