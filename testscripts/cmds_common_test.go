package testscripts

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/enginetest"
)

func init() {
	registerCmd("waitfile", cmdWaitFile)
	registerCmd("waitport", cmdWaitPort)
	registerCmd("freeport", cmdFreePort)
	registerCmd("json", cmdJSON)
	registerCmd("jsonenv", cmdJSONEnv)
	registerCmd("waitgone", cmdWaitGone)
	registerCmd("install", cmdInstall)
}

// install SRC DST: cp of one file, its mode kept, written as writeProgram writes. Scenarios use
// it, not cp, for a program that something runs afterwards.
func cmdInstall(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: install SRC DST")
	}
	src := ts.MkAbs(args[0])
	st, err := os.Stat(src)
	ts.Check(err)
	b, err := os.ReadFile(src)
	ts.Check(err)
	ts.Check(writeProgram(ts.MkAbs(args[1]), b, st.Mode().Perm()))
}

// writeProgram writes a file that will be executed while holding syscall.ForkLock, so that no
// process forked meanwhile by another scenario holds a copy of the write descriptor: such a
// child, slow to reach its exec on a loaded machine, makes a later exec of path fail with
// "text file busy" (ETXTBSY).
func writeProgram(path string, data []byte, mode os.FileMode) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	return os.WriteFile(path, data, mode)
}

// timeoutFlag parses a leading -timeout=DURATION from args.
func timeoutFlag(ts *testscript.TestScript, name string, args []string, def time.Duration) (time.Duration, []string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	d := fs.Duration("timeout", def, "deadline")
	if err := fs.Parse(args); err != nil {
		ts.Fatalf("%s: %v", name, err)
	}
	return *d, fs.Args()
}

// waitfile [-timeout=30s] FILE...: wait until every FILE exists (! waitfile: until none does).
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	d, files := timeoutFlag(ts, "waitfile", args, 30*time.Second)
	if len(files) == 0 {
		ts.Fatalf("usage: waitfile [-timeout=D] FILE...")
	}
	ok := enginetest.Poll(d, func() bool {
		for _, f := range files {
			_, err := os.Stat(ts.MkAbs(f))
			if (err == nil) == neg {
				return false
			}
		}
		return true
	})
	if !ok {
		ts.Fatalf("waitfile: %v still not in the expected state after %v", files, d)
	}
}

// waitport [-timeout=30s] HOST:PORT: wait until a TCP connection to HOST:PORT succeeds
// (! waitport: until connections are refused).
func cmdWaitPort(ts *testscript.TestScript, neg bool, args []string) {
	d, rest := timeoutFlag(ts, "waitport", args, 30*time.Second)
	if len(rest) != 1 {
		ts.Fatalf("usage: waitport [-timeout=D] HOST:PORT")
	}
	ok := enginetest.Poll(d, func() bool {
		c, err := net.DialTimeout("tcp", rest[0], 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return (err == nil) != neg
	})
	if !ok {
		ts.Fatalf("waitport: %s not in the expected state after %v", rest[0], d)
	}
}

// freeport VAR...: set each VAR to a TCP port on 127.0.0.1 that is free right now.
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: freeport VAR...")
	}
	var ls []net.Listener
	for _, v := range args {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		ts.Check(err)
		ls = append(ls, l)
		ts.Setenv(v, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for _, l := range ls {
		l.Close()
	}
}

// readJSONPath reads FILE (or stdout/stderr of the last command) as JSON and returns the value at
// PATH, a dotted path such as .result.items.0.name ("." is the whole document).
func readJSONPath(ts *testscript.TestScript, file, path string) (any, bool) {
	var doc any
	data := ts.ReadFile(file)
	if err := json.Unmarshal([]byte(data), &doc); err != nil {
		ts.Fatalf("json: %s is not JSON: %v\n%s", file, err, data)
	}
	cur := doc
	for _, part := range strings.Split(strings.Trim(path, "."), ".") {
		if part == "" {
			continue
		}
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[part]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// jsonText renders a value for comparison: strings bare, everything else as compact JSON.
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// json FILE PATH [OP VALUE]: assert on the JSON value at PATH in FILE (stdout and stderr name the
// last command's output). OP is == (exact text; strings compare bare, others as compact JSON),
// ~ (regular expression) or len (array/object/string length). With no OP, PATH must exist;
// ! json FILE PATH: PATH must not exist.
func cmdJSON(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 && len(args) != 4 {
		ts.Fatalf("usage: json FILE PATH [==|~|len VALUE]")
	}
	v, ok := readJSONPath(ts, args[0], args[1])
	if len(args) == 2 {
		if ok == neg {
			ts.Fatalf("json: %s %s: present=%v", args[0], args[1], ok)
		}
		return
	}
	if !ok {
		ts.Fatalf("json: %s has no %s", args[0], args[1])
	}
	got, want := jsonText(v), args[3]
	var match bool
	switch args[2] {
	case "==":
		match = got == want
	case "~":
		match = regexp.MustCompile(want).MatchString(got)
	case "len":
		n := -1
		switch x := v.(type) {
		case []any:
			n = len(x)
		case map[string]any:
			n = len(x)
		case string:
			n = len(x)
		}
		match = strconv.Itoa(n) == want
		got = fmt.Sprintf("length %d", n)
	default:
		ts.Fatalf("json: unknown operator %q", args[2])
	}
	if match == neg {
		ts.Fatalf("json: %s %s: got %s, want %s %s (negated=%v)", args[0], args[1], got, args[2], want, neg)
	}
}

// jsonenv FILE PATH VAR: set VAR to the value at PATH in FILE (strings bare, others as JSON).
func cmdJSONEnv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: jsonenv FILE PATH VAR")
	}
	v, ok := readJSONPath(ts, args[0], args[1])
	if !ok {
		ts.Fatalf("jsonenv: %s has no %s", args[0], args[1])
	}
	ts.Setenv(args[2], jsonText(v))
}

// waitgone [-timeout=5s] PID...: wait until no process has any of the PIDs (a PID may also be
// given as @FILE, a file holding one PID per line). ! waitgone: every PID must still be alive.
func cmdWaitGone(ts *testscript.TestScript, neg bool, args []string) {
	d, rest := timeoutFlag(ts, "waitgone", args, 5*time.Second)
	var pids []int
	for _, a := range rest {
		fields := []string{a}
		if strings.HasPrefix(a, "@") {
			fields = strings.Fields(ts.ReadFile(a[1:]))
		}
		for _, f := range fields {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 {
				ts.Fatalf("waitgone: bad pid %q", f)
			}
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		ts.Fatalf("usage: waitgone [-timeout=D] PID|@FILE...")
	}
	alive := func(pid int) bool {
		if p, err := os.FindProcess(pid); err != nil || p.Signal(syscall.Signal(0)) != nil {
			return false
		}
		// A zombie has exited; it only waits for its parent to reap it.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			return s[i+2] != 'Z'
		}
		return true
	}
	if neg {
		for _, p := range pids {
			if !alive(p) {
				ts.Fatalf("waitgone: process %d is not alive", p)
			}
		}
		return
	}
	if !enginetest.Poll(d, func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	}) {
		ts.Fatalf("waitgone: processes %v still alive after %v", pids, d)
	}
}
