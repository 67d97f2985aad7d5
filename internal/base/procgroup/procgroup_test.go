package procgroup

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
)

func TestSignalEndsTheGroupAndAliveSeesIt(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("process groups are a unix notion; Windows is covered by cross-compilation only")
	}
	if !Alive(os.Getpid()) {
		t.Fatal("Alive(own pid) = false")
	}
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = Attr(true)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := Signal(cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("child exited cleanly after SIGKILL to its group")
	}
	if Alive(cmd.Process.Pid) {
		t.Fatal("reaped child still reported alive")
	}
}
