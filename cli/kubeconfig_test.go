// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hpmount/hpmount/cli"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/test/cluster"
)

// childEnv makes the test binary a child that prints who KubeFlags
// authenticates as: ~/.kube/config is found from $HOME when client-go
// initialises, so that case needs a process of its own.
const childEnv = "HPMOUNT_KUBECONFIG_CHILD"

// TestKubeconfigLoading checks the kubectl rules against a real
// kube-apiserver with two contexts, each a ServiceAccount of its own
// namespace: the identity the server sees and the namespace chosen.
func TestKubeconfigLoading(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("child process")
	}
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	first := writeContext(t, ctx, c, filepath.Join(dir, "first"), "alice")
	second := writeContext(t, ctx, c, filepath.Join(dir, "second"), "bob")
	tests := []struct {
		name, env      string
		flags          cli.KubeFlags
		wantUser, want string
	}{
		{name: "KUBECONFIG list, first file's current-context", env: first + ":" + second, wantUser: "alice", want: "ns-alice"},
		{name: "KUBECONFIG list, --context from the second file", env: first + ":" + second, flags: cli.KubeFlags{Context: "bob"}, wantUser: "bob", want: "ns-bob"},
		{name: "--kubeconfig wins over KUBECONFIG", env: first, flags: cli.KubeFlags{Kubeconfig: second}, wantUser: "bob", want: "ns-bob"},
		{name: "-n wins over the context", env: first, flags: cli.KubeFlags{Namespace: "vms"}, wantUser: "alice", want: "vms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			if user := whoAmI(t, ctx, &tt.flags); !strings.HasSuffix(user, ":"+tt.wantUser) {
				t.Errorf("authenticated as %q, want the ServiceAccount %s", user, tt.wantUser)
			}
			if ns, err := tt.flags.ContextNamespace("fallback"); err != nil || ns != tt.want {
				t.Errorf("namespace %q, %v; want %q", ns, err, tt.want)
			}
		})
	}
	t.Run("~/.kube/config without KUBECONFIG", func(t *testing.T) {
		home := t.TempDir()
		if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(second, filepath.Join(home, ".kube", "config")); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(withoutEnv("KUBECONFIG", "HOME"), "HOME="+home, childEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "user=system:serviceaccount:ns-bob:bob namespace=ns-bob") {
			t.Errorf("child: %v\n%s", err, out)
		}
	})
}

// TestMain runs the child of the ~/.kube/config case when asked: client-go
// reads $HOME once per process, so that case needs a process of its own.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(kubeconfigChild())
	}
	os.Exit(m.Run())
}

// kubeconfigChild loads the kubeconfig with no flags and prints whom it
// authenticates as and its namespace.
func kubeconfigChild() int {
	var k cli.KubeFlags
	ns, err := k.ContextNamespace("fallback")
	if err == nil {
		var user string
		if user, err = selfUser(context.Background(), &k); err == nil {
			fmt.Printf("user=%s namespace=%s\n", user, ns)
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}

func whoAmI(t *testing.T, ctx context.Context, k *cli.KubeFlags) string {
	t.Helper()
	user, err := selfUser(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	return user
}

// selfUser asks the API server whom k's kubeconfig authenticates as.
func selfUser(ctx context.Context, k *cli.KubeFlags) (string, error) {
	cfg, err := k.RESTConfig()
	if err != nil {
		return "", err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("self subject review: %w", err)
	}
	return r.Status.UserInfo.Username, nil
}

// writeContext writes a kubeconfig whose only context, named user, is the
// ServiceAccount user of namespace ns-<user>.
func writeContext(t *testing.T, ctx context.Context, c *cluster.Cluster, path, user string) string {
	t.Helper()
	ns := "ns-" + user
	sa, err := c.ServiceAccountConfig(ctx, ns, user)
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[user] = &clientcmdapi.Cluster{Server: sa.Host, CertificateAuthorityData: caData(sa)}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: sa.BearerToken}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: user, AuthInfo: user, Namespace: ns}
	kc.CurrentContext = user
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func caData(cfg *rest.Config) []byte {
	if len(cfg.TLSClientConfig.CAData) > 0 {
		return cfg.TLSClientConfig.CAData
	}
	b, _ := os.ReadFile(cfg.TLSClientConfig.CAFile)
	return b
}

func withoutEnv(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// TestKubeconfigNotFound: where no kubeconfig is found, the error names
// the files looked for, not client-go's KUBERNETES_MASTER hint.
func TestKubeconfigNotFound(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", filepath.Join(dir, "a")+string(os.PathListSeparator)+filepath.Join(dir, "b"))
	_, err := (&cli.KubeFlags{}).RESTConfig()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "a")) || !strings.Contains(err.Error(), filepath.Join(dir, "b")) ||
		strings.Contains(err.Error(), "KUBERNETES_MASTER") {
		t.Errorf("error %v, want one naming both files", err)
	}
}

// TestCompletion: --context completes to the kubeconfig's contexts, -n to
// the namespaces the API server lists for the context on the line, and a
// VMI argument to the VMIs of -n's namespace (or all, with -A), less those
// already named.
func TestCompletion(t *testing.T) {
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	alice := writeContext(t, ctx, c, filepath.Join(dir, "alice"), "alice")
	admin := c.AdminConfig()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["admin"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: caData(admin)}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: admin.BearerToken}
	kc.Contexts["admin"] = &clientcmdapi.Context{Cluster: "admin", AuthInfo: "admin"}
	adminPath := filepath.Join(dir, "admin")
	if err := clientcmd.WriteToFile(*kc, adminPath); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", alice+string(os.PathListSeparator)+adminPath)
	if err := c.InstallVMICRD(ctx); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(admin)
	for _, name := range []string{"vm-a", "vm-b"} {
		vmi := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
			"metadata": map[string]any{"name": name, "namespace": "ns-alice"}, "spec": map[string]any{}}}
		if _, err := dyn.Resource(kubevirt.VMIResource).Namespace("ns-alice").Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--context", ""}, []string{"admin", "alice"}},
		{[]string{"--context", "admin", "-n", ""}, []string{"default", "ns-alice"}},
		{[]string{"--context", "admin", "-n", "ns-alice", "vm-a", ""}, []string{"vm-b"}},
		{[]string{"--context", "admin", "-A", ""}, []string{"vm-a", "vm-b"}},
	} {
		var k cli.KubeFlags
		var all bool
		sub := &cobra.Command{Use: "sub", RunE: func(*cobra.Command, []string) error { return nil }}
		k.Bind(sub.Flags(), "namespace")
		sub.Flags().BoolVarP(&all, "all-namespaces", "A", false, "")
		k.Complete(sub)
		sub.ValidArgsFunction = k.CompleteVMIs(0, &all)
		root := &cobra.Command{Use: "root"}
		root.AddCommand(sub)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append([]string{cobra.ShellCompRequestCmd, "sub"}, tt.args...))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSpace(out.String()), "\n")
		if slices.Contains(tt.args, "vm-a") && slices.Contains(got, "vm-a") {
			t.Errorf("completion of %q offers vm-a again: %q", tt.args, got)
		}
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("completion of %q: %q lacks %q", tt.args, got, w)
			}
		}
	}
}

// TestKubectlFlags: Bind adds kubectl's connection flags (cli-runtime's
// ConfigFlags), and what they say reaches the client configuration;
// -n/--namespace only where the command has a namespace to choose.
func TestKubectlFlags(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", filepath.Join(dir, "none"))
	var k cli.KubeFlags
	cmd := &cobra.Command{Use: "x"}
	k.Bind(cmd.Flags(), "the VMIs' namespace")
	for _, name := range []string{"kubeconfig", "context", "cluster", "user", "server", "token", "as", "as-group",
		"request-timeout", "insecure-skip-tls-verify", "certificate-authority", "namespace"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	if err := cmd.Flags().Parse([]string{"--server=https://10.0.0.1:6443", "--token=abc", "--as=alice",
		"--request-timeout=7s", "--insecure-skip-tls-verify", "-n", "vms"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := k.RESTConfig()
	if err != nil {
		t.Fatalf("with --server and no kubeconfig: %v", err)
	}
	if cfg.Host != "https://10.0.0.1:6443" || cfg.BearerToken != "abc" || cfg.Impersonate.UserName != "alice" ||
		cfg.Timeout != 7*time.Second || !cfg.Insecure {
		t.Errorf("config %+v from the flags", cfg)
	}
	if ns, err := k.ContextNamespace("default"); err != nil || ns != "vms" {
		t.Errorf("namespace %q, %v; want vms", ns, err)
	}

	var agent cli.KubeFlags
	noNS := &cobra.Command{Use: "agent"}
	agent.Bind(noNS.Flags(), "")
	if noNS.Flags().Lookup("namespace") != nil || noNS.Flags().Lookup("kubeconfig") == nil {
		t.Error("without a namespace to choose, -n is bound (or --kubeconfig is not)")
	}
}
