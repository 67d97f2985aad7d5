package wmain

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/workers/wconfig"
)

// TestMain runs a worker command built with Main when the test binary is started with
// WMAIN_TEST_RUN=1 (runCommand); its Setup always fails, so it never dials an engine.
func TestMain(m *testing.M) {
	if os.Getenv("WMAIN_TEST_RUN") == "1" {
		cfg := &struct {
			Port int `yaml:"port" json:"port"`
		}{Port: 1}
		Main{Name: "test", Version: "1.2.3", Config: cfg,
			Setup: func(context.Context, *protocol.Worker, *slog.Logger) (func(), error) {
				return nil, errors.New("no storage here")
			}}.Run(os.LookupEnv)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runCommand runs the worker command with args; it returns its exit code, stdout and stderr.
func runCommand(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "WMAIN_TEST_RUN=1", wconfig.EnvConfig+"=")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("port: 8080\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("port: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		args         []string
		code         int
		stdout, errs string
	}{
		{"version", []string{"-version"}, 0, "1.2.3\n", ""},
		{"check prints the configuration as read", []string{"-config", good, "-check"}, 0, "&{Port:8080}\n", ""},
		{"check keeps the defaults without a file", []string{"-check"}, 0, "&{Port:1}\n", ""},
		{"a bad flag is a usage error", []string{"-frobnicate"}, 2, "", "flag provided but not defined"},
		{"a configuration that does not parse", []string{"-config", bad}, 1, "", "error[CONFIG_INVALID]"},
		{"a missing configuration", []string{"-config", filepath.Join(dir, "none.yaml")}, 1, "", "error[CONFIG_INVALID]: reading the configuration"},
		{"a failed setup", []string{"-config", good}, 1, "", "error[START_FAILED]: no storage here"},
	} {
		code, stdout, stderr := runCommand(t, c.args...)
		if code != c.code || stdout != c.stdout && c.stdout != "" || !strings.Contains(stderr, c.errs) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr holding %q", c.name, code, stdout, stderr, c.code, c.stdout, c.errs)
		}
	}
}
