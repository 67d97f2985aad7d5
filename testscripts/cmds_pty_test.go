//go:build unix

package testscripts

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/iii-go/iii/engine/enginetest"
	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/term"
)

func init() {
	registerCmd("pty", cmdPty)
}

// ptyEnv are the variables of the script a program under `pty start` gets.
var ptyEnv = []string{"PATH", "HOME", "USER", "TMPDIR", "LANG", "III_URL", "III_TOKEN_FILE", "III_TOKEN",
	"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"}

// ptySession is a program running on a pseudo-terminal of the script: what it wrote (the
// screen, as raw bytes), where the last `pty wait` matched, and the terminal's modes at start.
type ptySession struct {
	ptmx, tty *os.File
	cmd       *exec.Cmd
	before    term.State
	done      chan struct{}
	waitErr   error

	mu     sync.Mutex
	screen bytes.Buffer
	at     int
}

var ptySessions sync.Map // *testscript.TestScript + name -> *ptySession

type ptyKey struct {
	ts   *testscript.TestScript
	name string
}

// pty start [-rows=24] [-cols=80] NAME PROG [ARG...] | pty send NAME TEXT | pty wait
// [-timeout=30s] NAME REGEXP | pty resize NAME ROWS COLS | pty exit [-timeout=30s] NAME CODE.
// A person at a terminal: start runs PROG (looked up on the script's PATH) as the session leader
// of a new pty with the script's variables of ptyEnv and TERM=xterm-256color; send types TEXT
// (Go escapes: \r is Enter, \x03 Ctrl-C); wait waits until the screen, after the previous match,
// matches REGEXP; resize changes the window size (the program gets SIGWINCH); exit waits for PROG
// to end with exit code CODE and checks the terminal's modes are those it started with.
func cmdPty(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: pty start|send|wait|resize|exit NAME ...")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "start":
		ptyStart(ts, rest)
		return
	}
	fs := flag.NewFlagSet("pty "+sub, flag.ContinueOnError)
	d := fs.Duration("timeout", 30*time.Second, "")
	if fs.Parse(rest) != nil || fs.NArg() < 1 {
		ts.Fatalf("usage: pty %s [-timeout=D] NAME ...", sub)
	}
	v, ok := ptySessions.Load(ptyKey{ts, fs.Arg(0)})
	if !ok {
		ts.Fatalf("pty %s: no session %s (pty start it first)", sub, fs.Arg(0))
	}
	s, a := v.(*ptySession), fs.Args()[1:]
	switch {
	case sub == "send" && len(a) == 1:
		text, err := strconv.Unquote(`"` + strings.ReplaceAll(a[0], `"`, `\"`) + `"`)
		if err != nil {
			ts.Fatalf("pty send: %q: %v", a[0], err)
		}
		_, err = s.ptmx.Write([]byte(text))
		ts.Check(err)
	case sub == "wait" && len(a) == 1:
		re, err := regexp.Compile(a[0])
		if err != nil {
			ts.Fatalf("pty wait: %v", err)
		}
		if !enginetest.Poll(*d, func() bool { return s.match(re) }) {
			ts.Fatalf("pty wait: the screen does not match %s after %v; since the last match it shows %q", a[0], *d, s.rest())
		}
	case sub == "resize" && len(a) == 2:
		rows, err1 := strconv.Atoi(a[0])
		cols, err2 := strconv.Atoi(a[1])
		if err1 != nil || err2 != nil {
			ts.Fatalf("usage: pty resize NAME ROWS COLS")
		}
		ts.Check(pty.Setsize(s.ptmx, &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols)}))
	case sub == "exit" && len(a) == 1:
		want, err := strconv.Atoi(a[0])
		if err != nil {
			ts.Fatalf("usage: pty exit [-timeout=D] NAME CODE")
		}
		select {
		case <-s.done:
		case <-time.After(*d):
			ts.Fatalf("pty exit: %s still runs after %v; the screen shows %q", fs.Arg(0), *d, s.rest())
		}
		var ee *exec.ExitError
		if s.waitErr != nil && !errors.As(s.waitErr, &ee) {
			ts.Fatalf("pty exit: %v", s.waitErr)
		}
		if got := s.cmd.ProcessState.ExitCode(); got != want {
			ts.Fatalf("pty exit: %s exited %d, want %d; the screen shows %q", fs.Arg(0), got, want, s.rest())
		}
		after, err := term.GetState(int(s.tty.Fd()))
		ts.Check(err)
		if *after != s.before {
			ts.Fatalf("pty exit: %s left the terminal's modes changed", fs.Arg(0))
		}
		fmt.Fprintf(ts.Stdout(), "%s exited %d, terminal modes as before\n", fs.Arg(0), want)
	default:
		ts.Fatalf("usage: pty start|send|wait|resize|exit NAME ...")
	}
}

func ptyStart(ts *testscript.TestScript, args []string) {
	fs := flag.NewFlagSet("pty start", flag.ContinueOnError)
	rows := fs.Int("rows", 24, "")
	cols := fs.Int("cols", 80, "")
	if fs.Parse(args) != nil || fs.NArg() < 2 {
		ts.Fatalf("usage: pty start [-rows=R] [-cols=C] NAME PROG [ARG...]")
	}
	name, prog := fs.Arg(0), fs.Arg(1)
	if _, dup := ptySessions.Load(ptyKey{ts, name}); dup {
		ts.Fatalf("pty start: session %s exists", name)
	}
	path := ""
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if st, err := os.Stat(filepath.Join(dir, prog)); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			path = filepath.Join(dir, prog)
			break
		}
	}
	if path == "" {
		ts.Fatalf("pty start: %s is not on the script's PATH", prog)
	}
	ptmx, tty, err := pty.Open()
	ts.Check(err)
	ts.Check(pty.Setsize(ptmx, &pty.Winsize{Rows: uint16(*rows), Cols: uint16(*cols)}))
	before, err := term.GetState(int(tty.Fd()))
	ts.Check(err)
	cmd := exec.Command(path, fs.Args()[2:]...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = []string{"TERM=xterm-256color"}
	for _, k := range ptyEnv {
		if v := ts.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	ts.Check(cmd.Start())
	s := &ptySession{ptmx: ptmx, tty: tty, cmd: cmd, before: *before, done: make(chan struct{})}
	ptySessions.Store(ptyKey{ts, name}, s)
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			s.mu.Lock()
			s.screen.Write(b[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	ts.Defer(func() {
		_ = cmd.Process.Kill()
		<-s.done
		ptmx.Close()
		tty.Close()
		ptySessions.Delete(ptyKey{ts, name})
	})
}

// match reports whether the screen after the previous match matches re, and moves past it.
func (s *ptySession) match(re *regexp.Regexp) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	loc := re.FindIndex(s.screen.Bytes()[s.at:])
	if loc == nil {
		return false
	}
	s.at += loc[1]
	return true
}

func (s *ptySession) rest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.screen.Bytes()[s.at:])
}
