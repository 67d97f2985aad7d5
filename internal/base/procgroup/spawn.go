package procgroup

import (
	"os/exec"
	"runtime"
	"sync"
)

// spawnThread runs the functions it is sent on one goroutine locked to its OS thread for the
// life of the process. Linux delivers a child's parent-death signal when the *thread* that
// forked it exits, not the process, and the runtime ends a thread whose locked goroutine exits;
// a child started from this thread gets its signal only when the process itself dies.
var spawnThread = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// OnSpawnThread runs f on the process-lifetime spawn thread and returns when f has returned.
// Start every child whose SysProcAttr sets a parent-death signal from there.
func OnSpawnThread(f func()) {
	done := make(chan struct{})
	spawnThread() <- func() { defer close(done); f() }
	<-done
}

// Start starts cmd on the spawn thread (see OnSpawnThread).
func Start(cmd *exec.Cmd) error {
	var err error
	OnSpawnThread(func() { err = cmd.Start() })
	return err
}
