//go:build linux

package sandboxcli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/protocol/processtest"
)

// runAsIII makes the test binary `iii sandbox` when a test starts it with this variable set, so
// the shell runs as its own process on a real terminal.
const runAsIII = "SANDBOXCLI_TEST_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsIII) == "1" {
		os.Exit(Run(os.Args[1:], os.Getenv, IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	os.Exit(m.Run())
}

// session is `iii sandbox ARGS` running on a pty.
type session struct {
	t    *testing.T
	ptmx *os.File
	tty  *os.File
	cmd  *exec.Cmd

	mu     sync.Mutex
	screen bytes.Buffer
}

func startSession(t *testing.T, rows, cols uint16, args ...string) *session {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runAsIII+"=1", "TERM=xterm-test")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	s := &session{t: t, ptmx: ptmx, tty: tty, cmd: cmd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
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
	return s
}

func (s *session) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.screen.String()
}

// waitFor waits until the screen shows want after what it showed at from (a length of text).
func (s *session) waitFor(from int, want string) int {
	s.t.Helper()
	var txt string
	at := -1
	if !enginetest.Poll(15*time.Second, func() bool {
		txt = s.text()
		at = strings.Index(txt[from:], want)
		return at >= 0
	}) {
		s.t.Fatalf("the screen does not show %q; it shows %q", want, txt)
	}
	return from + at + len(want)
}

func (s *session) typ(keys string) {
	s.t.Helper()
	if _, err := s.ptmx.Write([]byte(keys)); err != nil {
		s.t.Fatal(err)
	}
}

// exit waits for iii to end and returns its exit code.
func (s *session) exit() int {
	s.t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			s.t.Fatal(err)
		}
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(15 * time.Second):
		s.t.Fatalf("iii did not exit; the screen shows %q", s.text())
		return 0
	}
}

func termios(t *testing.T, f *os.File) unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return *tio
}

// The terminal is raw during the session (no local echo, no line editing, Ctrl-C a byte) and
// exactly as before once iii exits.
func checkModes(t *testing.T, before, during, after unix.Termios) {
	t.Helper()
	if during.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("the terminal was not raw during the session: lflag %#x", during.Lflag)
	}
	if before != after {
		t.Errorf("the terminal's modes were not restored:\nbefore %+v\nafter  %+v", before, after)
	}
}

// A person's session: `iii sandbox shell SANDBOX_ID` on a real terminal shows the shell's
// screen, follows a window resize, passes TERM, and exits with the shell's exit code, the
// terminal restored.
func TestShellOnATerminal(t *testing.T) {
	fake := processtest.Start(t, map[string]processtest.Program{"sh": processtest.Shell}, "sb-1")
	s := startSession(t, 30, 100, "shell", "sb-1", "--engine", fake.URL)
	before := termios(t, s.tty)
	at := s.waitFor(0, "$ ")
	during := termios(t, s.tty)

	s.typ("echo hi\r")
	at = s.waitFor(at, "echo hi\r\nhi\r\n$ ")
	s.typ("printenv TERM\r")
	at = s.waitFor(at, "xterm-test\r\n")
	s.typ("stty size\r")
	at = s.waitFor(at, "30 100\r\n")

	if err := pty.Setsize(s.ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	// The resize travels as a signal and a message; ask until the shell sees it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		from := at
		s.typ("stty size\r")
		at = s.waitFor(s.waitFor(at, "stty size\r\n"), "\r\n$ ")
		if strings.Contains(s.text()[from:at], "40 120\r\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resize never reached the shell: %q", s.text()[from:])
		}
	}

	s.typ("exit 3\r")
	if code := s.exit(); code != 3 {
		t.Fatalf("exit code %d, want 3; screen %q", code, s.text())
	}
	checkModes(t, before, during, termios(t, s.tty))
	if got := fake.Stopped(); len(got) != 0 {
		t.Errorf("a shell in an existing sandbox stopped it: %v", got)
	}
}

// --image creates the sandbox and stops it when iii ends, here on a SIGTERM to iii: the terminal
// is restored and the exit code is 128+15.
func TestShellImageStoppedOnSignal(t *testing.T) {
	fake := processtest.Start(t, map[string]processtest.Program{"sh": processtest.Shell})
	s := startSession(t, 24, 80, "shell", "--image", "python", "--engine", fake.URL)
	before := termios(t, s.tty)
	s.waitFor(s.waitFor(0, "created; it stops when this shell ends"), "$ ")
	during := termios(t, s.tty)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.exit(); code != 128+15 {
		t.Fatalf("exit code %d, want 143; screen %q", code, s.text())
	}
	checkModes(t, before, during, termios(t, s.tty))
	created := fake.Created()
	if len(created) != 1 || created[0]["image"] != "python" {
		t.Fatalf("created %v", created)
	}
	if got := fake.Stopped(); len(got) != 1 || got[0] != "sb-1" {
		t.Fatalf("stopped %v, want the created sandbox", got)
	}
}

// The engine going away ends the session with an error, the terminal restored; --keep leaves
// the created sandbox alone.
func TestShellEngineGone(t *testing.T) {
	fake := processtest.Start(t, map[string]processtest.Program{"sh": processtest.Shell})
	s := startSession(t, 24, 80, "shell", "--image", "node", "--keep", "--engine", fake.URL)
	before := termios(t, s.tty)
	s.waitFor(s.waitFor(0, "keeps running after this shell"), "$ ")
	during := termios(t, s.tty)
	fake.Close()
	if code := s.exit(); code != 1 {
		t.Fatalf("exit code %d, want 1; screen %q", code, s.text())
	}
	s.waitFor(0, "error[CALL_FAILED]: shell p")
	checkModes(t, before, during, termios(t, s.tty))
	if got := fake.Stopped(); len(got) != 0 {
		t.Errorf("--keep: stopped %v", got)
	}
}

// Without a terminal on stdin, shell is a usage error and leaves the engine alone.
func TestShellNeedsATerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var out, errb bytes.Buffer
	code := Run([]string{"shell", "sb-1", "--engine", "ws://127.0.0.1:1"}, func(string) string { return "" }, IO{Stdin: null, Stdout: &out, Stderr: &errb})
	if code != 2 || !strings.HasPrefix(errb.String(), "error[USAGE]: `iii sandbox shell` needs a terminal on stdin") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// SIGINT to `iii sandbox exec` goes on to the command, whose end (killed by it) gives 130.
func TestExecForwardsSignals(t *testing.T) {
	started := make(chan struct{})
	fake := processtest.Start(t, map[string]processtest.Program{"srv": func(p *processtest.Proc) protocol.ProcessExit {
		close(started)
		return processtest.Killed(<-p.Signals)
	}}, "sb-1")
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		done <- Run([]string{"exec", "sb-1", "--engine", fake.URL, "--", "srv"}, func(string) string { return "" }, IO{Stdin: null, Stdout: io.Discard, Stderr: &errb})
	}()
	<-started // exec has caught the signals before it started the process
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 130 {
			t.Fatalf("exit %d, want 130; stderr %q", code, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("exec did not end after SIGINT")
	}
}
