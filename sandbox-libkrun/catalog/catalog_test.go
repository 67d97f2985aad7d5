package catalog

import (
	"testing"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
)

func TestLookup(t *testing.T) {
	s := settings.Defaults()
	s.CustomImages = map[string]string{"tools": "docker.io/x/tools:1", "listed": "docker.io/x/listed:1"}
	s.ImageAllowlist = []string{"node", "listed", "ghost"}
	c := New(s)
	if img, err := c.Lookup("listed"); err != nil || img.OCIRef != "docker.io/x/listed:1" || img.Kind != KindCustom {
		t.Fatalf("listed: %+v %v", img, err)
	}
	if img, err := c.Lookup("node"); err != nil || img.OCIRef != "docker.io/iiidev/node:latest" || img.Kind != KindPreset {
		t.Fatalf("node: %+v %v", img, err)
	}
	for _, name := range []string{"python", "tools", "ghost", ""} {
		_, err := c.Lookup(name)
		if e, ok := scode.As(err); !ok || e.Code != scode.S100 {
			t.Fatalf("%q: want S100, got %v", name, err)
		}
	}
	if l := c.List(); len(l) != 4 || l[0].Name != "python" || l[1].Name != "node" || l[2].Name != "listed" || l[3].Name != "tools" {
		t.Fatalf("list %+v", l)
	}
	if _, err := New(settings.Defaults()).Lookup("python"); err == nil {
		t.Fatal("an empty allowlist must deny every image")
	}
}
