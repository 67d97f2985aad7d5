package procgroup

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A child started through Start keeps running when the goroutine that asked for it ends with its
// thread; one started straight from that thread gets its parent-death signal.
func TestStartSurvivesCallerThread(t *testing.T) {
	sleeper := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	direct, viaStart := sleeper(), sleeper()
	for {
		// The runtime ends a thread whose locked goroutine returns, except the main thread.
		onMain, errs := make(chan bool, 1), make(chan error, 2)
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				runtime.UnlockOSThread()
				onMain <- true
				return
			}
			onMain <- false
			errs <- direct.Start()
			errs <- Start(viaStart)
		}()
		if <-onMain {
			continue
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		break
	}
	t.Cleanup(func() { _ = viaStart.Process.Kill(); _ = viaStart.Wait() })
	exited := make(chan error, 1)
	go func() { exited <- direct.Wait() }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = direct.Process.Kill()
		t.Fatal("the child started from the ended thread got no parent-death signal within 10s")
	}
	if err := viaStart.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child started through Start died with the caller's thread: %v", err)
	}
}
