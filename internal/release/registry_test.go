package release

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/iii-go/iii/compose/registry"
)

// The registry step publishes each worker with the compatibility table of the iii lines it
// serves, so iii's own pins resolve to this build.
func TestPublishWorkersWritesTheCompatibilityTable(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	tg, _ := FindTarget("x86_64-unknown-linux-gnu")
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var assets []Asset
	for _, p := range Products {
		if !p.Worker {
			continue
		}
		a, err := PackageBinary(dir, p.Name, "0.1.0", tg, bin)
		if err != nil {
			t.Fatal(err)
		}
		assets = append(assets, a)
	}
	if err := PublishWorkers(filepath.Join("..", ".."), out, dir, assets, io.Discard); err != nil {
		t.Fatal(err)
	}
	c, err := registry.New(out)
	if err != nil {
		t.Fatal(err)
	}
	// iii 0.26's own fixture pins.
	for name, pin := range map[string]string{"state": "0.22.2", "http": "0.21.3", "pubsub": "0.21.2", "cron": "0.21.9", "queue": "0.21.5"} {
		v, line, err := c.Resolve(context.Background(), name, pin)
		if err != nil || line == nil || v.Version != "0.1.0" {
			t.Errorf("%s %s: %v %+v %v", name, pin, v, line, err)
		}
	}
	ix, err := c.Index(context.Background(), "stream")
	if err != nil || len(ix.Compat) != 0 {
		t.Errorf("stream, which iii does not publish as a package, has a compatibility table: %+v %v", ix, err)
	}
	if err := PublishWorkers(filepath.Join("..", ".."), out, dir, assets[:1], io.Discard); err == nil {
		t.Error("a release missing worker archives was published")
	}
}
