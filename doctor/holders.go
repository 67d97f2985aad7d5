package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Holder is a running process that holds a path open, executes it or works in it.
type Holder struct {
	PID  int
	Name string // the command name (/proc/<pid>/comm)
	How  string // "open file", "executable" or "working directory"
	Path string // what it holds
}

// String names the process and what it holds.
func (h Holder) String() string {
	return fmt.Sprintf("process %d (%s) has %s as its %s", h.PID, h.Name, h.Path, h.How)
}

// canScan reports whether this OS lets holders look (Linux /proc).
func canScan() bool { return runtime.GOOS == "linux" }

// holders returns, for each of paths, the processes other than this one whose open files,
// executable or working directory is the path or lies under it, from /proc/*/fd, /proc/*/exe and
// /proc/*/cwd. Processes it may not inspect (other users') are skipped.
func holders(procRoot string, paths []string) map[string][]Holder {
	out := map[string][]Holder{}
	if len(paths) == 0 {
		return out
	}
	type target struct{ orig, clean string }
	var targets []target
	for _, p := range paths {
		c := filepath.Clean(p)
		targets = append(targets, target{p, c})
		if r, err := filepath.EvalSymlinks(c); err == nil && r != c {
			targets = append(targets, target{p, r})
		}
	}
	match := func(link string) []string {
		link = strings.TrimSuffix(link, " (deleted)")
		var hit []string
		for _, t := range targets {
			if link == t.clean || strings.HasPrefix(link, t.clean+string(filepath.Separator)) {
				hit = append(hit, t.orig)
			}
		}
		return hit
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return out
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		name := ""
		if b, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
			name = strings.TrimSpace(string(b))
		}
		seen := map[string]bool{}
		record := func(link, how string) {
			for _, p := range match(link) {
				if key := p + "\x00" + how; !seen[key] {
					seen[key] = true
					out[p] = append(out[p], Holder{PID: pid, Name: name, How: how, Path: strings.TrimSuffix(link, " (deleted)")})
				}
			}
		}
		if l, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
			record(l, "executable")
		}
		if l, err := os.Readlink(filepath.Join(dir, "cwd")); err == nil {
			record(l, "working directory")
		}
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && strings.HasPrefix(l, "/") {
				record(l, "open file")
			}
		}
	}
	return out
}
