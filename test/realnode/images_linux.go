// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// busyboxPath is Debian's static busybox (package busybox-static).
const busyboxPath = "/bin/busybox"

// pauseImage builds test/realnode/pause static and packs it.
func pauseImage(ctx context.Context, dir string) (Image, error) {
	bin := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/hpmount/hpmount/test/realnode/pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("build pause: %w\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return Image{}, fmt.Errorf("read pause binary: %w", err)
	}
	return Image{Name: PauseImage, Entrypoint: []string{"/pause"},
		Files: []File{{Path: "pause", Data: data, Mode: 0o755}}}, nil
}

// busyboxImage packs busybox with a link in /bin for every applet, so
// `sh`, `df` and `dd` run as themselves; its command sleeps forever.
func busyboxImage(ctx context.Context) (Image, error) {
	data, err := os.ReadFile(busyboxPath)
	if err != nil {
		return Image{}, fmt.Errorf("read %q (package busybox-static): %w", busyboxPath, err)
	}
	out, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return Image{}, fmt.Errorf("%s --list: %w", busyboxPath, err)
	}
	img := Image{Name: BusyboxImage, Cmd: []string{"/bin/sleep", "infinity"}, Files: []File{
		{Path: "bin/", Dir: true, Mode: 0o755},
		{Path: "tmp/", Dir: true, Mode: 0o1777},
		{Path: "bin/busybox", Data: data, Mode: 0o755},
	}}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			img.Files = append(img.Files, File{Path: "bin/" + applet, Link: "busybox", Mode: 0o777})
		}
	}
	return img, nil
}

// importImage packs img into dir and imports it into containerd's k8s.io
// namespace, where the CRI plugin finds it.
func importImage(ctx context.Context, socket, dir string, img Image) error {
	var buf bytes.Buffer
	if err := WriteOCI(&buf, img); err != nil {
		return err
	}
	path := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.Name)+".tar")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write image tar %q: %w", path, err)
	}
	out, err := exec.CommandContext(ctx, "ctr", "--address", socket, "-n", "k8s.io",
		"images", "import", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %q: %w\n%s", path, err, out)
	}
	return nil
}
