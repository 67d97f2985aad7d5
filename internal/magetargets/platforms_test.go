package magetargets

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPlatforms: the adapter's module is vetted for the three targets it ships for, every other
// module (the workers, and the libraries inside iii) for all six GOOS/GOARCH pairs of iii.
func TestPlatforms(t *testing.T) {
	all := []osArch{{"darwin", "arm64"}, {"darwin", "amd64"}, {"linux", "amd64"}, {"linux", "arm64"}, {"windows", "amd64"}, {"windows", "arm64"}}
	want := map[string][]osArch{
		".": all, "engine": all, "compose": all, "updater": all, "workers": all,
		"sandbox-libkrun": {{"darwin", "arm64"}, {"linux", "amd64"}, {"linux", "arm64"}},
	}
	for _, m := range modules {
		if d := cmp.Diff(want[m], platforms(m)); d != "" {
			t.Errorf("platforms(%q) (-want +got):\n%s", m, d)
		}
	}
}

func TestModuleOf(t *testing.T) {
	for pkg, want := range map[string]string{".": ".", "./workers/cmd/http": "workers", "./sandbox-libkrun": "sandbox-libkrun", "./internal/demo": ".", "./enginex": "."} {
		if got := moduleOf(pkg); got != want {
			t.Errorf("moduleOf(%q) = %q, want %q", pkg, got, want)
		}
	}
}
