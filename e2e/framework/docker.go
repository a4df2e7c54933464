package framework

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// DemoImage is the demo app's container image: FROM scratch, its only file
// the static /demo-app (`meshlet demo-app` alone, demoapp/cmd/demo-app),
// which is its entrypoint, so a task's args are the demo app's:
//
//	config {
//	  image = "meshlet-e2e/demo-app:latest"
//	  args  = ["counting", "-listen", "127.0.0.1:9001"]
//	}
const DemoImage = "meshlet-e2e/demo-app:latest"

// DemoAppPath is where DemoImage keeps the binary (for alloc exec).
const DemoAppPath = "/demo-app"

var (
	demoOnce sync.Once
	demoBin  string
	demoErr  error
)

// demoAppBinary builds the static demo app once per test binary.
func demoAppBinary() (string, error) {
	demoOnce.Do(func() {
		dir, err := os.MkdirTemp("", "meshlet-e2e-demo-")
		if err != nil {
			demoErr = err
			return
		}
		demoBin = filepath.Join(dir, "demo-app")
		cmd := exec.Command("go", "build", "-o", demoBin, "./demoapp/cmd/demo-app")
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			demoErr = fmt.Errorf("failed to build the static demo app: %w\n%s", err, out)
		}
	})
	return demoBin, demoErr
}

// ImportDemoImage builds the static demo app and imports it into the
// daemon c talks to as ref (DemoImage): no registry is contacted.
func ImportDemoImage(ctx context.Context, c *client.Client, ref string) error {
	bin, err := demoAppBinary()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("failed to read the demo app: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: DemoAppPath[1:], Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	rc, err := c.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref,
		image.ImportOptions{Changes: []string{`ENTRYPOINT ["` + DemoAppPath + `"]`}})
	if err != nil {
		return fmt.Errorf("failed to import %s: %w", ref, err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("failed to import %s: %w", ref, err)
	}
	return nil
}
