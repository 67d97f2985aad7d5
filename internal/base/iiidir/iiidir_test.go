package iiidir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLayout(t *testing.T) {
	vars := map[string]string{CacheEnv: "/c", LibEnv: "/l"}
	none := Env{Getenv: func(string) string { return "" }, Home: "/h"}
	set := Env{Getenv: func(k string) string { return vars[k] }, Home: "/h"}
	for _, c := range []struct{ got, want string }{
		{none.Root(), "/h/.iii"},
		{none.Cache(), "/h/.iii/cache"},
		{none.Lib(), "/h/.iii/lib"},
		{set.Cache(), "/c"},
		{set.Lib(), "/l"},
	} {
		if c.got != filepath.FromSlash(c.want) {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestZeroEnvHasNoVariables: the zero Env has no variables, whatever the process's own say (a
// main hands its environment down), and the user's home.
func TestZeroEnvHasNoVariables(t *testing.T) {
	t.Setenv(LibEnv, "/from-env")
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	if got := (Env{}).Lib(); got != filepath.Join(home, ".iii", "lib") {
		t.Errorf("Lib() = %q", got)
	}
}

// TestUnder: every part of ~/.iii is joined below the home directory, in the OS's separators.
func TestUnder(t *testing.T) {
	home := filepath.FromSlash("/home/u")
	for _, c := range []struct {
		part string
		elem []string
		want string
	}{
		{PackagesDir, nil, "/home/u/.iii/compose/packages"},
		{WorkersDir, []string{"vm-1"}, "/home/u/.iii/sandbox/workers/vm-1"},
		{DataDir, []string{"iii-state", "default"}, "/home/u/.iii/data/iii-state/default"},
	} {
		if got := Under(home, c.part, c.elem...); got != filepath.FromSlash(c.want) {
			t.Errorf("Under(%q, %q, %q) = %q, want %q", home, c.part, c.elem, got, filepath.FromSlash(c.want))
		}
	}
}
