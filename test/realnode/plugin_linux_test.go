// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// TestKubectlPluginDiag runs `kubectl hpmount diag NODE VMI` (the built
// kubectl-hpmount, as kubectl runs a plugin from $PATH) with a kubeconfig,
// against the agent running as deployed: the plugin finds the node's agent
// pod by the DaemonSet's labels and runs diag in it through the API
// server's pods/exec and the kubelet. The report must carry the agent's
// own --kubelet-root (this node's is not /var/lib/kubelet) and the VMI's
// mounted volume as ok; NODE completes to the nodes with an agent pod; an
// --agent-namespace without the agent exits 2.
func TestKubectlPluginDiag(t *testing.T) {
	e := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stopHostAgent()
	bin, err := harness.Binary()
	if err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(t.TempDir(), "kubectl-hpmount")
	if out, err := exec.Command("go", "build", "-o", plugin, "github.com/hpmount/hpmount/cmd/kubectl-hpmount").CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-hpmount: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, e.admin); err != nil {
		t.Fatal(err)
	}
	a, err := e.node.DeployAgent(ctx, bin)
	if a != nil {
		t.Cleanup(func() {
			if err := a.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatalf("deploy the agent: %v\n%s", err, e.node.Logs(30))
	}
	e.agentLog = a.Log
	v := e.newVM(t, ctx, "plugin", "vm-plugin")
	fs := v.addVolume(t, ctx, "fs", "ext4", 64*mib)
	pod := v.attach(t, ctx, []simnode.Volume{fs}, []simnode.Volume{fs})
	v.importDiskImage(t, ctx, pod, fs)
	v.apply(t, ctx)
	v.waitReadWrite(t, ctx, fs, "plugin-fs")

	out, stderr, code := runPlugin(ctx, t, plugin, "diag", e.node.Name, v.name, "--kubeconfig", kubeconfig, "-n", v.ns, "-o", "json")
	if code != diag.ExitOK {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, diag.ExitOK, out, stderr)
	}
	var rep diag.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.Node != e.node.Name || rep.KubeletRoot != e.node.KubeletRoot {
		t.Errorf("report of node %q under %q, want %q under the agent's --kubelet-root %q", rep.Node, rep.KubeletRoot, e.node.Name, e.node.KubeletRoot)
	}
	if len(rep.Volumes) != 1 || rep.Volumes[0].Verdict != diag.OK {
		t.Errorf("volumes %+v: want %s alone, ok", rep.Volumes, fs.Name)
	}
	t.Logf("kubectl hpmount diag %s %s: %d volume(s), %d problem(s), mount table by %s", e.node.Name, v.name, len(rep.Volumes), rep.Problems, rep.MountSource)

	if out, _, _ := runPlugin(ctx, t, plugin, "__complete", "diag", "--kubeconfig", kubeconfig, ""); !strings.Contains(out, e.node.Name+"\n") {
		t.Errorf("completion of NODE: %q lacks %s", out, e.node.Name)
	}
	_, stderr, code = runPlugin(ctx, t, plugin, "diag", e.node.Name, "--kubeconfig", kubeconfig, "--agent-namespace", "default")
	if code != 2 || !strings.Contains(stderr, "no agent pod on node") {
		t.Errorf("agent looked for in namespace default: exit %d, stderr %q; want 2 and no agent pod", code, stderr)
	}
}

func runPlugin(ctx context.Context, t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}
