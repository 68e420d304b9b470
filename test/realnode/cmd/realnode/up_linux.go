// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/sandbox"
	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/realnode"
)

// nsEnv marks the serve process that runs in the private mount namespace.
const nsEnv = "HPMOUNT_REALNODE_PRIVATE_MOUNT_NS"

// up starts `realnode serve` in the background (its own session, output in
// DIR/realnode.log) and waits until it reports the node ready or fails.
func up(o options) error {
	if s, err := readState(o.dir); err == nil && alive(s.PID) {
		return fmt.Errorf("a node is up already (pid %d, %q): make node-down first", s.PID, statePath(o.dir))
	}
	if o.agent {
		// Minutes before DeployAgent would say so: the image has no libc.
		if err := harness.CheckStatic(o.binary); err != nil {
			return fmt.Errorf("--binary: %w", err)
		}
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return fmt.Errorf("make the node's dir: %w", err)
	}
	for _, p := range []string{statePath(o.dir), reportPath(o.dir)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the last node's record: %w", err)
		}
	}
	logPath := filepath.Join(o.dir, "realnode.log")
	log, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("make the node's log: %w", err)
	}
	defer log.Close()
	args := []string{"serve", "--dir", o.dir, "--name", o.name, "--binary", o.binary}
	if o.agent {
		args = append(args, "--agent")
	}
	dropInheritedFDs()
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the background process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("starting the real node %s in the background (log %s)...\n", o.name, logPath)
	for {
		if s, err := readState(o.dir); err == nil && (s.Ready || s.Error != "") {
			if s.Error != "" {
				return fmt.Errorf("%s\n(see %q)", s.Error, logPath)
			}
			fmt.Print(describe(s))
			return nil
		}
		select {
		case err := <-exited:
			if s, rerr := readState(o.dir); rerr == nil && s.Error != "" {
				return fmt.Errorf("%s\n(see %q)", s.Error, logPath) // written just before it exited
			}
			return fmt.Errorf("the background process exited before the node was ready: %w\n%s", err, tailFile(logPath, 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// dropInheritedFDs marks the descriptors this process inherited beyond
// 0-2 close-on-exec, so the background process does not hold them for the
// node's lifetime: a caller's lock (`flock LOCK make node-up` kept LOCK
// taken until node-down) or the write end of a caller's pipe, whose reader
// would wait for an EOF that never comes. Go's own descriptors are
// close-on-exec already.
func dropInheritedFDs() {
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// serve holds the node: it re-runs itself in a private mount namespace
// (internal/sandbox, as the tests' TestMain), starts the Stack (and the
// agent pod), writes the state, and on SIGTERM or SIGINT tears everything
// down with Stack.Stop and reports what the teardown left on the host.
func serve(o options) error {
	sandbox.ReexecInPrivateMountNamespace(nsEnv)
	if os.Getenv(nsEnv) == "" {
		return errors.New("not root: the real node needs root")
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	before := realnode.TakeSnapshot()
	st := State{PID: os.Getpid(), Node: o.name, Dir: o.dir, Log: filepath.Join(o.dir, "realnode.log")}
	s, err := start(o, &st)
	if err != nil {
		st.Error = err.Error()
		return errors.Join(err, writeState(st))
	}
	st.Ready = true
	if err := writeState(st); err != nil {
		return errors.Join(err, s.Stop())
	}
	fmt.Printf("ready:\n%s", describe(st))
	sig := <-stop
	fmt.Printf("%v: tearing the node down\n", sig)
	report := realnode.StopChecked(before, s.Stop)
	fmt.Print(report)
	data, err := json.Marshal(report)
	if err != nil {
		return err
	}
	return os.WriteFile(reportPath(o.dir), data, 0o600)
}

// start brings the stack up and fills the state.
func start(o options, st *State) (*realnode.Stack, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := realnode.StartStack(ctx, filepath.Join(o.dir, "stack"), o.name)
	if err != nil {
		return nil, err
	}
	st.Kubeconfig = filepath.Join(o.dir, "admin.kubeconfig")
	st.APIServer, st.CAFile, st.Token = s.Cluster.Host(), s.Cluster.CAFile(), s.Admin.BearerToken
	st.KubeletRoot, st.ContainerdSocket, st.CallLog = s.Node.KubeletRoot, s.Node.ContainerdSocket, s.Node.CallLog()
	st.KubeletPID = s.Node.KubeletPID()
	if err := cluster.WriteKubeconfig(st.Kubeconfig, s.Admin); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	if o.agent {
		binary, err := filepath.Abs(o.binary)
		if err == nil {
			s.Agent, err = s.Node.DeployAgent(ctx, binary)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("deploy the agent: %w", err), s.Stop())
		}
		st.AgentPod = s.Agent.Pod.Namespace + "/" + s.Agent.Pod.Name
		st.AgentHealth, st.AgentMetrics = s.Agent.Site.HealthAddr, s.Agent.Site.MetricsAddr
	}
	return s, nil
}

// down signals the background process and waits for its teardown report.
func down(o options) error {
	s, err := readState(o.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no node is up (no %q)", statePath(o.dir))
	}
	if err != nil {
		return fmt.Errorf("read the node's record: %w", err)
	}
	if s.Error != "" && !alive(s.PID) {
		// up failed, and serve stopped what it had started.
		fmt.Printf("the node never came up (%s); nothing to tear down\n", s.Error)
		return os.Remove(statePath(o.dir))
	}
	if !alive(s.PID) {
		return fmt.Errorf("the node's process %d is gone; its teardown may not have run (log %q):\n%s", s.PID, s.Log, tailFile(s.Log, 20))
	}
	if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal %d: %w", s.PID, err)
	}
	fmt.Printf("tearing down the real node %s (pid %d)...\n", s.Node, s.PID)
	deadline := time.Now().Add(3 * time.Minute)
	for alive(s.PID) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still running after 3 minutes (log %q)", s.PID, s.Log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	report, err := readReport(o.dir)
	if err != nil {
		return fmt.Errorf("no teardown report (%w); log:\n%s", err, tailFile(s.Log, 20))
	}
	fmt.Print(report)
	if err := os.Remove(statePath(o.dir)); err != nil {
		return fmt.Errorf("remove the node's record: %w", err)
	}
	if !report.Clean() {
		return errors.New("the teardown was not clean")
	}
	return nil
}

func readReport(dir string) (realnode.TeardownReport, error) {
	var r realnode.TeardownReport
	data, err := os.ReadFile(reportPath(dir))
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	return r, err
}

// alive says whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func tailFile(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
