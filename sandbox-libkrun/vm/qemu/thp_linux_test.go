package qemu

import (
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// thpEnabled starts sh with start and returns the THP_enabled line of its /proc status.
func thpEnabled(t *testing.T, start func(*exec.Cmd) error) string {
	t.Helper()
	var out strings.Builder
	cmd := exec.Command("sh", "-c", "grep THP_enabled /proc/self/status || true")
	cmd.Stdout = &out
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(out.String()), " ")
}

// A restore's qemu starts with transparent huge pages off (through exec), any other child with
// the host's setting, and the driver's own process keeps its setting.
func TestStartWithoutHugePages(t *testing.T) {
	if got := thpEnabled(t, startCmd); got == "" {
		t.Skip("this kernel reports no THP_enabled in /proc/<pid>/status (Linux 5.0 or later does)")
	}
	if got := thpEnabled(t, startWithoutHugePages); got != "THP_enabled: 0" {
		t.Fatalf("a restore's child: %q, want THP_enabled: 0", got)
	}
	if got := thpEnabled(t, startCmd); got != "THP_enabled: 1" {
		t.Fatalf("a child started after it: %q, want THP_enabled: 1", got)
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_THP_DISABLE, 0, 0, 0, 0); err != nil || v != 0 {
		t.Fatalf("the driver's process after a start: PR_GET_THP_DISABLE %d %v, want 0", v, err)
	}
}
