package supervisor

import (
	"os/exec"
	"runtime"
	"sync"
)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// spawner starts every child from one goroutine locked to its OS thread for the life of the
// process: Linux delivers a child's parent-death signal when the thread that forked it exits,
// so children must never come from a thread the runtime might retire.
var spawner = sync.OnceValue(func() chan spawnRequest {
	ch := make(chan spawnRequest)
	go func() {
		runtime.LockOSThread()
		for r := range ch {
			r.done <- startRecorded(r.cmd.Start, func() int { return r.cmd.Process.Pid })
		}
	}()
	return ch
})

// Spawn starts cmd from the supervisor's dedicated thread, so that a parent-death signal set in
// cmd.SysProcAttr fires only when Compose itself dies.
func Spawn(cmd *exec.Cmd) error {
	r := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawner() <- r
	return <-r.done
}
