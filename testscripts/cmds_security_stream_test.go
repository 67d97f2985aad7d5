package testscripts

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerCmd("wsidle", cmdWSIdle)
	registerCmd("wshold", cmdWSHold)
}

// wsidle [-timeout=10s] URL: open a WebSocket to URL, send nothing, and wait until the server
// closes it; prints `closed CODE REASON`. Fails when it is still open after the timeout.
func cmdWSIdle(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("wsidle", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 10*time.Second, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || neg {
		ts.Fatalf("usage: wsidle [-timeout=10s] URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, fs.Arg(0), nil)
	ts.Check(err)
	defer c.CloseNow()
	start := time.Now()
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			ts.Fatalf("wsidle: the socket is still open after %v", *timeout)
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			ts.Fatalf("wsidle: the socket ended without a close frame after %v: %v", time.Since(start).Round(time.Millisecond), err)
		}
		fmt.Fprintf(ts.Stdout(), "closed %d %s\n", int(ce.Code), ce.Reason)
		return
	}
}

// wshold N URL: open N WebSockets to URL, one after the other, and keep those admitted until
// the script ends; prints `admitted A` and, when one was refused, `refused STATUS` of the first
// refusal (it stops there).
func cmdWSHold(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || neg {
		ts.Fatalf("usage: wshold N URL")
	}
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	admitted := 0
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, res, err := websocket.Dial(ctx, args[1], nil)
		cancel()
		if err != nil {
			if res == nil {
				ts.Fatalf("wshold: %v", err)
			}
			fmt.Fprintf(ts.Stdout(), "admitted %d\nrefused %d\n", admitted, res.StatusCode)
			return
		}
		admitted++
		ts.Defer(func() { _ = c.CloseNow() })
	}
	fmt.Fprintf(ts.Stdout(), "admitted %d\n", admitted)
}
