package testscripts

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/enginetest"
)

// The product workers (workers/cmd/*) are release products, built by the harness; the events/
// scenarios add a NATS server and their own commands.
func init() {
	// A real NATS server for the scale scenarios, built from the Go module the workers use.
	registerBinary(binary{name: "nats-server", pkg: "github.com/nats-io/nats-server/v2", version: "0.0.0-test"})
	registerCmd("httpreq", cmdHTTPReq)
	registerCmd("seencheck", cmdSeenCheck)
	registerCmd("waitgrep", cmdWaitGrep)
}

// waitgrep [-timeout=30s] FILE REGEXP: wait until a line of FILE (missing: empty) matches REGEXP,
// such as the output of a background client that streams into FILE.
func cmdWaitGrep(ts *testscript.TestScript, neg bool, args []string) {
	d, rest := timeoutFlag(ts, "waitgrep", args, 30*time.Second)
	if neg || len(rest) != 2 {
		ts.Fatalf("usage: waitgrep [-timeout=D] FILE REGEXP")
	}
	re, err := regexp.Compile("(?m)" + rest[1])
	ts.Check(err)
	var b []byte
	if !enginetest.Poll(d, func() bool {
		b, _ = os.ReadFile(ts.MkAbs(rest[0]))
		return re.Match(b)
	}) {
		ts.Fatalf("waitgrep: no line of %s matches %s after %v; it holds:\n%s", rest[0], rest[1], d, b)
	}
}

// seencheck [-timeout=30s] [-exact N | -min N] [-each] FILE...: wait until the lines of the FILEs
// hold exactly N (or at least N) distinct values, failing at once when one value is in them
// twice; -each also waits until every FILE has a line. Missing files count as empty.
func cmdSeenCheck(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("seencheck", flag.ContinueOnError)
	d := fs.Duration("timeout", 30*time.Second, "")
	exact := fs.Int("exact", -1, "")
	least := fs.Int("min", -1, "")
	each := fs.Bool("each", false, "")
	if neg || fs.Parse(args) != nil || fs.NArg() == 0 || (*exact < 0) == (*least < 0) {
		ts.Fatalf("usage: seencheck [-timeout=D] (-exact N | -min N) [-each] FILE...")
	}
	state := ""
	ok := enginetest.Poll(*d, func() bool {
		seen := map[string]string{}
		empty := false
		for _, f := range fs.Args() {
			b, _ := os.ReadFile(ts.MkAbs(f))
			lines := strings.Fields(string(b))
			if len(lines) == 0 {
				empty = true
			}
			for _, l := range lines {
				if prev, dup := seen[l]; dup {
					ts.Fatalf("seencheck: %s is in %s and again in %s", l, prev, f)
				}
				seen[l] = f
			}
		}
		state = fmt.Sprintf("%d distinct values", len(seen))
		if *each && empty {
			return false
		}
		if *exact >= 0 {
			return len(seen) == *exact
		}
		return len(seen) >= *least
	})
	if !ok {
		ts.Fatalf("seencheck: not reached after %v (%s)", *d, state)
	}
	fmt.Fprintln(ts.Stdout(), state)
}

// httpreq METHOD URL [BODY] [HEADER:VALUE...]: one HTTP request (10 s deadline); stdout gets
// "<status>" on its first line, then the body. The URL must be on 127.0.0.1.
func cmdHTTPReq(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: httpreq METHOD URL [BODY] [HEADER:VALUE...]")
	}
	if !strings.HasPrefix(args[1], "http://127.0.0.1:") {
		ts.Fatalf("httpreq: only http://127.0.0.1 URLs")
	}
	body := ""
	if len(args) > 2 {
		body = args[2]
	}
	req, err := http.NewRequest(args[0], args[1], strings.NewReader(body))
	ts.Check(err)
	for _, h := range args[min(3, len(args)):] {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	ts.Check(err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "%d\n%s", res.StatusCode, b)
}
