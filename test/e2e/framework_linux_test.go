package e2e

import (
	"bufio"
	"context"
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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/simnode"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

const nodeName = "node-1"

// env is one control plane, one simulated node and the agent serving it.
type env struct {
	t          *testing.T // the running step, or root
	root       *testing.T
	ctx        context.Context
	cluster    *cluster.Cluster
	kube       kubernetes.Interface
	dyn        dynamic.Interface
	ctrl       *simnode.Controller
	node       *simnode.Node
	kubeconfig string
	agent      *agentProcess
	agentArgs  []string
}

func newEnv(t *testing.T, agentArgs ...string) *env {
	t.Helper()
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := cluster.Start(t)
	if err := c.InstallVMICRD(ctx); err != nil {
		t.Fatal(err)
	}
	admin := c.AdminConfig()
	e := &env{t: t, root: t, ctx: ctx, cluster: c, kube: kubernetes.NewForConfigOrDie(admin), dyn: dynamic.NewForConfigOrDie(admin)}
	e.ctrl = &simnode.Controller{Kube: e.kube, Dyn: e.dyn}
	e.kubeconfig = e.agentKubeconfig()
	node, err := simnode.New(nodeName, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	e.node = node
	e.agentArgs = agentArgs
	e.startAgent()
	return e
}

// agentKubeconfig binds the agent's ClusterRole from deploy/ for real and
// returns a kubeconfig with a token of its ServiceAccount: a permission the
// agent lacks fails the tests.
func (e *env) agentKubeconfig() string {
	rbac, err := os.ReadFile(filepath.Join(repoRoot(e.t), "deploy", "rbac.yaml"))
	if err != nil {
		e.t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hpmount-system"}}
	if _, err := e.kube.CoreV1().Namespaces().Create(e.ctx, ns, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(e.ctx, e.cluster.AdminConfig(), rbac, false); err != nil {
		e.t.Fatal(err)
	}
	cfg, err := e.cluster.ServiceAccountConfig(e.ctx, "hpmount-system", "hpmount")
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.t.TempDir(), "agent.kubeconfig")
	if err := cluster.WriteKubeconfig(path, cfg); err != nil {
		e.t.Fatal(err)
	}
	return path
}

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// agentProcess is the agent binary running against the simulated node.
type agentProcess struct {
	cmd         *exec.Cmd
	metricsAddr string
	healthAddr  string
	mu          sync.Mutex
	log         strings.Builder
	done        chan struct{}
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// agentBinary is the binary `make test` built, or one built here.
func agentBinary(t *testing.T) string {
	if b := os.Getenv("HPMOUNT_BINARY"); b != "" {
		return b
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hpmount-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "hpmount")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/hpmount/hpmount/cmd/hpmount").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build agent: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startAgent runs the agent with the simulated node as its host: this test
// process's private mount namespace and mountinfo.
func (e *env) startAgent() {
	e.t.Helper()
	p := &agentProcess{metricsAddr: freeAddr(e.t), healthAddr: freeAddr(e.t), done: make(chan struct{})}
	args := append([]string{"agent",
		"--kubeconfig", e.kubeconfig,
		"--node-name", nodeName,
		"--kubelet-root", e.node.KubeletRoot,
		"--host-proc", "/proc",
		"--host-pid", strconv.Itoa(os.Getpid()),
		"--cgroup-root", e.node.CgroupRoot,
		"--cgroup-mode", "v1",
		"--metrics-address", p.metricsAddr,
		"--health-address", p.healthAddr,
		"--resync-period", "2s",
	}, e.agentArgs...)
	p.cmd = exec.Command(agentBinary(e.t), args...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	p.cmd.Stdout = p.cmd.Stderr
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go p.collect(stderr)
	e.agent = p
	// The agent outlives the step that (re)started it.
	e.root.Cleanup(func() {
		p.kill()
		if e.root.Failed() {
			e.t.Logf("agent log:\n%s", p.logText())
		}
	})
	e.eventually("agent ready", 60*time.Second, func() error { return p.ready() })
}

func (p *agentProcess) collect(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.log.WriteString(sc.Text() + "\n")
		p.mu.Unlock()
	}
	_ = p.cmd.Wait()
}

func (p *agentProcess) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *agentProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *agentProcess) ready() error {
	select {
	case <-p.done:
		return fmt.Errorf("agent exited: %v", p.cmd.ProcessState)
	default:
	}
	resp, err := http.Get("http://" + p.healthAddr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz %d: %s", resp.StatusCode, body)
	}
	return nil
}

// scrape returns the agent's /metrics text.
func (p *agentProcess) scrape() (string, error) {
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// eventually retries f until it succeeds or timeout passes.
func (e *env) eventually(what string, timeout time.Duration, f func() error) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("%s: not within %s: %v", what, timeout, err)
}

// table reads the simulated host's mount table.
func (e *env) table() *mount.Table {
	e.t.Helper()
	t, err := mount.ReadTable("/proc/self/mountinfo")
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// events lists the Events about one VMI.
func (e *env) events(ns, vmi string) []corev1.Event {
	e.t.Helper()
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", vmi),
		fields.OneTermEqualSelector("involvedObject.kind", "VirtualMachineInstance")).String()
	list, err := e.kube.CoreV1().Events(ns).List(e.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// waitEvent waits for an Event with reason whose message contains substr.
func (e *env) waitEvent(ns, vmi, reason, substr string) corev1.Event {
	e.t.Helper()
	var found corev1.Event
	e.eventually("event "+reason+" "+substr, 60*time.Second, func() error {
		for _, ev := range e.events(ns, vmi) {
			if ev.Reason == reason && strings.Contains(ev.Message, substr) {
				found = ev
				return nil
			}
		}
		return fmt.Errorf("no such event yet")
	})
	return found
}

func (e *env) adminConfig() *rest.Config { return e.cluster.AdminConfig() }

// step runs one scenario step as a subtest; the env's helpers fail the
// step, not the parent test.
func (e *env) step(name string, f func(t *testing.T)) bool {
	parent := e.t
	defer func() { e.t = parent }()
	return parent.Run(name, func(t *testing.T) {
		e.t = t
		f(t)
	})
}
