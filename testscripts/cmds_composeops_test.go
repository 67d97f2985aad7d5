package testscripts

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerCmd("waitworker", cmdWaitWorker)
}

// waitworker [-timeout=15s] [-count=N] NAME: poll engine::workers::list at $III_URL until N
// connections (default 1) named NAME are registered (for example iii-cli:compose-logs, a follower of iii compose logs);
// ! waitworker: until none is.
func cmdWaitWorker(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("waitworker", flag.ContinueOnError)
	d := fs.Duration("timeout", 15*time.Second, "")
	count := fs.Int("count", 1, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: waitworker [-timeout=D] [-count=N] NAME")
	}
	url := ts.Getenv("III_URL")
	if url == "" {
		ts.Fatalf("waitworker: III_URL is not set")
	}
	name := fs.Arg(0)
	var last string
	ok := enginetest.Poll(*d, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "waitworker", Namespace: protocol.DefaultNamespace, NoReconnect: true, TokenFile: os.DevNull})
		if err != nil {
			last = err.Error()
			return false
		}
		defer w.Close()
		out, err := w.Call(ctx, protocol.FnListWorkers, map[string]any{})
		if err != nil {
			last = err.Error()
			return false
		}
		var res struct {
			Workers []struct {
				Name       string `json:"name"`
				Registered bool   `json:"registered"`
			} `json:"workers"`
		}
		_ = json.Unmarshal(out, &res)
		n := 0
		for _, x := range res.Workers {
			if x.Name == name && x.Registered {
				n++
			}
		}
		last = string(out)
		if neg {
			return n == 0
		}
		return n >= *count
	})
	if !ok {
		ts.Fatalf("waitworker %s: gave up after %v (last: %s)", name, *d, last)
	}
}
