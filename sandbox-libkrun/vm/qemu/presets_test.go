//go:build linux

package qemu

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/image/debimage"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestPresets runs each preset image's interpreter when the image is in the cache
// (`go tool mage images` puts it there).
func TestPresets(t *testing.T) {
	d := newDriver(t)
	cache := image.NewCache(image.DefaultDir(os.Getenv))
	cmds := map[string][]string{
		"python": {"python3", "-c", "import json; print(json.dumps([1]))"},
		"node":   {"node", "-e", "console.log(JSON.stringify([1]))"},
	}
	for _, p := range debimage.Presets {
		t.Run(p.Name, func(t *testing.T) {
			root, ok := cache.RootFS(p.Ref)
			if !ok {
				cannotRun(t, fmt.Sprintf("image %s not in the cache %s; build it with `go tool mage images`", p.Ref, cache.Dir))
			}
			m := boot(t, d, vm.Spec{RootFS: root})
			start := time.Now()
			res := run(t, m, vm.ExecRequest{Argv: cmds[p.Name], Timeout: 60 * time.Second})
			t.Logf("%s took %s", strings.Join(cmds[p.Name], " "), time.Since(start).Round(time.Millisecond))
			if code(res) != 0 || strings.TrimSpace(string(res.Stdout)) != "[1]" {
				t.Fatalf("exit %d stdout %q stderr %q", code(res), res.Stdout, res.Stderr)
			}
		})
	}
}
