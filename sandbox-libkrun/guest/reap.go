//go:build linux

package main

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// reapOrphans collects the zombies of processes orphaned onto PID 1 (the agent), such as a
// command's background children. Children the agent started itself are left to their exec.Cmd:
// they are in a.children from before they can exit until their Wait returns.
func (a *agent) reapOrphans() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGCHLD)
	tick := time.NewTicker(5 * time.Second)
	for {
		select {
		case <-ch:
		case <-tick.C:
		}
		a.reapOnce()
	}
}

func (a *agent) reapOnce() {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	a.spawnMu.Lock()
	defer a.spawnMu.Unlock()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || a.children[pid] {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may contain spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] != "Z" || f[1] != "1" {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}
