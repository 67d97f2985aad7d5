package magetargets

import (
	"bufio"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPlatforms: the adapter's module is vetted for the three targets it ships for, every other
// module (the workers, and the libraries inside iii) for all six GOOS/GOARCH pairs of iii.
func TestPlatforms(t *testing.T) {
	all := []osArch{{"darwin", "arm64"}, {"darwin", "amd64"}, {"linux", "amd64"}, {"linux", "arm64"}, {"windows", "amd64"}, {"windows", "arm64"}}
	want := map[string][]osArch{
		".": all, "internal/base": all, "engine": all, "compose": all, "updater": all, "workers": all,
		"sandbox-libkrun": {{"darwin", "arm64"}, {"linux", "amd64"}, {"linux", "arm64"}},
	}
	for _, m := range modules {
		if d := cmp.Diff(want[m], platforms(m)); d != "" {
			t.Errorf("platforms(%q) (-want +got):\n%s", m, d)
		}
	}
}

func TestModuleOf(t *testing.T) {
	for pkg, want := range map[string]string{".": ".", "./workers/cmd/http": "workers", "./sandbox-libkrun": "sandbox-libkrun", "./internal/demo": ".", "./internal/base/errcode": "internal/base", "./enginex": "."} {
		if got := moduleOf(pkg); got != want {
			t.Errorf("moduleOf(%q) = %q, want %q", pkg, got, want)
		}
	}
}

// TestModulesAreGoWork: the mage targets walk every module go.work lists, the root first.
func TestModulesAreGoWork(t *testing.T) {
	want := []string{".", "compose", "engine", "internal/base", "sandbox-libkrun", "updater", "workers"}
	if d := cmp.Diff(want, modules); d != "" {
		t.Errorf("modules (-want +got):\n%s", d)
	}
	got, err := parseUses(bufio.NewScanner(strings.NewReader("go 1.26.0\n\nuse ./engine // the engine\nuse (\n\t./compose\n\t.\n)\n")))
	if d := cmp.Diff([]string{".", "engine", "compose"}, got); err != nil || d != "" {
		t.Errorf("parseUses: %v (-want +got):\n%s", err, d)
	}
}
