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

// TestZeroEnvReadsTheProcess: the zero Env reads the variables and the user's home.
func TestZeroEnvReadsTheProcess(t *testing.T) {
	t.Setenv(LibEnv, "/from-env")
	if got := (Env{}).Lib(); got != "/from-env" {
		t.Errorf("Lib() = %q", got)
	}
	t.Setenv(LibEnv, "")
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	if got := (Env{}).Lib(); got != filepath.Join(home, ".iii", "lib") {
		t.Errorf("Lib() = %q", got)
	}
}
