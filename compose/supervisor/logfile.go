package supervisor

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Log rotation defaults: a 10 MiB active file and 3 archives (40 MiB per log at most).
const (
	LogMaxBytes = 10 << 20
	LogArchives = 3
)

// EnvLogMaxBytes overrides LogMaxBytes, the size at which a worker's log rotates (a whole
// number of bytes, at least 1024); the tests set it small to rotate quickly.
const EnvLogMaxBytes = "III_COMPOSE_LOG_MAX_BYTES"

// LogMaxBytesOf is the rotation size v ($III_COMPOSE_LOG_MAX_BYTES) names when it is a valid
// one, else LogMaxBytes.
func LogMaxBytesOf(v string) int64 {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 1024 {
		return n
	}
	return LogMaxBytes
}

// GenSuffix names the file beside a log that holds the generation of its active file: the
// number of rotations so far. path.1 holds generation N-1, path.2 N-2 and so on, so that a
// reader's cursor {generation, offset} survives rotation.
const GenSuffix = ".gen"

// rotations serializes, per log path within this process, a rotation against a reader that
// opens the set of generations (see openGenerations).
var rotations sync.Map // path -> *sync.RWMutex

func rotationLock(path string) *sync.RWMutex {
	m, _ := rotations.LoadOrStore(path, &sync.RWMutex{})
	return m.(*sync.RWMutex)
}

// readGen returns the generation recorded beside path (0 when there is none).
func readGen(path string) int64 {
	b, err := os.ReadFile(path + GenSuffix)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// RotatingLog appends to an owner-only file; a write that would take it past its size limit
// first shifts path.1 .. path.N-1 to path.2 .. path.N (dropping the oldest), moves the active
// file to path.1 and counts one more generation in path.gen.
type RotatingLog struct {
	path string
	max  int64
	keep int

	mu   sync.Mutex
	f    *os.File
	size int64
	gen  int64
}

// OpenLog opens path for appending with the given limits.
func OpenLog(path string, maxBytes int64, keep int) (*RotatingLog, error) {
	l := &RotatingLog{path: path, max: maxBytes, keep: keep, gen: readGen(path)}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *RotatingLog) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Write appends b, rotating first when b would not fit.
func (l *RotatingLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	if l.size > 0 && l.size+int64(len(b)) > l.max {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	return n, err
}

func (l *RotatingLog) rotate() error {
	lk := rotationLock(l.path)
	lk.Lock()
	defer lk.Unlock()
	if err := l.f.Close(); err != nil {
		return err
	}
	l.f = nil
	for i := l.keep - 1; i >= 1; i-- {
		from, to := fmt.Sprintf("%s.%d", l.path, i), fmt.Sprintf("%s.%d", l.path, i+1)
		if _, err := os.Stat(from); err == nil {
			if err := os.Rename(from, to); err != nil {
				return err
			}
		}
	}
	if l.keep > 0 {
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return err
		}
	} else if err := os.Remove(l.path); err != nil {
		return err
	}
	l.gen++
	tmp := l.path + GenSuffix + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(l.gen, 10)+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.path+GenSuffix); err != nil {
		return err
	}
	return l.open()
}

// Close closes the active file.
func (l *RotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
