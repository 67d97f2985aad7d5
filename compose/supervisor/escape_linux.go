//go:build linux

package supervisor

import (
	"bytes"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// adopt makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): a descendant whose parent
// dies is re-parented to Compose instead of init, so it stays a descendant that Compose can find
// and stop. A goroutine reaps the adopted orphans when they exit. It runs once per process.
var adopt = sync.OnceValue(func() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return err
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ch:
			case <-tick.C:
			}
			reapAdopted()
		}
	}()
	return nil
})

// proc is one line of /proc/<pid>/stat.
type proc struct {
	pid, ppid, pgid int
	zombie          bool
}

// scan lists every process of the system.
func scan() map[int]proc {
	out := map[int]proc{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		out[pid] = proc{pid: pid, ppid: ppid, pgid: pgid, zombie: f[0] == "Z" || f[0] == "X"}
	}
	return out
}

// descendants returns every process below root in all (root excluded), parents first.
func descendants(all map[int]proc, root int) []proc {
	kids := map[int][]proc{}
	for _, p := range all {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, k := range kids[pid] {
			out = append(out, k)
			queue = append(queue, k.pid)
		}
	}
	return out
}

// hasMarker reports whether process pid's environment holds EnvProcess=value (or, with prefix,
// a value that starts with it).
func hasMarker(pid int, value string, prefix bool) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(EnvProcess + "=" + value)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if bytes.Equal(kv, want) || (prefix && bytes.HasPrefix(kv, want)) {
			return true
		}
	}
	return false
}

// escapees lists the live processes that belong to the child name (pid leader) but left its
// process group: its descendants in other groups, and the descendants of Compose that carry
// name's marker outside that group (orphans Compose adopted).
func escapees(name string, leader int) []int {
	self := os.Getpid()
	all := scan()
	seen := map[int]bool{}
	var out []int
	add := func(p proc) {
		if !p.zombie && p.pgid != leader && !seen[p.pid] {
			seen[p.pid] = true
			out = append(out, p.pid)
		}
	}
	for _, p := range descendants(all, leader) {
		add(p)
	}
	want := marker(self, name)
	for _, p := range descendants(all, self) {
		if !seen[p.pid] && p.pgid != leader && hasMarker(p.pid, want, false) {
			add(p)
		}
	}
	return out
}

// reapAdopted waits for the exited orphans Compose adopted; its own children are left to the
// exec.Cmd that waits for them.
func reapAdopted() {
	spawned.Lock()
	defer spawned.Unlock()
	self := os.Getpid()
	all := scan()
	for pid := range spawned.pids {
		if _, ok := all[pid]; !ok {
			delete(spawned.pids, pid) // already reaped by its exec.Cmd
		}
	}
	for _, p := range all {
		if p.ppid == self && p.zombie && !spawned.pids[p.pid] {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// killDescendants sends SIGKILL to every live descendant of this process except the reaper
// (pid keep) and those below it.
func killDescendants(keep int) {
	all := scan()
	skip := map[int]bool{keep: true}
	for _, p := range descendants(all, keep) {
		skip[p.pid] = true
	}
	for _, p := range descendants(all, os.Getpid()) {
		if !skip[p.pid] && !p.zombie {
			_ = unix.Kill(p.pid, unix.SIGKILL)
		}
	}
}

// killMarked sends SIGKILL to every process whose marker says Compose process composePID started
// it (or its ancestor): what the reaper does once Compose is gone, when the orphans it had
// adopted are re-parented away from it.
func killMarked(composePID int) {
	if composePID <= 1 {
		return
	}
	prefix := strconv.Itoa(composePID) + "/"
	for pid, p := range scan() {
		if pid != os.Getpid() && !p.zombie && hasMarker(pid, prefix, true) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
