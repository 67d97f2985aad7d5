package testscripts

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerCmd("wshandshake", cmdWSHandshake)
	registerCmd("slowreader", cmdSlowReader)
}

// engineAddr is host:port of $III_URL.
func engineAddr(ts *testscript.TestScript) string {
	u, err := url.Parse(ts.Getenv("III_URL"))
	if err != nil || u.Host == "" {
		ts.Fatalf("III_URL %q is not a ws:// URL", ts.Getenv("III_URL"))
	}
	return u.Host
}

// wshandshake [-origin=O] [-host=H] PATH: send a raw WebSocket upgrade request for PATH to
// $III_URL with Origin O (none by default) and Host H (the engine's address by default); print
// the status line and, for a refusal, the body.
func cmdWSHandshake(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("wshandshake", flag.ContinueOnError)
	origin := fs.String("origin", "", "")
	host := fs.String("host", "", "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || neg {
		ts.Fatalf("usage: wshandshake [-origin=O] [-host=H] PATH")
	}
	addr := engineAddr(ts)
	if *host == "" {
		*host = addr
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	ts.Check(err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + fs.Arg(0) + " HTTP/1.1\r\nHost: " + *host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	if *origin != "" {
		req += "Origin: " + *origin + "\r\n"
	}
	_, err = io.WriteString(c, req+"\r\n")
	ts.Check(err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	ts.Check(err)
	defer resp.Body.Close()
	fmt.Fprintf(ts.Stdout(), "%s %s\n", resp.Proto, resp.Status)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprint(ts.Stdout(), string(b))
	}
}

// slowreader [-max-rss=MB] N: open a connection to $III_URL, send up to N
// engine::functions::list invocations and never read a reply. Stops when the engine closes the
// connection (a write fails); prints how many were sent and the engine's peak RSS (VmHWM of the
// process listening on $III_URL's port), and fails unless the engine closed the connection and,
// with -max-rss, its peak RSS stayed under MB.
func cmdSlowReader(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("slowreader", flag.ContinueOnError)
	maxRSS := fs.Int("max-rss", 0, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || neg {
		ts.Fatalf("usage: slowreader [-max-rss=MB] N")
	}
	n, err := strconv.Atoi(fs.Arg(0))
	ts.Check(err)
	addr := engineAddr(ts)
	_, port, _ := net.SplitHostPort(addr)
	pid := listenerPID(ts, port)
	before := vmHWM(ts, pid)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, ts.Getenv("III_URL"), nil)
	ts.Check(err)
	defer c.CloseNow()
	sent := 0
	for ; sent < n; sent++ {
		b, _ := json.Marshal(map[string]any{"type": protocol.TypeInvokeFunction, "invocation_id": strconv.Itoa(sent),
			"function_id": protocol.FnListFunctions, "data": map[string]any{}})
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Write(wctx, websocket.MessageText, b)
		wcancel()
		if err != nil {
			break
		}
	}
	after := vmHWM(ts, pid)
	fmt.Fprintf(ts.Stdout(), "sent %d of %d invocations without reading; engine peak RSS %d MB before, %d MB after\n", sent, n, before>>10, after>>10)
	if sent == n {
		ts.Fatalf("the engine never closed a connection that does not read")
	}
	fmt.Fprintln(ts.Stdout(), "the engine closed the connection")
	if *maxRSS > 0 && after>>10 > *maxRSS {
		ts.Fatalf("engine peak RSS %d MB, over %d MB", after>>10, *maxRSS)
	}
}

// listenerPID finds the process listening on TCP port (Linux /proc).
func listenerPID(ts *testscript.TestScript, port string) int {
	p, _ := strconv.Atoi(port)
	want := fmt.Sprintf(":%04X", p)
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) > 9 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		ts.Fatalf("no process listens on port %s (needs Linux /proc)", port)
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && inodes[l] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	ts.Fatalf("cannot find the process listening on port %s", port)
	return 0
}

// vmHWM is the peak resident set of pid in KiB.
func vmHWM(ts *testscript.TestScript, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	ts.Check(err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	ts.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
