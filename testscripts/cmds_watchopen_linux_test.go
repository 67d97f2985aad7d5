package testscripts

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

func init() {
	registerCmd("watchopen", cmdWatchOpen)
}

// openWatch is one running `watchopen start`: an inotify descriptor watching a set of trees for
// opens and reads, and the paths it saw.
type openWatch struct {
	f        *os.File
	home     string
	sentinel string // a directory of its own, opened by stop: once its event is read, every earlier one was
	mu       sync.Mutex
	dirs     map[int32]string
	seen     map[string]bool
	synced   chan struct{}
	done     chan struct{}
}

var (
	watchMu sync.Mutex
	watches = map[*testscript.TestScript]*openWatch{}
)

// watchopen start PATH... | watchopen stop FILE: from `start` on, record every open or read of
// a file or directory in the trees PATH... (inotify IN_OPEN and IN_ACCESS on each directory of
// each tree, and on a PATH that is a file); `stop` ends the watch and writes what was opened,
// one path a line relative to $HOME, sorted, to FILE (empty when nothing was). For the claim
// that nothing reads the paths 0.25 left under ~/.iii (composerun/old_paths_never_opened).
func cmdWatchOpen(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || (args[0] != "start" && args[0] != "stop") || (args[0] == "stop" && len(args) != 2) {
		ts.Fatalf("usage: watchopen start PATH... | watchopen stop FILE")
	}
	watchMu.Lock()
	w := watches[ts]
	watchMu.Unlock()
	if args[0] == "stop" {
		if w == nil {
			ts.Fatalf("watchopen stop: no watch was started")
		}
		watchMu.Lock()
		delete(watches, ts)
		watchMu.Unlock()
		seen := w.stop()
		out := ""
		if len(seen) > 0 {
			out = strings.Join(seen, "\n") + "\n"
		}
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(out), 0o644))
		return
	}
	if w != nil {
		ts.Fatalf("watchopen start: a watch is already running")
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	ts.Check(err)
	w = &openWatch{f: os.NewFile(uintptr(fd), "inotify"), home: ts.Getenv("HOME"), dirs: map[int32]string{},
		seen: map[string]bool{}, synced: make(chan struct{}), done: make(chan struct{})}
	sentinel, err := os.MkdirTemp("", "watchopen-")
	ts.Check(err)
	ts.Defer(func() { os.Remove(sentinel) })
	wd, err := unix.InotifyAddWatch(fd, sentinel, unix.IN_OPEN)
	ts.Check(err)
	w.sentinel = sentinel
	w.dirs[int32(wd)] = sentinel
	// Every path is found before the first watch is added: the walk's own reads of a watched
	// directory would be recorded otherwise.
	var paths []string
	for _, p := range args[1:] {
		root := ts.MkAbs(p)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || path == root {
				paths = append(paths, path)
			}
			return nil
		})
		if err != nil {
			w.f.Close()
			ts.Fatalf("watchopen start: %v", err)
		}
	}
	for _, path := range paths {
		wd, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_ACCESS|unix.IN_DONT_FOLLOW)
		if err != nil {
			w.f.Close()
			ts.Fatalf("watchopen start: watching %s: %v", path, err)
		}
		w.dirs[int32(wd)] = path
	}
	go w.read()
	watchMu.Lock()
	watches[ts] = w
	watchMu.Unlock()
	ts.Defer(func() {
		watchMu.Lock()
		defer watchMu.Unlock()
		if watches[ts] == w {
			delete(watches, ts)
			w.stop()
		}
	})
}

// read collects events until the descriptor is closed.
func (w *openWatch) read() {
	defer close(w.done)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil || n <= 0 {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				name = strings.TrimRight(string(raw), "\x00")
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&(unix.IN_OPEN|unix.IN_ACCESS) == 0 {
				continue
			}
			w.mu.Lock()
			p := filepath.Join(w.dirs[ev.Wd], name)
			if p == w.sentinel {
				w.mu.Unlock()
				close(w.synced)
				continue
			}
			if rel, err := filepath.Rel(w.home, p); err == nil {
				p = rel
			}
			w.seen[p] = true
			w.mu.Unlock()
		}
	}
}

// stop closes the watch and returns the paths seen, sorted.
func (w *openWatch) stop() []string {
	if d, err := os.Open(w.sentinel); err == nil {
		d.Close()
		select {
		case <-w.synced:
		case <-time.After(10 * time.Second):
		}
	}
	w.f.Close()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.seen))
	for p := range w.seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
