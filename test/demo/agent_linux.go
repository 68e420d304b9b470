package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// agentProcess is `hpmount agent` running against the simulated node.
type agentProcess struct {
	cmd         *exec.Cmd
	metricsAddr string
	healthAddr  string
	done        chan struct{}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startAgent runs the agent with the simulated node as its host: this
// process's mount namespace and mountinfo, the node's kubelet root and
// device cgroup subtree. Its log is appended to d.agentLog.
func (d *demo) startAgent() error {
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	health, err := freeAddr()
	if err != nil {
		return err
	}
	args := []string{"agent",
		"--kubeconfig", d.agentKC,
		"--node-name", nodeName,
		"--kubelet-root", d.node.KubeletRoot,
		"--host-proc", "/proc",
		"--host-pid", strconv.Itoa(os.Getpid()),
		"--cgroup-root", d.node.CgroupRoot,
		"--cgroup-mode", "v1",
		"--metrics-address", metrics,
		"--health-address", health,
		"--resync-period", "2s",
		"--report-volume-status",
		"--grow-filesystems",
	}
	log, err := os.OpenFile(d.agentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("agent log: %w", err)
	}
	defer log.Close() // the child holds its own copy
	p := &agentProcess{metricsAddr: metrics, healthAddr: health, done: make(chan struct{})}
	p.cmd = exec.Command(d.binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(log, "# demo: starting %s %v\n", d.binary, args)
	started := time.Now()
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	d.agent = p
	item("%s agent --node-name %s --host-pid %d --cgroup-mode v1 --resync-period 2s", d.binary, nodeName, os.Getpid())
	item("    --report-volume-status --grow-filesystems (full command line in the log)")
	if err := d.eventually("agent /readyz", waitTimeout, p.ready); err != nil {
		return err
	}
	item("pid %d, ready in %s; metrics http://%s/metrics, health http://%s/readyz",
		p.cmd.Process.Pid, time.Since(started).Round(time.Millisecond), metrics, health)
	item("log (JSON, not shown here): %s", d.agentLog)
	return nil
}

// kill sends SIGKILL and waits for the exit.
func (p *agentProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *agentProcess) ready() error {
	select {
	case <-p.done:
		return &stopError{fmt.Errorf("agent exited: %v", p.cmd.ProcessState)}
	default:
	}
	body, code, err := httpGet("http://" + p.healthAddr + "/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("readyz %d: %s", code, body)
	}
	return nil
}

// scrape returns the agent's /metrics text.
func (p *agentProcess) scrape() (string, error) {
	body, code, err := httpGet("http://" + p.metricsAddr + "/metrics")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("metrics: status %d", code)
	}
	return body, err
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

func httpGet(url string) (string, int, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}
